"""Latches and barriers against real participant processes: one SIGKILLed after it joined is
named by ``missing()`` once its lease ends (Redisson's latch would wait for it for ever, none
the wiser), and a barrier's survivors are not held up by it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import fencelock
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT

PARTICIPANT = """
import sys, fencelock
client = fencelock.LockClient.from_url(sys.argv[1])
if sys.argv[2] == "latch":
    fencelock_latch = client.latch("batch", 2, ttl=0.5, participant="worker-2")
    fencelock_latch.join()
else:
    assert client.barrier("phase", 2, ttl=0.5).enter(timeout=30)
print("in", flush=True)
sys.stdin.readline()  # killed here
"""


def start(server: EmbeddedServer, what: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARTICIPANT, server.url, what],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc


def test_a_killed_participant_is_missing(server: EmbeddedServer) -> None:
    with fencelock.LockClient.from_url(server.url) as client:
        alive = client.latch("batch", 2, ttl=10, participant="worker-1")
        alive.join()
        proc = start(server, "latch")
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "in\n"
            assert alive.missing() == ()  # alive, renewed
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(TIMEOUT)
            deadline = time.monotonic() + TIMEOUT
            while alive.missing() != ("worker-2",):  # once its lease has run out
                assert time.monotonic() < deadline, alive.missing()
                time.sleep(0.05)
            assert alive.count_down() == 1
            assert not alive.wait(timeout=0)  # it never counted: the latch stays shut
            assert alive.missing() == ("worker-2",)
            info = client.inspect("batch")
            assert info is not None and [(h.label, h.ttl) for h in info.holders] == [
                ("worker-2", 0.0)
            ]
        finally:
            proc.kill()


def test_a_killed_party_does_not_hold_the_barrier_up(server: EmbeddedServer) -> None:
    with fencelock.LockClient.from_url(server.url) as client:
        alive = client.barrier("phase", 2, ttl=10)
        proc = start(server, "barrier")
        try:
            assert alive.enter(timeout=30)
            assert proc.stdout is not None and proc.stdout.readline() == "in\n"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(TIMEOUT)
            assert alive.leave(timeout=None)  # once the killed party's lease has run out
        finally:
            proc.kill()
