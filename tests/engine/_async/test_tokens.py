"""Fencing tokens that never go backwards, and no key left behind (_scripts/prelude.lua).
Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT, async_until

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


async def test_a_release_keeps_a_token_the_clock_has_not_passed(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # The server's clock stepped back during the hold (here: the held token moved ahead of it
    # instead): the release reads the clock and keeps the token in the counter, so the next
    # grant counts on from it rather than from the clock.
    lock = async_client.lock("job", ttl=10)
    assert await lock.acquire(timeout=0)
    ahead = 4 * 10**15  # the year 2096 in microseconds
    raw.set(KEYS.lock, f"{lock.holder} {ahead}", keepttl=True)
    await lock.release()
    assert not raw.exists(KEYS.lock) and raw.get(KEYS.fence) == str(ahead)
    assert raw.pttl(KEYS.fence) > 10**9  # until the clock passes it
    assert await lock.acquire(timeout=0)
    assert lock.token == ahead + 1
    await lock.release()


async def test_a_shorter_extend_keeps_a_token_the_clock_has_not_passed(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # A lock key whose token is ahead of the server's clock (a Redlock proposal; here the
    # clock stepped back during the hold) is all that holds it: an extend() to a shorter lease
    # keeps the key until the clock has passed the token (a later grant's token comes from the
    # clock).
    lock = async_client.lock("job", ttl=10)
    assert await lock.acquire(timeout=0)
    ahead = server_micros(raw) + 60 * 10**6
    raw.set(KEYS.lock, f"{lock.holder} {ahead}", keepttl=True)
    await lock.extend(ttl=0.2)
    assert raw.pexpiretime(KEYS.lock) >= ahead // 1000 + 2  # (it was the 0.2 s before)
    await lock.release()


async def test_a_counter_the_clock_has_passed_goes_with_the_next_grant(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # A counter left below the clock (a token kept until the clock passed it, whose expiry a
    # hand-off block or a reentrant lease lengthened) is no token to count on from: the
    # uncontended grant takes the clock and deletes the counter, its lock key holding the
    # larger token (a held lock is one key), where it kept the counter before.
    lock = async_client.lock("job", ttl=10)
    raw.set(KEYS.fence, 5, px=60_000)
    assert await lock.acquire(timeout=0)
    assert lock.token > 5
    assert not raw.exists(KEYS.fence)
    assert lock_value(raw.get(KEYS.lock)) == (lock.holder, lock.token)
    await lock.release()
    raw.set(KEYS.fence, "not a number")  # a counter that is no counter: still refused
    with pytest.raises(fencelock.LockError, match="not an integer"):
        await lock.acquire(timeout=0)
    raw.delete(KEYS.fence)


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
        # (a wait: a loaded machine may bring a grant so late that it is given back)
        assert await lock.acquire(timeout=TIMEOUT)
        await lock.release()
    if reentrant:
        assert raw.keys("fencelock:*")  # the counters, for the lease time
    else:
        assert raw.keys("fencelock:*") == []
    await async_until(lambda: raw.keys("fencelock:*") == [], timeout=5)


# -- keys laid out by an older fencelock (docs/migrating.md, "Upgrading a fleet") -----------------
# Before one key per held lock, a simple lock's key held its holder token alone and the counter
# held the grant's token for the lease and until the server's clock had passed it. Built here by
# hand, as an older process leaves them.


def server_micros(raw: redis.Redis) -> int:
    seconds, micros = raw.time()
    return int(seconds) * 10**6 + int(micros)


@pytest.mark.parametrize("ahead_s", [0, 5], ids=["counter-at-the-clock", "counter-ahead"])
async def test_an_older_processes_lock_is_busy_and_its_token_outrun(
    async_client: AsyncLockClient, raw: redis.Redis, ahead_s: int
) -> None:
    older = server_micros(raw) + ahead_s * 10**6  # its grant's token, or a block reserved ahead
    raw.set(KEYS.lock, "older-holder", px=10_000)
    raw.set(KEYS.fence, older, pxat=older // 1000 + 10_000)
    lock = async_client.lock("job", ttl=10)
    assert not await lock.acquire(timeout=0)  # its holder token alone: a holder all the same
    assert raw.get(KEYS.lock) == "older-holder"
    info = await async_client.inspect("job")
    assert info is not None and info.token == older  # its token is the counter's
    raw.delete(KEYS.lock)  # the older process's release (its counter stays)
    assert await lock.acquire(timeout=0)
    assert lock.token > older
    await lock.release()


async def test_an_older_release_s_grant_is_kept_and_released_by_a_newer_holder(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    # An older process's release granted the name to this waiter: its holder token alone in
    # the key, the grant's token in the counter, kept for the lease.
    lock = async_client.lock("job", ttl=10)
    assert await lock.acquire(timeout=0)
    holder, granted = lock_value(raw.get(KEYS.lock))
    assert holder and granted == lock.token
    raw.set(KEYS.lock, holder, keepttl=True)
    raw.set(KEYS.fence, granted, px=10_000)
    assert await lock.held()
    await lock.extend(30)
    assert 10_000 < raw.pttl(KEYS.lock) <= 30_000
    other = async_client_b.lock("job", ttl=10)
    assert not await other.acquire(timeout=0)
    info = await async_client.inspect("job")
    assert info is not None and info.token == granted
    await lock.release()
    assert not raw.exists(KEYS.lock)
    assert await other.acquire(timeout=0)
    assert other.token > granted
    await other.release()


async def test_a_newer_grant_never_matches_an_older_processes_compare(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # An older process compares the lock key with a holder token alone (GET == holder in its
    # scripts, SET ... IFEQ holder in its script-free mode): a newer grant's key never equals
    # its holder token, so an older process can neither take, extend nor delete it, even with
    # that holder token (an older waiter a newer release granted the name to: it learns its
    # lock lost at its first renewal, and the name stays held until the lease ends).
    lock = async_client.lock("job", ttl=10)
    assert await lock.acquire(timeout=0)
    value, holder = raw.get(KEYS.lock), lock.holder
    assert holder is not None and value != holder and value.startswith(f"{holder} ")
    older_release = (
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end"
    )
    assert raw.eval(older_release, 1, KEYS.lock, holder) is None
    assert raw.get(KEYS.lock) == value
    await lock.release()
