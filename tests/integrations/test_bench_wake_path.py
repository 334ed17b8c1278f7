"""``python -m bench.wake_path``: the pairing of releases and acquires, and short real runs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import redis

from bench import _common, wake_path
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer


def test_merge_pairs_each_acquire_with_the_release_just_before_it() -> None:
    # worker 0 holds first; 1 takes it, 0 takes it back, 0 re-takes its own release, 1 takes it
    releases = [[(1.0, 1.1), (3.0, 3.1), (4.0, 4.1)], [(2.0, 2.1)]]
    acquires = [[{"t3": 2.5}, {"t3": 3.5}], [{"t3": 1.5}, {"t3": 4.5}]]
    handoffs, retakes = wake_path.merge(releases, acquires)
    assert retakes == 1
    assert [(h["t0"], h["t1"], h["t3"]) for h in handoffs] == [
        (1.0, 1.1, 1.5),
        (2.0, 2.1, 2.5),
        (4.0, 4.1, 4.5),
    ]


def test_steps_between_neighbouring_stamps_add_up_to_the_hand_off() -> None:
    handoff = {"t0": 0.0, "tcr": 1.0, "t2": 1.5, "t2x": 1.6, "tw": 2.0, "ts": 2.1, "tr": 3.0,
               "t3": 3.5, "tu0": 3.1, "tu1": 3.4, "woken": 1.0}  # fmt: skip
    run = wake_path.figures("fencelock", [handoff], retakes=0)
    shares = [share for *_, share in run.steps.values() if share == share]  # not NaN
    assert sum(shares) == pytest.approx(1.0)
    assert run.steps["hand-off (t3-t0)"][0] == pytest.approx(3.5)
    late = {**handoff, "tcr": -1.0}  # the listener had the message before the release: dropped
    assert not wake_path.kept("fencelock", late)
    assert not wake_path.kept("fencelock", {**handoff, "woken": 0.0})  # woken by the poll


def test_order_is_rotated_and_reversed() -> None:
    items = ["a", "b", "c"]
    assert wake_path.order_for(0, items) == ["a", "b", "c"]
    assert wake_path.order_for(1, items) == ["a", "c", "b"]
    assert wake_path.percentile([3.0, 1.0, 2.0], 50) == 2.0


@pytest.mark.parametrize("scenario", ["fencelock", "pubsub + thread hop", "LPUSH -> BLPOP"])
def test_a_short_run_hands_over_every_time(
    server: EmbeddedServer, raw: redis.Redis, scenario: str
) -> None:
    settings = wake_path.Settings(rounds=29, gap=0.0005, reacquire=False)
    handoffs, retakes = wake_path.pair_run(scenario, server.url, 0, settings)
    assert len(handoffs) == 30 and retakes == 0
    # the processes alternate; every hand-off is fully stamped but (fencelock) each process's
    # first, before its listener's connection existed to be stamped
    assert sum(wake_path.kept(scenario, h) for h in handoffs) >= 28
    for a, b in itertools.pairwise(sorted(handoffs, key=lambda h: h["t0"])):
        assert a["t3"] <= b["t0"]
    if scenario == "fencelock":
        assert not raw.exists(LockKeys.for_name(f"{wake_path.PREFIX}:fencelock:0").lock)


def test_main_prints_the_tables(server: EmbeddedServer, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--handoffs", "20", "--warmup", "5", "--repeat", "1", "--gap", "0.2",
            "--only", "fencelock", "round trips", "--url", server.url]  # fmt: skip
    assert wake_path.main(argv) == 0
    out = capsys.readouterr().out
    assert "### fencelock" in out and "### round trips" in out
    assert "| **hand-off (t3-t0)** |" in out
    assert "re-taken by the releaser [0]" in out


def test_per_handoff_is_the_median_of_the_hand_offs_by_the_message() -> None:
    read, wait = wake_path.READ_MESSAGE, wake_path.IN_WAIT
    snapshots = [
        ({}, True),
        ({(read, "py"): 10, (wait, "py"): 3}, True),
        ({(read, "py"): 30, (wait, "py"): 6}, True),
        ({(read, "py"): 100, (wait, "py"): 9}, False),  # B re-tried after its wake-up: left out
        ({(read, "py"): 112, (wait, "py"): 12}, True),
    ]
    counts, kept = wake_path.per_handoff(snapshots)
    assert kept == 3
    assert (counts[read, "py"], counts[wait, "py"], counts["path", "py"]) == (12, 3, 15)
    assert counts[wake_path.A_RELEASE, "c"] == 0


def test_count_prints_the_calls_of_each_stage(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert wake_path.main(["--count", "--handoffs", "10", "--url", server.url]) == 0
    out = capsys.readouterr().out
    for api in ("sync", "asyncio"):
        # every hand-off counted was woken by the message that granted the lock
        assert f"### {api} (10 hand-offs by the message kept)" in out
    rows = [line.split(" | ") for line in out.splitlines() if "the wake path" in line]
    assert len(rows) == 2 and all(float(row[1]) > 0 for row in rows)


def test_a_callgrind_total_is_read_from_its_file(tmp_path: Path) -> None:
    out = tmp_path / "sync-0.1234-02"
    out.write_text("version: 1\ncmd: python\nevents: Ir\nsummary: 1234567\ntotals: 1234567\n")
    assert _common.callgrind_total(out) == 1234567
    out.write_text("events: Ir\n")
    with pytest.raises(_common.BenchError):
        _common.callgrind_total(out)
