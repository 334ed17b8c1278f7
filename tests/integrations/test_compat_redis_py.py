"""fencelock.compat.redis_py where sync and asyncio differ (threads; cancellation), and redis-py's
own lock tests run through it (tools/peer_suite.py). The idioms of both APIs:
tests/integrations/_async/test_compat_redis_py.py."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
import redis.exceptions

from fencelock._keys import LockKeys
from fencelock.compat import redis_py, redis_py_asyncio
from fencelock.compat._sync import redis_py as redis_py_source
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import SyncCall, sync_until
from tests.conftest import KINDS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def r(server: EmbeddedServer, raw: redis.Redis) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port)
    yield client
    client.close()


def test_thread_local_token(r: redis.Redis) -> None:
    lock = redis_py.Lock(r, "mine", timeout=10)
    assert lock.acquire()

    def elsewhere() -> None:
        # another thread has no token: it neither owns nor can release the grant
        assert lock.local.token is None
        assert not lock.owned()
        with pytest.raises(redis.exceptions.LockError):
            lock.release()

    SyncCall(elsewhere).result()
    assert lock.owned()
    lock.release()


def test_thread_local_false_hands_the_grant_to_another_thread(r: redis.Redis) -> None:
    lock = redis_py.Lock(r, "passed", timeout=10, thread_local=False)
    assert lock.acquire()
    SyncCall(lock.release).result()
    assert not lock.locked()


def test_threads_sharing_one_lock_object_exclude_each_other(r: redis.Redis) -> None:
    lock = redis_py.Lock(r, "counter", timeout=10)
    inside, most = 0, 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(5):
            with lock:
                with guard:
                    inside += 1
                    most = max(most, inside)
                with guard:
                    inside -= 1

    calls = [SyncCall(work) for _ in range(4)]
    for call in calls:
        call.result()
    assert most == 1


def test_a_lock_dropped_while_held_expires(
    r: redis.Redis, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py's lock without timeout would stay for ever; here its lease is no longer renewed
    monkeypatch.setattr(redis_py_source, "RENEWED_LEASE", 0.3)
    lock = redis_py.Lock(r, "dropped")
    assert lock.acquire()
    with pytest.warns(ResourceWarning, match=r"acquired here, was dropped without release\(\)"):
        del lock
        gc.collect()
    sync_until(lambda: not raw.exists(LockKeys.for_name("dropped").lock))


def test_sync_acquire_takes_sleep_first(r: redis.Redis) -> None:
    # redis-py's sync order: acquire(sleep, blocking, blocking_timeout, token)
    holder = redis_py.Lock(r, "order")
    assert holder.acquire(0.01, False)
    assert not redis_py.Lock(r, "order").acquire(0.01, False)
    holder.release()


async def test_wait_for_cancels_an_acquire_and_leaks_no_grant(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    a, b = redis.asyncio.Redis(port=server.port), redis.asyncio.Redis(port=server.port)
    try:
        holder = redis_py_asyncio.Lock(a, "contended", timeout=10)
        assert await holder.acquire()
        waiter = redis_py_asyncio.Lock(b, "contended")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiter.acquire(), 0.2)
        assert waiter.local.token is None
        # the cancelled waiter left the queue: the release grants it nothing
        await holder.release()
        assert not raw.exists(LockKeys.for_name("contended").lock)
        assert await redis_py_asyncio.Lock(a, "contended").acquire(blocking=False)
    finally:
        for client in (a, b):
            await redis_py_asyncio.close_client(client)
            await client.aclose()


def test_one_redis_asyncio_client_across_event_loops(server: EmbeddedServer) -> None:
    # a global redis.asyncio client serving one asyncio.run after another (scripts, tests)
    user = redis.asyncio.Redis(port=server.port)

    async def cycle() -> int:
        async with redis_py_asyncio.Lock(user, "loops", timeout=5) as lock:
            return lock.fencing_token

    first = asyncio.run(cycle())
    assert asyncio.run(cycle()) > first  # a fencelock client of this loop, not the last one's

    async def close() -> None:
        await redis_py_asyncio.close_client(user)
        await user.aclose()

    asyncio.run(close())


@pytest.mark.parametrize("map_keys", [False, True], ids=["own-keys", "keys-mapped"])
def test_redis_py_own_lock_suite(map_keys: bool) -> None:
    """redis-py's tests/test_lock.py and tests/test_asyncio/test_lock.py of the installed
    version, on both server kinds: every test passes but those marked in
    tools/peer_shims/redis_py/conftest.py, each with the deliberate difference that explains it
    (strict: a marked test that passes fails the run). ``map_keys``: the tests' own commands on
    the lock's key go to fencelock's key of that lock, so that only their reads of redis-py's
    key layout are left out."""
    command = [sys.executable, "tools/peer_suite.py", "--json", "--servers", ",".join(KINDS)]
    if map_keys:
        command.append("--map-keys")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    if done.returncode == 3:
        pytest.skip(f"redis-py's source distribution cannot be downloaded: {done.stderr}")
    results = json.loads(done.stdout)
    for kind in KINDS:
        counts = results[kind]
        assert counts["failed"] == 0, counts["failures"]
        assert counts["passed"] >= (70 if map_keys else 40), counts
    assert done.returncode == 0, done.stderr
