# GENERATED from tests/engine/_async/test_singleflight.py by tools/gen_sync.py: edit that file instead.
"""Singleflight and local hand-off: lock objects of one client queue locally for a name, and the
holder hands the lock straight to the next in line. Sync twin generated into tests/engine/_sync."""

from __future__ import annotations

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import SyncCall, sync_until

KEYS = LockKeys.for_name("hot")


def calls(raw: redis.Redis, command: str) -> int:
    stats = raw.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def queued(client: LockClient) -> int:
    return sum(len(line.tickets) for line in client._wiring.queues._lines.values())


def test_waiters_of_one_client_queue_and_are_handed_the_lock(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    holder = sync_client.lock("hot", ttl=10)
    assert holder.acquire(timeout=0)
    order: list[tuple[int, int]] = []

    def take(i: int) -> SyncCall:
        lock = sync_client.lock("hot", ttl=10)

        def run() -> None:
            assert lock.acquire(timeout=None)
            order.append((i, lock.token))
            lock.release()

        return SyncCall(run)

    waiting = []
    for i in range(8):
        waiting.append(take(i))
        sync_until(lambda: queued(sync_client) == i + 1)  # noqa: B023
    before = calls(raw, "evalsha")
    assert raw.pubsub_numsub(KEYS.channel) == [(KEYS.channel, 0)]  # nobody waits in Redis
    first = holder.token
    holder.release()
    for call in waiting:
        call.result()
    assert [i for i, _ in order] == list(range(8))  # first come, first served
    tokens = [token for _, token in order]
    # every hand-off is a grant with a larger token
    assert first < tokens[0] and tokens == list(range(tokens[0], tokens[0] + 8))
    # The first hand-off reserves a block of tokens (max_handoffs = 10) and restarts the lease;
    # the next seven cost no request at all. Then the last release.
    assert calls(raw, "evalsha") - before == 2
    assert sync_client.statistics().handoffs == 8
    assert not raw.exists(KEYS.lock) and sync_client._wiring.queues._lines == {}
    # the next grant outranks the whole block, the two tokens it left unused too
    assert holder.acquire(timeout=0)
    assert holder.token > tokens[0] + 9
    holder.release()


def test_a_later_grant_outranks_every_reserved_token(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    holder = sync_client.lock("hot", ttl=10)
    assert holder.acquire(timeout=0)
    waiter = sync_client.lock("hot", ttl=10)

    def take() -> int:
        assert waiter.acquire(timeout=None)
        token = waiter.token
        waiter.release()
        return token

    call = SyncCall(take)
    sync_until(lambda: queued(sync_client) == 1)
    first = holder.token
    holder.release()
    handed = call.result()  # handed off, the first of a block of 10
    assert handed > first
    other = sync_client_b.lock("hot", ttl=10)  # another process, after the streak
    assert other.acquire(timeout=0)
    assert other.token > handed + 9  # larger than any token the block could still hand out
    other.release()


def test_a_hand_off_is_a_fresh_grant(sync_client: LockClient, raw: redis.Redis) -> None:
    first = sync_client.lock("hot", ttl=1)
    second = sync_client.lock("hot", ttl=60, auto_renew=True)
    assert first.acquire(timeout=0)
    old_holder = raw.get(KEYS.lock)
    call = SyncCall(lambda: second.acquire(timeout=None))
    sync_until(lambda: queued(sync_client) == 1)
    token = first.token
    first.release()
    assert call.result()
    grant = second._lease.grant()
    if grant is None:  # asyncio: the grant belongs to the task that acquired
        grant = next(iter(sync_client._wiring.watchdog._leases.values())).grant
    # The process keeps its holder token; the lease (1 s left, less than two thirds of the new
    # holder's 60 s) restarts at the new holder's ttl; a larger fencing token (the key holds the
    # last of the block reserved); the watchdog renews it.
    assert lock_value(raw.get(KEYS.lock)) == (lock_value(old_holder)[0], grant.reserved)
    assert lock_value(old_holder)[0] == grant.holder
    assert raw.pttl(KEYS.lock) > 30_000
    assert grant.fence > token
    assert len(sync_client._wiring.watchdog) == 1
    with pytest.raises(fencelock.LockNotOwned):
        first.release()  # the old grant is gone from the first lock object


def test_the_streak_is_bounded_so_other_processes_get_a_turn(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    local = LockClient.from_url(server.url, max_handoffs=2)
    remote = LockClient.from_url(server.url)
    holder = local.lock("hot", ttl=10)
    assert holder.acquire(timeout=0)
    other = remote.lock("hot", ttl=10)

    def remote_turn() -> bool:
        granted = other.acquire(timeout=None)
        other.release()
        return granted

    remote_call = SyncCall(remote_turn)
    sync_until(lambda: remote.statistics().waiting == 1)

    def take() -> SyncCall:
        lock = local.lock("hot", ttl=10)

        def run() -> None:
            assert lock.acquire(timeout=None)
            lock.release()

        return SyncCall(run)

    calls_ = []
    for i in range(4):
        calls_.append(take())
        sync_until(lambda: queued(local) == i + 1)  # noqa: B023
    holder.release()
    for call in calls_:
        call.result()
    assert remote_call.result()
    # holder -> 1 -> 2 locally, then through Redis (the remote waiter is woken), then 3 -> 4
    assert local.statistics().handoffs == 3
    local.close()
    remote.close()


def test_a_queued_waiter_times_out_cleanly(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    holder = sync_client.lock("hot", ttl=10)
    assert holder.acquire(timeout=0)
    waiter = sync_client.lock("hot", ttl=10)
    assert not waiter.acquire(timeout=0)  # a local holder: no request at all
    assert not waiter.acquire(timeout=0.05)
    assert queued(sync_client) == 0
    holder.release()
    assert not raw.exists(KEYS.lock)  # released in Redis: nobody was queued any more
    assert sync_client.statistics().handoffs == 0
    assert waiter.acquire(timeout=0)
    waiter.release()


def test_a_lost_lease_is_not_handed_off(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    holder = sync_client.lock("hot", ttl=10)
    assert holder.acquire(timeout=0)
    waiter = sync_client.lock("hot", ttl=10)

    def wait_then_release() -> int:
        assert waiter.acquire(timeout=None)
        token = waiter.token
        waiter.release()
        return token

    call = SyncCall(wait_then_release)
    sync_until(lambda: queued(sync_client) == 1)
    raw.delete(KEYS.lock)  # the holder's lease ends without its knowing
    first = holder.token
    with pytest.raises(fencelock.LockLost):
        holder.release()
    assert call.result() > first  # the waiter went to Redis and got a grant of its own
    assert sync_client.statistics().handoffs == 0


def test_a_holder_that_is_never_released_does_not_block_its_queue(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    leaked = sync_client.lock("hot", ttl=0.3)
    assert leaked.acquire(timeout=0)
    waiter = sync_client.lock("hot", ttl=10)
    # once the leaked grant's lease has run out, the waiter stops waiting for it locally
    assert waiter.acquire(timeout=10)
    assert waiter.token > leaked.token
    waiter.release()


def test_without_hand_offs_only_one_waiter_contends(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    client = LockClient.from_url(server.url, max_handoffs=0)
    holder = client.lock("hot", ttl=10)
    assert holder.acquire(timeout=0)

    def take() -> SyncCall:
        lock = client.lock("hot", ttl=10)

        def run() -> None:
            assert lock.acquire(timeout=None)
            lock.release()

        return SyncCall(run)

    calls_ = []
    for i in range(3):
        calls_.append(take())
        sync_until(lambda: queued(client) == i + 1)  # noqa: B023
    holder.release()
    for call in calls_:
        call.result()
    assert client.statistics().handoffs == 0
    assert client._wiring.queues._lines == {}
    client.close()


def test_max_handoffs_is_checked(server: EmbeddedServer) -> None:
    with pytest.raises(ValueError, match="max_handoffs"):
        LockClient.from_url(server.url, max_handoffs=-1)
    with pytest.raises(TypeError, match="max_handoffs"):
        LockClient.from_url(server.url, max_handoffs=1.5)  # type: ignore[arg-type]


def test_waiters_queued_behind_a_head_in_redis_share_one_reserved_block(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    holder = sync_client_b.lock("hot", ttl=10)  # another process holds it
    assert holder.acquire(timeout=0)
    tokens: list[int] = []

    def take() -> SyncCall:
        lock = sync_client.lock("hot", ttl=10)

        def run() -> None:
            assert lock.acquire(timeout=None)
            tokens.append(lock.token)
            lock.release()

        return SyncCall(run)

    waiting = [take()]
    sync_until(lambda: sync_client.statistics().waiting == 1)  # the head, in Redis
    for i in range(3):
        waiting.append(take())
        sync_until(lambda: queued(sync_client) == i + 1)  # noqa: B023
    before = calls(raw, "evalsha")
    first = holder.token
    holder.release()
    for call in waiting:
        call.result()
    # The head queued in Redis before the others queued behind it, so the release granted it
    # one token; its hand-off reserved max_handoffs more, and the two hand-offs after that send
    # nothing. Requests: the holder's release, the first hand-off, the last release.
    assert first < tokens[0] < tokens[1]
    assert tokens[1:] == list(range(tokens[1], tokens[1] + 3))
    assert calls(raw, "evalsha") - before == 3
    assert sync_client.statistics().handoffs == 3
    assert holder.acquire(timeout=0)  # the next grant outranks the whole block
    assert holder.token > tokens[1] + 9
    holder.release()
