"""Singleflight and local hand-off: lock objects of one client queue locally for a name, and the
holder hands the lock straight to the next in line. Sync twin generated into tests/engine/_sync."""

from __future__ import annotations

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import AsyncCall, async_until

KEYS = LockKeys.for_name("hot")


def calls(raw: redis.Redis, command: str) -> int:
    stats = raw.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def queued(client: AsyncLockClient) -> int:
    return sum(len(line.tickets) for line in client._wiring.queues._lines.values())


async def test_waiters_of_one_client_queue_and_are_handed_the_lock(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    holder = async_client.lock("hot", ttl=10)
    assert await holder.acquire(timeout=0)
    order: list[tuple[int, int]] = []

    def take(i: int) -> AsyncCall:
        lock = async_client.lock("hot", ttl=10)

        async def run() -> None:
            assert await lock.acquire(timeout=None)
            order.append((i, lock.token))
            await lock.release()

        return AsyncCall(run)

    waiting = []
    for i in range(8):
        waiting.append(take(i))
        await async_until(lambda: queued(async_client) == i + 1)  # noqa: B023
    before = calls(raw, "evalsha")
    assert raw.pubsub_numsub(KEYS.channel) == [(KEYS.channel, 0)]  # nobody waits in Redis
    first = holder.token
    await holder.release()
    for call in waiting:
        await call.result()
    assert [i for i, _ in order] == list(range(8))  # first come, first served
    tokens = [token for _, token in order]
    # every hand-off is a grant with a larger token
    assert first < tokens[0] and tokens == list(range(tokens[0], tokens[0] + 8))
    # The first hand-off reserves a block of tokens (max_handoffs = 10) and restarts the lease;
    # the next seven cost no request at all. Then the last release.
    assert calls(raw, "evalsha") - before == 2
    assert async_client.statistics().handoffs == 8
    assert not raw.exists(KEYS.lock) and async_client._wiring.queues._lines == {}
    # the next grant outranks the whole block, the two tokens it left unused too
    assert await holder.acquire(timeout=0)
    assert holder.token > tokens[0] + 9
    await holder.release()


async def test_a_later_grant_outranks_every_reserved_token(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    holder = async_client.lock("hot", ttl=10)
    assert await holder.acquire(timeout=0)
    waiter = async_client.lock("hot", ttl=10)

    async def take() -> int:
        assert await waiter.acquire(timeout=None)
        token = waiter.token
        await waiter.release()
        return token

    call = AsyncCall(take)
    await async_until(lambda: queued(async_client) == 1)
    first = holder.token
    await holder.release()
    handed = await call.result()  # handed off, the first of a block of 10
    assert handed > first
    other = async_client_b.lock("hot", ttl=10)  # another process, after the streak
    assert await other.acquire(timeout=0)
    assert other.token > handed + 9  # larger than any token the block could still hand out
    await other.release()


async def test_a_hand_off_is_a_fresh_grant(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    first = async_client.lock("hot", ttl=1)
    second = async_client.lock("hot", ttl=60, auto_renew=True)
    assert await first.acquire(timeout=0)
    old_holder = raw.get(KEYS.lock)
    call = AsyncCall(lambda: second.acquire(timeout=None))
    await async_until(lambda: queued(async_client) == 1)
    token = first.token
    await first.release()
    assert await call.result()
    grant = second._lease.grant()
    if grant is None:  # asyncio: the grant belongs to the task that acquired
        grant = next(iter(async_client._wiring.watchdog._leases.values())).grant
    # The process keeps its holder token; the lease (1 s left, less than two thirds of the new
    # holder's 60 s) restarts at the new holder's ttl; a larger fencing token (the key holds the
    # last of the block reserved); the watchdog renews it.
    assert lock_value(raw.get(KEYS.lock)) == (lock_value(old_holder)[0], grant.reserved)
    assert lock_value(old_holder)[0] == grant.holder
    assert raw.pttl(KEYS.lock) > 30_000
    assert grant.fence > token
    assert len(async_client._wiring.watchdog) == 1
    with pytest.raises(fencelock.LockNotOwned):
        await first.release()  # the old grant is gone from the first lock object


async def test_the_streak_is_bounded_so_other_processes_get_a_turn(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    local = AsyncLockClient.from_url(server.url, max_handoffs=2)
    remote = AsyncLockClient.from_url(server.url)
    holder = local.lock("hot", ttl=10)
    assert await holder.acquire(timeout=0)
    other = remote.lock("hot", ttl=10)

    async def remote_turn() -> bool:
        granted = await other.acquire(timeout=None)
        await other.release()
        return granted

    remote_call = AsyncCall(remote_turn)
    await async_until(lambda: remote.statistics().waiting == 1)

    def take() -> AsyncCall:
        lock = local.lock("hot", ttl=10)

        async def run() -> None:
            assert await lock.acquire(timeout=None)
            await lock.release()

        return AsyncCall(run)

    calls_ = []
    for i in range(4):
        calls_.append(take())
        await async_until(lambda: queued(local) == i + 1)  # noqa: B023
    await holder.release()
    for call in calls_:
        await call.result()
    assert await remote_call.result()
    # holder -> 1 -> 2 locally, then through Redis (the remote waiter is woken), then 3 -> 4
    assert local.statistics().handoffs == 3
    await local.close()
    await remote.close()


async def test_a_queued_waiter_times_out_cleanly(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    holder = async_client.lock("hot", ttl=10)
    assert await holder.acquire(timeout=0)
    waiter = async_client.lock("hot", ttl=10)
    assert not await waiter.acquire(timeout=0)  # a local holder: no request at all
    assert not await waiter.acquire(timeout=0.05)
    assert queued(async_client) == 0
    await holder.release()
    assert not raw.exists(KEYS.lock)  # released in Redis: nobody was queued any more
    assert async_client.statistics().handoffs == 0
    assert await waiter.acquire(timeout=0)
    await waiter.release()


async def test_a_lost_lease_is_not_handed_off(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    holder = async_client.lock("hot", ttl=10)
    assert await holder.acquire(timeout=0)
    waiter = async_client.lock("hot", ttl=10)

    async def wait_then_release() -> int:
        assert await waiter.acquire(timeout=None)
        token = waiter.token
        await waiter.release()
        return token

    call = AsyncCall(wait_then_release)
    await async_until(lambda: queued(async_client) == 1)
    raw.delete(KEYS.lock)  # the holder's lease ends without its knowing
    first = holder.token
    with pytest.raises(fencelock.LockLost):
        await holder.release()
    assert await call.result() > first  # the waiter went to Redis and got a grant of its own
    assert async_client.statistics().handoffs == 0


async def test_a_holder_that_is_never_released_does_not_block_its_queue(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    leaked = async_client.lock("hot", ttl=0.3)
    assert await leaked.acquire(timeout=0)
    waiter = async_client.lock("hot", ttl=10)
    # once the leaked grant's lease has run out, the waiter stops waiting for it locally
    assert await waiter.acquire(timeout=10)
    assert waiter.token > leaked.token
    await waiter.release()


async def test_without_hand_offs_only_one_waiter_contends(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    client = AsyncLockClient.from_url(server.url, max_handoffs=0)
    holder = client.lock("hot", ttl=10)
    assert await holder.acquire(timeout=0)

    def take() -> AsyncCall:
        lock = client.lock("hot", ttl=10)

        async def run() -> None:
            assert await lock.acquire(timeout=None)
            await lock.release()

        return AsyncCall(run)

    calls_ = []
    for i in range(3):
        calls_.append(take())
        await async_until(lambda: queued(client) == i + 1)  # noqa: B023
    await holder.release()
    for call in calls_:
        await call.result()
    assert client.statistics().handoffs == 0
    assert client._wiring.queues._lines == {}
    await client.close()


async def test_max_handoffs_is_checked(server: EmbeddedServer) -> None:
    with pytest.raises(ValueError, match="max_handoffs"):
        AsyncLockClient.from_url(server.url, max_handoffs=-1)
    with pytest.raises(TypeError, match="max_handoffs"):
        AsyncLockClient.from_url(server.url, max_handoffs=1.5)  # type: ignore[arg-type]


async def test_waiters_queued_behind_a_head_in_redis_share_one_reserved_block(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    holder = async_client_b.lock("hot", ttl=10)  # another process holds it
    assert await holder.acquire(timeout=0)
    tokens: list[int] = []

    def take() -> AsyncCall:
        lock = async_client.lock("hot", ttl=10)

        async def run() -> None:
            assert await lock.acquire(timeout=None)
            tokens.append(lock.token)
            await lock.release()

        return AsyncCall(run)

    waiting = [take()]
    await async_until(lambda: async_client.statistics().waiting == 1)  # the head, in Redis
    for i in range(3):
        waiting.append(take())
        await async_until(lambda: queued(async_client) == i + 1)  # noqa: B023
    before = calls(raw, "evalsha")
    first = holder.token
    await holder.release()
    for call in waiting:
        await call.result()
    # The head queued in Redis before the others queued behind it, so the release granted it
    # one token; its hand-off reserved max_handoffs more, and the two hand-offs after that send
    # nothing. Requests: the holder's release, the first hand-off, the last release.
    assert first < tokens[0] < tokens[1]
    assert tokens[1:] == list(range(tokens[1], tokens[1] + 3))
    assert calls(raw, "evalsha") - before == 3
    assert async_client.statistics().handoffs == 3
    assert await holder.acquire(timeout=0)  # the next grant outranks the whole block
    assert holder.token > tokens[1] + 9
    await holder.release()
