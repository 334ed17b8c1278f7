"""``fencelock.fences.files``: fenced atomic replaces of a file, on the local filesystem, by
threads and processes."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

import fencelock
from fencelock import fences


def test_a_newer_token_replaces_the_file_and_an_older_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    assert fences.files.token(path) is None
    fences.files.write(path, b"five", token=5)
    assert (path.read_bytes(), fences.files.token(path)) == (b"five", 5)
    fences.files.write(str(path), b"five again", token=5)  # the same holder again
    with pytest.raises(fencelock.StaleToken) as refused:
        fences.files.write(path, b"four", token=4)
    assert (refused.value.key, refused.value.token, refused.value.seen) == (str(path), 4, 5)
    assert (path.read_bytes(), fences.files.token(path)) == (b"five again", 5)
    fences.files.write(path, b"max", token=2**63 - 1)
    assert (path.read_bytes(), fences.files.token(path)) == (b"max", 2**63 - 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".report.json.fence", "report.json"]


@pytest.mark.parametrize(
    ("path", "data", "token", "error"),
    [
        ("out", b"x", 0, ValueError),
        ("out", b"x", -3, ValueError),
        ("out", b"x", 2**63, ValueError),
        ("out", b"x", "1", TypeError),
        ("out", b"x", None, TypeError),
        ("out", "text", 1, TypeError),
        (5, b"x", 1, TypeError),
        (b"out", b"x", 1, TypeError),
        ("", b"x", 1, ValueError),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: Any,
    data: Any,
    token: Any,
    error: type[Exception],
) -> None:
    monkeypatch.chdir(tmp_path)  # (a relative path lands here)
    with pytest.raises(error):
        fences.files.write(path, data, token=token)
    assert list(tmp_path.iterdir()) == []


def test_a_writer_holding_the_lock_times_the_next_out_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data"
    fences.files.write(path, b"one", token=1)
    holder = os.open(fences.files.fence_path(path), os.O_RDWR)  # another writer, mid-write
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(fencelock.LockTimeout):
            fences.files.write(path, b"two", token=2, timeout=0)
        with pytest.raises(fencelock.LockTimeout):
            fences.files.token(path, timeout=0)
    finally:
        os.close(holder)
    assert (path.read_bytes(), fences.files.token(path)) == (b"one", 1)


def _write_all(path: str, tokens: list[int]) -> list[tuple[float, float, int]]:
    """Write each token's number; the accepted writes as (sent, answered, token), on the
    machine's monotonic clock (one clock for every process)."""
    accepted = []
    for token in tokens:
        sent = time.monotonic()
        try:
            fences.files.write(path, str(token).encode(), token=token)
        except fencelock.StaleToken:
            continue
        accepted.append((sent, time.monotonic(), token))
    return accepted


def test_processes_writing_at_once_never_land_a_stale_write(tmp_path: Path) -> None:
    path = str(tmp_path / "counter")
    tokens = [list(range(start, 400, 4)) for start in range(1, 5)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.starmap(_write_all, [(path, t) for t in tokens], chunksize=1)
    accepted = [write for result in results for write in result]
    stale = [
        (late, early)
        for late in accepted
        for early in accepted
        if early[1] < late[0] and early[2] > late[2]  # answered before it was sent, newer
    ]
    assert stale == []
    assert Path(path).read_bytes() == b"399"
    assert fences.files.token(path) == 399
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_refused_write_is_reported_like_fenced_sets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every sink reports a refusal as fenced_set does: a warning on ``fencelock.fence`` with
    the resource and the token (and the metric, through the same event)."""
    path = tmp_path / "f"
    fences.files.write(path, b"2", token=2)
    with caplog.at_level("WARNING", logger="fencelock.fence"), pytest.raises(fencelock.StaleToken):
        fences.files.write(path, b"1", token=1)
    [record] = [r for r in caplog.records if r.name == "fencelock.fence"]
    assert (getattr(record, "key", None), getattr(record, "token", None)) == (str(path), 1)
