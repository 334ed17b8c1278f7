"""Leases against real processes: a holder frozen past its ttl, fork, thread counts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
import redis

import fencelock
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import in_forked_child

HOLDER = textwrap.dedent(
    """
    import sys, fencelock
    client = fencelock.LockClient.from_url(sys.argv[1])
    lock = client.lock("frozen", ttl=1.0, auto_renew=True)
    assert lock.acquire(timeout=0)
    print(lock.token, flush=True)
    sys.stdin.readline()  # the test freezes us here, past the ttl, then says go
    try:
        lock.check()
        print("check passed", flush=True)
    except fencelock.LockLost:
        print("check raised LockLost", flush=True)
    try:
        client.fenced_set("account", "written by the frozen holder", lock.token)
        print("write accepted", flush=True)
    except fencelock.StaleToken:
        print("write refused", flush=True)
    """
)


# The same under asyncio, whose leases are renewed by a thread off the loop: a process paused as
# a whole pauses that thread too, and must lose its lease all the same (issue 24).
ASYNC_HOLDER = textwrap.dedent(
    """
    import asyncio, sys, fencelock.asyncio
    async def main():
        client = fencelock.asyncio.LockClient.from_url(sys.argv[1])
        lock = client.lock("frozen", ttl=1.0, auto_renew=True)
        assert await lock.acquire(timeout=0)
        print(lock.token, flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # frozen here, past the ttl
        try:
            lock.check()
            print("check passed", flush=True)
        except fencelock.LockLost:
            print("check raised LockLost", flush=True)
        try:
            await client.fenced_set("account", "written by the frozen holder", lock.token)
            print("write accepted", flush=True)
        except fencelock.StaleToken:
            print("write refused", flush=True)
        await client.close()
    asyncio.run(main())
    """
)


@pytest.mark.parametrize("holder", [HOLDER, ASYNC_HOLDER], ids=["sync", "asyncio"])
def test_frozen_holder_learns_of_loss_and_is_fenced(
    server: EmbeddedServer, raw: redis.Redis, holder: str
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, server.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    old_token = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGSTOP)  # a GC pause, a swap storm, a VM migration...
    try:
        client = fencelock.LockClient.from_url(server.url)
        successor = client.lock("frozen", ttl=10)
        assert successor.acquire(timeout=30)  # once the frozen holder's lease runs out
        assert successor.token > old_token
        client.fenced_set("account", "written by the new holder", successor.token)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate("go\n", timeout=30)
    assert out.splitlines() == ["check raised LockLost", "write refused"]
    assert raw.get("account") == "written by the new holder"
    assert successor.held()
    successor.release()
    client.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_neither_renews_nor_releases(
    sync_client: fencelock.LockClient, raw: redis.Redis
) -> None:
    parent_lock = sync_client.lock("parent", ttl=30, auto_renew=True)
    assert parent_lock.acquire(timeout=0)
    key = LockKeys.for_name("parent").lock
    value = raw.get(key)

    def child() -> int:
        code = 0
        own = sync_client.lock("child", ttl=5, auto_renew=True)
        if not own.acquire(timeout=0):
            code |= 1
        if set(sync_client._wiring.watchdog._leases) != {own._lease.grant()}:
            code |= 2  # the parent's lease must not be renewed here
        try:
            parent_lock.release()
            code |= 4
        except fencelock.LockNotOwned:
            pass
        own.release()
        return code

    assert in_forked_child(child) == 0
    assert raw.get(key) == value
    assert len(sync_client._wiring.watchdog) == 1 and parent_lock.held()
    parent_lock.release()


def test_hundreds_of_leases_two_threads_at_most(
    sync_client: fencelock.LockClient, raw: redis.Redis
) -> None:
    before = threading.active_count()
    locks = [sync_client.lock(f"lease-{i}", ttl=30, auto_renew=True) for i in range(500)]
    for lock in locks:
        assert lock.acquire(timeout=0)
    waiter = sync_client.lock("lease-0", ttl=30)
    assert not waiter.acquire(timeout=0.05)  # a wait starts the pub/sub listener as well
    assert threading.active_count() - before <= 2
    for lock in locks:
        lock.release()
