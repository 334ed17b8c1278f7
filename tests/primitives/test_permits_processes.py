"""Semaphores and read-write locks against real holder processes: one frozen (SIGSTOP) past its
lease is told and fenced off, one killed (SIGKILL) gives its permits back when its lease ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import redis

import fencelock
from fencelock_tools.servers.embedded import EmbeddedServer

# how a holder process and the test take the one grant there is, per primitive
TAKE = {
    "semaphore": "client.semaphore(NAME, 1, ttl=TTL, auto_renew=True)",
    "write_lock": "client.rw_lock(NAME, ttl=TTL, auto_renew=True).write()",
    "read_lock vs writer": "client.rw_lock(NAME, ttl=TTL, auto_renew=True).read()",
}
SUCCESSOR: dict[str, Callable[[fencelock.LockClient, str], fencelock.Lock]] = {
    "semaphore": lambda client, name: client.semaphore(name, 1, ttl=10),
    "write_lock": lambda client, name: client.rw_lock(name, ttl=10).write(),
    "read_lock vs writer": lambda client, name: client.rw_lock(name, ttl=10).write(),
}

HOLDER = """
import sys, fencelock
NAME, TTL = sys.argv[2], 1.0
client = fencelock.LockClient.from_url(sys.argv[1])
grant = {take}
assert grant.acquire(timeout=0)
print(grant.token, flush=True)
sys.stdin.readline()  # frozen (or killed) here, past the ttl
try:
    grant.check()
    print("check passed", flush=True)
except fencelock.LockLost:
    print("check raised LockLost", flush=True)
try:
    client.fenced_set("resource-" + NAME, "written by the old holder", grant.token)
    print("write accepted", flush=True)
except fencelock.StaleToken:
    print("write refused", flush=True)
"""


def start_holder(server: EmbeddedServer, kind: str, name: str) -> tuple[subprocess.Popen[str], int]:
    script = textwrap.dedent(HOLDER).format(take=TAKE[kind])
    proc = subprocess.Popen(
        [sys.executable, "-c", script, server.url, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("kind", list(TAKE))
def test_a_frozen_holder_is_told_and_fenced_off(
    server: EmbeddedServer, raw: redis.Redis, kind: str
) -> None:
    name = f"frozen-{kind.replace(' ', '-')}"
    proc, old_token = start_holder(server, kind, name)
    os.kill(proc.pid, signal.SIGSTOP)  # a GC pause, a swap storm, a VM migration...
    client = fencelock.LockClient.from_url(server.url)
    try:
        grant = SUCCESSOR[kind](client, name)
        assert grant.acquire(timeout=30)  # once the frozen holder's lease has run out
        assert grant.token > old_token
        client.fenced_set(f"resource-{name}", "written by the new holder", grant.token)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate("go\n", timeout=30)
    assert out.splitlines() == ["check raised LockLost", "write refused"]
    assert raw.get(f"resource-{name}") == "written by the new holder"
    assert grant.held()
    grant.release()
    client.close()


@pytest.mark.parametrize("kind", list(TAKE))
def test_a_killed_holders_permits_come_back(server: EmbeddedServer, kind: str) -> None:
    name = f"killed-{kind.replace(' ', '-')}"
    proc, old_token = start_holder(server, kind, name)
    client = fencelock.LockClient.from_url(server.url)
    try:
        grant = SUCCESSOR[kind](client, name)
        assert not grant.acquire(timeout=0)
        proc.kill()  # SIGKILL: no release, no clean-up
        proc.wait(10)
        assert grant.acquire(timeout=30)  # taken back once its lease ended
        assert grant.token > old_token
        grant.release()
    finally:
        proc.kill()
        proc.wait(10)
        client.close()
