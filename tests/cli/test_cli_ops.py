"""``fencelock ls``, ``inspect``, ``release`` and ``top`` end to end: the real command
(``python -m fencelock``) against a real server the test started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import redis

from fencelock._sync.client import LockClient
from fencelock.cli import main
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from tests.concurrency import TIMEOUT, SyncCall, sync_until

NAME = "orders:{eu}"


def fencelock(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FENCELOCK_URL", "REDIS_URL")}
    if url is not None:
        env["FENCELOCK_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "fencelock", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_ls_inspect_top_and_release(
    server: EmbeddedServer, raw: redis.Redis, sync_client: LockClient, sync_client_b: LockClient
) -> None:
    holder = sync_client.lock(NAME, 60, label="web-1:4242:MainThread")
    assert holder.acquire(timeout=0)
    assert sync_client.lock("invoices", 60, reentrant=True).acquire(timeout=0)
    waiter = sync_client_b.lock(NAME, 60, label="batch 7")
    # served by the forced release at the end, however long the commands before it take
    waiting = SyncCall(lambda: waiter.acquire(timeout=None))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)

    listed = fencelock("ls", "--url", server.url)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "HOLDER", "LABEL"]
    assert [row.split()[0] for row in rows] == ["invoices", NAME]
    lines = fencelock("ls", "orders:*", "--json", url=server.url).stdout.splitlines()
    [shown] = [json.loads(line) for line in lines]
    assert (shown["name"], shown["token"], shown["queued"]) == (NAME, holder.token, 1)
    assert [w["label"] for w in shown["waiters"]] == ["batch 7"]

    text = fencelock("inspect", NAME, "--url", server.url)
    assert text.returncode == 0, text.stderr
    assert f"token:   {holder.token}" in text.stdout
    assert "label web-1:4242:MainThread" in text.stdout and "batch 7" in text.stdout
    missing = fencelock("inspect", "nope", "--json", "--url", server.url)
    assert (missing.returncode, missing.stdout.strip()) == (1, "null")

    frames = fencelock("top", "--iterations", "2", "--interval", "0.05", "--json", url=server.url)
    assert frames.returncode == 0, frames.stderr
    views = [json.loads(line) for line in frames.stdout.splitlines()]
    assert len(views) == 2 and views[0]["held"] == 2 and views[0]["waiting"] == 1
    assert [lock["name"] for lock in views[0]["locks"]] == [NAME, "invoices"]  # busiest first
    once = fencelock("top", "--once", "--url", server.url)
    assert once.returncode == 0 and "2 held, 1 waiting" in once.stdout

    refused = fencelock("release", NAME, "--token", str(holder.token - 1), "--url", server.url)
    assert refused.returncode == 1 and "refused" in refused.stdout
    assert holder.held()
    freed = fencelock("release", NAME, "--token", str(holder.token), "--json", url=server.url)
    assert freed.returncode == 0, freed.stderr
    assert json.loads(freed.stdout)["outcome"] == "released"
    assert freed.stderr == ""  # the outcome once, on stdout (not the audit log line too)
    assert waiting.result()  # the waiter was served by the forced release
    assert not holder.held()
    assert waiter.token > holder.token
    again = fencelock("release", "nope", "--url", server.url)
    assert again.returncode == 0 and "not held" in again.stdout


def test_ls_and_inspect_show_semaphores_and_read_write_locks(
    server: EmbeddedServer, sync_client: LockClient
) -> None:
    jobs = [sync_client.semaphore("jobs", 5, 60, label=f"worker {i}") for i in range(2)]
    assert jobs[0].acquire(permits=2, timeout=0) and jobs[1].acquire(permits=1, timeout=0)
    readers = [sync_client.rw_lock("catalog", 60).read() for _ in range(2)]
    assert all(r.acquire(timeout=0) for r in readers)
    writer = sync_client.rw_lock("prices", 60).write()
    assert writer.acquire(timeout=0)

    listed = fencelock("ls", "--url", server.url)
    assert listed.returncode == 0, listed.stderr
    rows = {row.split()[0]: row for row in listed.stdout.splitlines()[1:]}
    assert sorted(rows) == ["catalog", "jobs", "prices"]
    assert "semaphore 3/5" in rows["jobs"]
    assert "read_lock x2" in rows["catalog"] and "write_lock" in rows["prices"]
    lines = fencelock("ls", "jobs", "--json", url=server.url).stdout.splitlines()
    [shown] = [json.loads(line) for line in lines]
    assert (shown["kind"], shown["count"], shown["limit"], shown["token"]) == (
        "semaphore",
        3,
        5,
        jobs[1].token,
    )
    assert sorted((h["label"], h["permits"]) for h in shown["holders"]) == [
        ("worker 0", 2),
        ("worker 1", 1),
    ]
    text = fencelock("inspect", "jobs", "--url", server.url)
    assert text.returncode == 0, text.stderr
    assert "holders: 2" in text.stdout and "label worker 0" in text.stdout
    info = sync_client.inspect("catalog")  # the library's inspect finds them too
    assert info is not None and (info.kind, len(info.holders)) == ("read_lock", 2)
    refused = fencelock("release", "prices", "--url", server.url)  # used to say "not held", 0
    assert refused.returncode == 1 and "a write_lock holds this name" in refused.stderr
    assert writer.held()
    for lock in [*jobs, *readers, writer]:
        lock.release()
    assert fencelock("ls", "--url", server.url).stdout == ""


def test_ls_and_inspect_show_a_build_in_progress_and_its_builder(server: EmbeddedServer) -> None:
    go = threading.Event()

    def build() -> str:
        assert go.wait(TIMEOUT)
        return "done"

    with LockClient.from_url(server.url, label="reports-worker-3") as client:
        building = SyncCall(lambda: client.compute_once("daily-report", build, fresh_for=60))
        sync_until(lambda: client.inspect("daily-report") is not None)
        listed = fencelock("ls", "--url", server.url)
        assert listed.returncode == 0, listed.stderr
        [row] = listed.stdout.splitlines()[1:]
        assert row.split()[0] == "daily-report"
        assert "reports-worker-3" in row and "compute build" in row
        text = fencelock("inspect", "daily-report", "--url", server.url)
        assert "label reports-worker-3" in text.stdout and "kind:    compute build" in text.stdout
        go.set()
        assert building.result() == "done"
    assert fencelock("ls", "--url", server.url).stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ["release", NAME, "--token", "x"],
        ["release", NAME, "--token", "0"],
        ["inspect"],
        ["top", "--once", "--iterations", "2"],
        ["ls", "--prefix", "{bad}"],
        ["ls", "--url", "redis://127.0.0.1/abc"],
    ],
)
def test_usage_errors_exit_64(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # in-process (the exit status logic is the same; a subprocess each would cost CI seconds)
    try:
        status = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code  # type: ignore[assignment]
    assert status == 64, capsys.readouterr().err


@pytest.mark.parametrize(
    "command", [["ls"], ["inspect", NAME], ["release", NAME], ["top", "--once"]]
)
def test_an_unreachable_server_exits_69(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The message names the server, and no internal key or SCAN pattern (ls said "SCAN
    'fencelock:{*}*:lock'"; issue 29, item 8)."""
    port = free_port()
    assert main([*command, "--url", f"redis://127.0.0.1:{port}/0"]) == 69
    said = capsys.readouterr().err
    assert said.startswith(f"fencelock: no server reachable at redis://127.0.0.1:{port}/0: ")
    assert "SCAN" not in said and "fencelock:" not in said.removeprefix("fencelock:"), said


