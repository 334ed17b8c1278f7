"""Fencing tokens that never go backwards, and no key left behind (_scripts/prelude.lua).
Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._keys import LockKeys
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import async_until

KEYS = LockKeys.for_name("job")


async def overtake(old: int, new_client: AsyncLockClient, resource: EmbeddedServer) -> None:
    """A new holder takes "job" and writes to a fresh resource; the old holder's write (token
    ``old``: it still believes it holds the lock) must then be refused."""
    lock = new_client.lock("job", ttl=10)
    assert await lock.acquire(timeout=0)
    new = lock.token
    assert new > old
    with resource.client() as probe:
        probe.delete("stock", "{stock}:fencelock:fence")
    writer = AsyncRedis.from_url(resource.url)
    await new_client.fenced_set("stock", "new", new, redis=writer)
    with pytest.raises(fencelock.StaleToken):
        await new_client.fenced_set("stock", "old", old, redis=writer)
    await writer.aclose()
    with resource.client() as probe:
        assert probe.get("stock") == b"new"
    await lock.release()


@pytest.mark.parametrize(
    "lose",
    [
        pytest.param(lambda raw: raw.flushall(), id="flushall"),
        pytest.param(lambda raw: raw.delete(KEYS.fence, KEYS.lock), id="counter-deleted"),
    ],
)
async def test_tokens_increase_after_the_counter_is_lost(
    async_client: AsyncLockClient,
    async_client_b: AsyncLockClient,
    raw: redis.Redis,
    server: EmbeddedServer,
    lose: Callable[[redis.Redis], object],
) -> None:
    old = async_client.lock("job", ttl=10)
    assert await old.acquire(timeout=0)
    token = old.token
    lose(raw)  # by hand, or a FLUSHALL: the lock and its counter are gone, the holder believes
    await overtake(token, async_client_b, server)  # the resource on the same server here


async def test_tokens_increase_after_a_restart_without_persistence(
    fresh_server: EmbeddedServer, server: EmbeddedServer
) -> None:
    client = AsyncLockClient.from_url(fresh_server.url)
    old = client.lock("job", ttl=10)
    assert await old.acquire(timeout=0)
    token = old.token
    fresh_server.kill()
    fresh_server.start()  # empty: no lock, no counter
    other = AsyncLockClient.from_url(fresh_server.url)  # another process
    await overtake(token, other, server)
    await other.close()
    await client.close()


async def test_tokens_increase_after_a_lagging_replica_is_promoted(
    replicated: tuple[EmbeddedServer, EmbeddedServer], server: EmbeddedServer
) -> None:
    master, replica = replicated
    client = AsyncLockClient.from_url(master.url)
    first = client.lock("job", ttl=30)
    assert await first.acquire(timeout=0)  # the replica has this grant and its counter
    await first.release()
    with master.client() as probe:
        assert probe.execute_command("WAIT", 1, 5000) == 1  # the replica has the release too
    # The replica stops following (a SIGSTOP would not do: the grant would wait for it in its
    # socket buffer); the grant below is on the master only, which then dies.
    with replica.client() as promote:
        promote.execute_command("REPLICAOF", "NO", "ONE")
    old = client.lock("job", ttl=30)
    assert await old.acquire(timeout=0)
    token = old.token
    master.kill()
    promoted = AsyncLockClient.from_url(replica.url)
    await overtake(token, promoted, server)
    await promoted.close()
    await client.close()


async def test_a_counter_ahead_of_the_clock_is_counted_on(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    ahead = 4 * 10**15  # the year 2096 in microseconds: as if handed out by a clock ahead
    raw.set(KEYS.fence, ahead)
    tokens = []
    for _ in range(3):
        lock = async_client.lock("job", ttl=10)
        assert await lock.acquire(timeout=0)
        tokens.append(lock.token)
        await lock.release()
    assert tokens == [ahead + 1, ahead + 2, ahead + 3]
    # kept until the clock has passed it, not for the lease only
    assert raw.pttl(KEYS.fence) > 10**9


@pytest.mark.parametrize("reentrant", [False, True], ids=["simple", "reentrant"])
async def test_no_key_is_left_once_the_names_are_idle(
    async_client: AsyncLockClient, raw: redis.Redis, reentrant: bool
) -> None:
    # Per-entity names (order:{id}) must not grow Redis without bound: once a name is free
    # none of its keys remains (bench/garbage.py: 100,000 names): a simple lock's token leaves
    # with its key (its server's clock is past it by the release); a reentrant lock's counter
    # is kept for the lease time.
    for i in range(200):
        lock = async_client.lock(f"order:{i}", ttl=0.2, reentrant=reentrant)
        assert await lock.acquire(timeout=0)
        await lock.release()
    if reentrant:
        assert raw.keys("fencelock:*")  # the counters, for the lease time
    else:
        assert raw.keys("fencelock:*") == []
    await async_until(lambda: raw.keys("fencelock:*") == [], timeout=5)
