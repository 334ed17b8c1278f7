"""once_per against real processes and a real scheduler: a runner frozen past its lease cannot
record the period its successor ran; a runner killed mid-job leaves the period to the next tick;
APScheduler in several "web workers" runs the job once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import redis

import fencelock
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT, sync_until

PERIOD = 3600.0
RECORD = "fencelock:{nightly}:once_per"

RUNNER = textwrap.dedent(
    """
    import sys, fencelock
    client = fencelock.LockClient.from_url(sys.argv[1])
    guard = client.once_per("nightly", 3600, ttl=1.0, offset=float(sys.argv[2]))

    def job():
        print(fencelock.current_token(), flush=True)
        sys.stdin.readline()  # the test freezes or kills us here, mid-job
        return "ran"

    try:
        guard.run(job)
        print("recorded", flush=True)
    except fencelock.StaleToken:
        print("record refused", flush=True)
    """
)


def _runner(server: EmbeddedServer, offset: float) -> tuple[subprocess.Popen[str], int]:
    """A runner process in the middle of its job, and the token it runs under."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, server.url, repr(offset)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _successor(server: EmbeddedServer, offset: float) -> tuple[object, int]:
    """The next tick, elsewhere: waits for the lock (the first runner's lease must end)."""
    with fencelock.LockClient.from_url(server.url) as client:
        tokens: list[int] = []

        def job() -> str:
            tokens.append(fencelock.current_token())
            return "successor ran"

        result = client.once_per("nightly", PERIOD, offset=offset, timeout=TIMEOUT).run(job)
        return result, tokens[0]


def test_a_runner_frozen_past_its_lease_cannot_record_the_period(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    offset = time.time() - PERIOD / 2
    proc, frozen_token = _runner(server, offset)
    os.kill(proc.pid, signal.SIGSTOP)  # a GC pause, a swap storm, a VM migration...
    try:
        # the period is not recorded, so the successor runs it once the lease has run out
        result, token = _successor(server, offset)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert result == "successor ran" and token > frozen_token
    out, _ = proc.communicate("go\n", timeout=TIMEOUT)
    assert out.splitlines() == ["record refused"]
    assert raw.get(RECORD) == "0"
    assert raw.get(RECORD + ":fencelock:fence") == str(token)  # the successor's record


def test_a_runner_killed_mid_job_leaves_the_period_to_the_next_tick(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    offset = time.time() - PERIOD / 2
    proc, killed_token = _runner(server, offset)
    proc.kill()
    proc.communicate(timeout=TIMEOUT)
    assert raw.get(RECORD) is None
    result, token = _successor(server, offset)
    assert result == "successor ran" and token > killed_token
    assert raw.get(RECORD) == "0"


def test_apscheduler_in_every_worker_runs_the_job_once_per_period(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    """The gunicorn case: each worker process starts the same scheduler with the same jobs."""
    background = pytest.importorskip("apscheduler.schedulers.background")
    offset = time.time() - PERIOD / 2
    runs: list[int] = []
    ticks = [0, 0, 0]
    guard = threading.Lock()
    clients = [fencelock.LockClient.from_url(server.url) for _ in ticks]
    schedulers = []
    try:
        for worker, client in enumerate(clients):

            @client.once_per("aps-report", PERIOD, offset=offset)
            def report() -> None:
                runs.append(fencelock.current_token())

            def tick(worker: int = worker, report: object = report) -> None:
                report()  # type: ignore[operator]
                with guard:
                    ticks[worker] += 1

            scheduler = background.BackgroundScheduler()
            scheduler.add_job(tick, "interval", seconds=0.05)
            scheduler.start()
            schedulers.append(scheduler)
        # every worker ticks the job several times in the one period
        sync_until(lambda: min(ticks) >= 5)
    finally:
        for scheduler in schedulers:
            scheduler.shutdown()
        for client in clients:
            client.close()
    assert len(runs) == 1
    assert raw.get("fencelock:{aps-report}:once_per") == "0"