def test_an_unreachable_server_exits_69_as_a_command() -> None:
    result = fencelock("ls", "--url", f"redis://127.0.0.1:{free_port()}/0")
    assert result.returncode == 69
    assert "no server reachable" in result.stderr


PARTICIPANT = """
import sys, fencelock
client = fencelock.LockClient.from_url(sys.argv[1])
for name in ("exports", "batch"):
    client.latch(name, 3, ttl=0.5, participant="exporter-2").join()
print("joined", flush=True)
sys.stdin.readline()  # SIGKILLed here
"""


def test_ls_inspect_and_top_show_latches(server: EmbeddedServer, sync_client: LockClient) -> None:
    """Every latch is listed, joined or not, as what is left of its count, with each
    participant's lease; a participant SIGKILLed after it joined shows its lease ended, and
    missing; a latch is not a held lock, and has no fencing token. Before: a latch nobody joined
    was not listed, and inspected as "hold count 2"; a joined one was listed as "no expiry" for
    the latch's 24 h, counted as held by top, with "token: - (counter gone)"."""
    sync_client.latch("made", 3).reset()
    assert sync_client.latch("exports", 3, participant="exporter-1").count_down() == 2
    alive = sync_client.latch("exports", 3, ttl=30, participant="exporter-3")
    alive.join()
    proc = subprocess.Popen(
        [sys.executable, "-c", PARTICIPANT, server.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"joined\n"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(TIMEOUT)
    finally:
        proc.kill()
    sync_until(lambda: alive.missing() == ("exporter-2",))  # once its lease has run out

    listed = fencelock("ls", "--url", server.url)
    assert listed.returncode == 0, listed.stderr
    rows = {row.split()[0]: row.split() for row in listed.stdout.splitlines()[1:]}
    assert sorted(rows) == ["batch", "exports", "made"]
    # NAME HOLDER LABEL TTL (2 words but "-") TOKEN KIND (2 words) WAITERS LONGEST WAIT
    assert rows["made"] == ["made", "-", "-", "-", "-", "latch", "3/3", "-", "-"]
    assert rows["batch"][2:5] == ["exporter-2", "0.000", "s"]  # its lease ended
    assert rows["exports"][2] == "exporter-3" and float(rows["exports"][3]) > 0
    assert rows["exports"][5:9] == ["-", "latch", "2/3", "-"]

    shown = fencelock("inspect", "exports", "--url", server.url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1:3] == ["kind:    latch 2/3 (2 left to count down of 3)", "joined:  2, 1 missing"]
    assert lines[3].split()[1:] == ["exporter-2", "lease", "ended:", "missing"]
    assert lines[4].split()[1:3] == ["exporter-3", "lease"] and lines[4].endswith(" s left")
    assert lines[5:] == ["token:   none (a latch hands out no fencing token)"]
    made = fencelock("inspect", "made", "--url", server.url).stdout.splitlines()
    assert made[1:3] == ["kind:    latch 3/3 (3 left to count down of 3)", "joined:  none"]

    once = fencelock("top", "--once", "--url", server.url)
    assert once.returncode == 0 and "0 held, 0 waiting, 3 latches" in once.stdout
    [frame] = fencelock("top", "--once", "--json", url=server.url).stdout.splitlines()
    assert (json.loads(frame)["held"], json.loads(frame)["latches"]) == (0, 3)
    refused = fencelock("release", "exports", "--url", server.url)
    assert refused.returncode == 1 and "a latch holds this name, not a lock" in refused.stderr
    assert "permits" not in refused.stderr  # (a latch has none)
