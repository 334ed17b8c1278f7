"""fencelock.compat.redis_py(_asyncio): redis-py's lock idioms on real servers. Sync twin
generated into tests/integrations/_sync by tools/gen_sync.py (threads, wait_for and redis-py's
own suite: tests/integrations/test_compat_redis_py.py)."""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import AsyncIterator

import pytest
import redis
import redis.exceptions

import fencelock
from fencelock._keys import LockKeys
from fencelock._transport import AsyncRedis, AsyncRedisCluster
from fencelock.compat import redis_py_asyncio as compat
from fencelock.compat._async import redis_py as source
from fencelock_tools.servers.embedded import EmbeddedServer, free_port
from fencelock_tools.servers.topology import Cluster
from tests.concurrency import AsyncCall, async_until

# one request timeout (the LockClient default) plus room for a loaded machine
BOUND_MARGIN = 5.0 + 2.0


def key(name: str) -> str:
    return LockKeys.for_name(name).lock


@pytest.fixture
async def r(server: EmbeddedServer, raw: redis.Redis) -> AsyncIterator[AsyncRedis]:
    client = AsyncRedis(port=server.port)
    yield client
    await compat.close_client(client)
    await client.aclose()


@pytest.fixture
async def r2(server: EmbeddedServer, raw: redis.Redis) -> AsyncIterator[AsyncRedis]:
    """Another application client: another fencelock client, as another process would have."""
    client = AsyncRedis(port=server.port)
    yield client
    await compat.close_client(client)
    await client.aclose()


async def test_with_lock_holds_and_fences(r: AsyncRedis, raw: redis.Redis) -> None:
    async with compat.lock(r, "job", timeout=10) as held:
        assert await held.owned() and await held.locked()
        first = held.fencing_token
        assert 0 < raw.pttl(key("job")) <= 10_000
    assert not await held.locked() and not await held.owned()
    async with compat.Lock(r, "job", timeout=10) as again:
        assert again.fencing_token > first


async def test_blocking_false_and_blocking_timeout(r: AsyncRedis, r2: AsyncRedis) -> None:
    holder = compat.Lock(r, "busy")
    assert await holder.acquire(blocking=False)
    assert not await compat.Lock(r2, "busy", blocking=False).acquire()
    other = compat.Lock(r2, "busy", blocking_timeout=0.2)
    started = time.monotonic()
    assert not await other.acquire()
    assert 0.2 <= time.monotonic() - started < 0.2 + BOUND_MARGIN
    assert not await other.acquire(blocking=False)  # the argument beats the lock's default
    with pytest.raises(compat.LockTimeoutError) as caught:
        async with compat.Lock(r2, "busy", blocking_timeout=0.1):
            pass
    assert isinstance(caught.value, redis.exceptions.LockError)
    assert isinstance(caught.value, fencelock.LockTimeout)
    assert caught.value.lock_name == "busy"
    await holder.release()


async def test_a_release_wakes_a_blocked_acquire(r: AsyncRedis, r2: AsyncRedis) -> None:
    holder = compat.Lock(r, "handover")
    assert await holder.acquire()
    # sleep is unused (no polling); thread_local=False: the sync twin acquires in a thread
    waiter = compat.Lock(r2, "handover", sleep=3600, thread_local=False)
    call = AsyncCall(lambda: waiter.acquire(blocking_timeout=60))
    await async_until(lambda: bool(compat.client_for(r2).statistics().waiting))
    await holder.release()
    assert await call.result()
    assert await waiter.owned()
    await waiter.release()


async def test_extend_adds_replaces_and_reacquire_resets(r: AsyncRedis, raw: redis.Redis) -> None:
    lock = compat.Lock(r, "long", timeout=2)
    assert await lock.acquire()
    assert await lock.extend(10) is True
    assert 10_000 < raw.pttl(key("long")) <= 12_000
    assert await lock.extend(1, replace_ttl=True)
    assert raw.pttl(key("long")) <= 1_000
    assert await lock.reacquire() is True
    assert 1_000 < raw.pttl(key("long")) <= 2_000
    await lock.release()


async def test_lock_not_owned_after_expiry(r: AsyncRedis, r2: AsyncRedis, raw: redis.Redis) -> None:
    lock = compat.Lock(r, "brief", timeout=0.2)
    assert await lock.acquire()
    await async_until(lambda: not raw.exists(key("brief")))
    assert not await lock.owned()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        await lock.extend(1)
    with pytest.raises(redis.exceptions.LockNotOwnedError) as caught:
        await lock.release()
    assert isinstance(caught.value, fencelock.LockLost)
    assert lock.local.token is None
    # another took it meanwhile: the expired holder's release deletes nothing
    assert await lock.acquire()
    await async_until(lambda: not raw.exists(key("brief")))
    other = compat.Lock(r2, "brief")
    assert await other.acquire(blocking=False)
    with pytest.raises(compat.LockNotOwnedError):
        await lock.release()
    assert await other.owned()
    await other.release()


