"""What only the sync API meets: processes, fork and threads."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest
import redis

import fencelock
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT, in_forked_child

COUNTER = "counter"


def _increment(url: str, times: int) -> None:
    client = fencelock.LockClient.from_url(url)
    server = redis.Redis.from_url(url)
    for _ in range(times):
        with client.lock("rmw", ttl=10, timeout=60):
            value = int(server.get(COUNTER) or 0)
            server.set(COUNTER, value + 1)
    client.close()
    server.close()


def test_four_processes_read_modify_write(server: EmbeddedServer, raw: redis.Redis) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_increment, args=(server.url, 200)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    assert raw.get(COUNTER) == "800"  # not one lost update
    assert not raw.exists(LockKeys.for_name("rmw").lock)


def test_threads_share_one_lock_name(sync_client: fencelock.LockClient, raw: redis.Redis) -> None:
    from tests.concurrency import SyncCall

    def work() -> None:
        lock = sync_client.lock("threads", ttl=10)
        for _ in range(50):
            assert lock.acquire(timeout=60)
            value = int(raw.get(COUNTER) or 0)
            raw.set(COUNTER, value + 1)
            lock.release()

    calls = [SyncCall(work) for _ in range(4)]
    for call in calls:
        call.result()
    assert raw.get(COUNTER) == "200"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_never_acts_on_parents_grant(
    sync_client: fencelock.LockClient, raw: redis.Redis
) -> None:
    lock = sync_client.lock("forked", ttl=30)
    assert lock.acquire(timeout=0)
    held_by_parent = raw.get(LockKeys.for_name("forked").lock)

    def child() -> int:
        code = 0
        try:
            lock.release()
            code |= 1
        except fencelock.LockNotOwned:
            pass
        try:
            lock.extend(ttl=1)
            code |= 2
        except fencelock.LockNotOwned:
            pass
        if lock.held():
            code |= 4
        own = sync_client.lock("child-own", ttl=5)  # the child's own locks work normally
        if not own.acquire(timeout=1):
            code |= 8
        own.release()
        return code

    assert in_forked_child(child) == 0
    assert raw.get(LockKeys.for_name("forked").lock) == held_by_parent
    assert raw.pttl(LockKeys.for_name("forked").lock) > 1000
    assert lock.held()
    lock.release()


def test_reentrant_lock_object_shared_by_threads(
    sync_client: fencelock.LockClient, raw: redis.Redis
) -> None:
    from tests.concurrency import SyncCall

    lock = sync_client.lock("re-thread", ttl=30, reentrant=True)
    assert lock.acquire(timeout=0)
    # the sync holder is the lock object: another thread using it re-enters
    assert SyncCall(lambda: lock.acquire(timeout=0)).result() is True
    other = sync_client.lock("re-thread", ttl=30, reentrant=True)
    assert SyncCall(lambda: other.acquire(timeout=0)).result() is False
    lock.release()
    assert lock.held()
    lock.release()
    assert not raw.exists(LockKeys.for_name("re-thread").lock)


def test_redlock_token_is_written_back_when_first_read(redlock: list[EmbeddedServer]) -> None:
    """The sync API writes a Redlock token that a majority did not grant (a node ahead gave
    a larger one) back to a majority lazily, at the first read: an acquire+release that never
    uses its token costs two round trips, not three."""
    client = fencelock.LockClient.from_url([s.url for s in redlock], node_timeout=0.5)
    keys = LockKeys.for_name("lazy")
    probes = [srv.client() for srv in redlock]
    lock = client.lock("lazy", ttl=30)
    ahead = time.time_ns() // 1000 + 10**9  # a counter a thousand seconds ahead, on one node
    probes[0].set(keys.fence, ahead)
    assert lock.acquire(timeout=0)
    for probe in probes[1:3]:  # two nodes granted it a smaller token still
        holder, _ = lock_value(probe.get(keys.lock))
        probe.set(keys.lock, f"{holder} 1", keepttl=True)
    assert [lock_value(p.get(keys.lock))[1] for p in probes[:3]] == [ahead + 1, 1, 1]
    token = lock.token
    assert token == ahead + 1
    # raised where still held: each node's lock key holds it
    assert [lock_value(p.get(keys.lock))[1] for p in probes] == [token] * 5
    lock.release()

    probes[0].set(keys.fence, 2 * ahead)  # the tokens differ again
    assert lock.acquire(timeout=0)
    for probe in probes[:3]:  # a majority lost the grant before its token was read
        probe.delete(keys.lock)
    with pytest.raises(fencelock.LockLost):
        _ = lock.token
    assert lock.lost
    for probe in probes:
        probe.close()
    client.close()


def test_an_async_on_lost_callback_is_refused(sync_client: fencelock.LockClient) -> None:
    async def on_lost(lock: fencelock.Lock) -> None:
        pass

    # a thread cannot await it: refused when the lock is made, not dropped unawaited later
    with pytest.raises(TypeError, match="on_lost is an async def"):
        sync_client.lock("cb", on_lost=on_lost)


def test_the_library_prints_nothing_where_logging_is_not_configured(server: EmbeddedServer) -> None:
    """A stale write refused is a StaleToken and a warning record: with no logging configured,
    the caller gets the exception, and stderr nothing (Python's last-resort handler used to
    print the warning too)."""
    script = f"""
import fencelock
client = fencelock.LockClient.from_url({server.url!r})
client.fenced_set("quiet", "new", 2)
try:
    client.fenced_set("quiet", "old", 1)
except fencelock.StaleToken:
    print("refused")
client.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "refused\n", "")


GREEN = """
import sys, warnings

if sys.argv[1] == "eventlet":
    warnings.filterwarnings("ignore", r"\\s*Eventlet is deprecated")  # (its own Warning class)
    import eventlet

    eventlet.monkey_patch()
else:
    from gevent import monkey

    monkey.patch_all()
import select, threading, time

import fencelock

assert hasattr(select, "poll") == (sys.argv[1] == "gevent")  # eventlet's select has none
assert threading.get_ident.__module__ != "_thread"  # threads are green ones
url = sys.argv[2]
with fencelock.LockClient.from_url(url) as client, fencelock.LockClient.from_url(url) as other:
    renewed = client.lock("green-renewed", 0.3, auto_renew=True)
    assert renewed.acquire(timeout=0)
    while client.statistics().renewals < 2:  # the watchdog, a green thread, renews it
        time.sleep(0.01)
    assert renewed.held()
    renewed.release()
    holder, waiter = client.lock("green", 30), other.lock("green", 30)
    assert holder.acquire(timeout=0)
    got = []
    waiting = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=None)))
    waiting.start()
    while other.statistics().waiting != 1:
        time.sleep(0.01)
    first = holder.token
    holder.release()  # wakes the waiter: pub/sub read by a green thread
    waiting.join()
    assert got == [True] and waiter.token > first
    print(other.statistics().wakeups)
    waiter.release()
"""


@pytest.mark.parametrize("library", ["eventlet", "gevent"])
def test_a_lock_under_green_threads(server: EmbeddedServer, library: str) -> None:
    """Under eventlet's or gevent's monkey-patching (done first, as they ask): a lock taken,
    renewed, waited on by a second client (in a green thread), woken by the release's
    message, and released.
    eventlet's select has no poll: every request raised AttributeError (the check of an idle
    connection used select.poll)."""
    done = subprocess.run(
        [sys.executable, "-c", GREEN, library, server.url],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1\n", "")