async def test_with_block_outliving_its_lease(r: AsyncRedis, raw: redis.Redis) -> None:
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        async with compat.Lock(r, "slow", timeout=0.2):
            await async_until(lambda: not raw.exists(key("slow")))
    async with compat.Lock(r, "slow", timeout=0.2, raise_on_release_error=False):
        await async_until(lambda: not raw.exists(key("slow")))


async def test_no_timeout_is_a_lease_renewed_while_held(
    r: AsyncRedis, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "RENEWED_LEASE", 0.3)
    lock = compat.Lock(r, "forever")
    assert await lock.acquire()
    assert 0 < raw.pttl(key("forever")) <= 300  # a holder that dies frees it
    await async_until(lambda: compat.client_for(r).statistics().renewals >= 3)
    assert await lock.owned()
    with pytest.raises(compat.LockError):
        await lock.extend(1)
    with pytest.raises(compat.LockError):
        await lock.reacquire()
    await lock.release()


async def test_decode_responses(server: EmbeddedServer, raw: redis.Redis) -> None:
    decoded = AsyncRedis(port=server.port, decode_responses=True)
    try:
        lock = compat.Lock(decoded, "text", timeout=5)
        assert await lock.acquire(blocking=False)
        assert await lock.owned() and await lock.locked()
        assert isinstance(lock.local.token, bytes)
        await lock.do_release(lock.local.token.decode())  # a str token, as redis-py allows
        assert not await lock.locked()
    finally:
        await compat.close_client(decoded)
        await decoded.aclose()


async def test_release_by_token_from_another_object(r: AsyncRedis, r2: AsyncRedis) -> None:
    lock = compat.Lock(r, "shared", timeout=10)
    assert await lock.acquire()
    other = compat.Lock(r2, "shared")
    other.local.token = lock.local.token  # redis-py's way to hand a grant over
    assert await other.owned()
    await other.release()
    assert not await lock.owned()
    with pytest.raises(compat.LockNotOwnedError):
        await other.do_release(b"not-a-token")


async def test_one_client_per_redis_client_closed_when_collected(server: EmbeddedServer) -> None:
    user = AsyncRedis(port=server.port)
    lock, again = compat.Lock(user, "a"), compat.Lock(user, "b")
    assert compat.client_for(user) is compat.client_for(user)
    assert await lock.acquire() and await again.acquire()
    await lock.release()
    await again.release()
    mine = id(user)
    assert mine in source._clients
    gc.collect()  # (what earlier tests left to the collector warns outside the block below)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lock, again, user
        gc.collect()
    assert mine not in source._clients
    assert not [w for w in caught if "LockClient" in str(w.message)]


async def test_bad_arguments(r: AsyncRedis) -> None:
    with pytest.raises(TypeError, match="redis must be"):
        compat.Lock("redis://localhost", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        compat.Lock(r, "x", timeout=0)
    with pytest.raises(ValueError, match="sleep"):
        compat.Lock(r, "x", sleep=-1)
    with pytest.raises(ValueError, match="blocking_timeout"):
        compat.Lock(r, "x", blocking_timeout=-1)
    with pytest.raises(TypeError, match="token"):
        await compat.Lock(r, "x").acquire(token="mine")
    lock = compat.Lock(r, "x", timeout=5)
    assert await lock.acquire()
    with pytest.raises(ValueError, match="additional_time"):
        await lock.extend(0)
    await lock.release()


async def test_a_refused_server_raises_redis_py_connection_error() -> None:
    user = AsyncRedis(port=free_port())
    try:
        lock = compat.Lock(user, "nowhere", blocking_timeout=1)
        started = time.monotonic()
        with pytest.raises(redis.exceptions.ConnectionError) as caught:
            await lock.acquire()
        assert isinstance(caught.value, fencelock.LockConnectionError)
        assert time.monotonic() - started < 1 + BOUND_MARGIN
    finally:
        await compat.close_client(user)
        await user.aclose()


async def test_redis_cluster(cluster: Cluster) -> None:
    user = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, decode_responses=True)
    try:
        async with compat.Lock(user, "sharded", timeout=5) as lock:
            assert await lock.owned() and lock.fencing_token > 0
            assert not await compat.Lock(user, "sharded").acquire(blocking=False)
        assert not await lock.locked()
    finally:
        await compat.close_client(user)
        await user.aclose()
