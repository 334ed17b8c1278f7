"""Countdown latches and double barriers: counted once per participant, woken by pub/sub,
participants with leases (a dead one is named), generations.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._async.latch import AsyncLatch
from fencelock._backend import async_sleep
from fencelock._core.latch import LatchKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import RENEWED_TTL, TIMEOUT, AsyncCall, async_until, evalsha_calls


@pytest.mark.glide
async def test_the_latch_opens_when_every_participant_counted_down(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    waiter = async_client_b.latch("l-open", 3)
    waiting = AsyncCall(lambda: waiter.wait(timeout=None))
    workers = [async_client.latch("l-open", 3) for _ in range(3)]
    assert await workers[0].count_down() == 2
    assert await workers[1].count_down() == 1
    assert await waiter.count() == 1 and not await waiter.wait(timeout=0)
    assert await workers[2].count_down() == 0
    assert await waiting.result()
    assert await waiter.wait(timeout=0)  # open: returns at once from now on
    assert await waiter.count() == 0


@pytest.mark.parametrize("keyword", ["on_lost_policy", "auto_renew", "label"])
async def test_lease_options_a_participant_does_not_take_are_refused(
    async_client: AsyncLockClient, keyword: str
) -> None:
    """A participant's lease is always renewed, labelled by its id, and ends by no block's
    policy: those keywords were accepted and ignored; each is refused now, naming what is
    taken."""
    given = {keyword: "cancel" if keyword == "on_lost_policy" else True}
    with pytest.raises(TypeError, match=rf"latch\(\) got an unexpected keyword .*'{keyword}'"):
        async_client.latch("l", 2, **given)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\(its keywords: keep, timeout, on_lost\)"):
        async_client.barrier("b", 2, **given)  # type: ignore[arg-type]
    latch = async_client.latch("l", 2, participant="p", timeout=1.0, on_lost=print)
    assert (latch.participant, latch.count_from) == ("p", 2)


async def test_a_retried_count_down_counts_once(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    """Redisson's latch is a DECR: a count_down sent again after a lost reply counts twice.
    Here a participant counts once per generation by its id, however often it is sent."""
    worker = async_client.latch("l-retry", 2, participant="worker-1")
    assert await worker.count_down() == 1
    assert await worker.count_down() == 1  # the retry: no second count
    again = async_client.latch("l-retry", 2, participant="worker-1")  # a restarted process
    assert await again.count_down() == 1
    assert not await worker.wait(timeout=0)
    assert raw.scard(LatchKeys.for_latch("l-retry").counted) == 1
    assert await async_client.latch("l-retry", 2, participant="worker-2").count_down() == 0
    assert await worker.wait(timeout=0)


async def test_a_participant_that_died_is_missing(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    alive = async_client.latch("l-dead", 2, ttl=10, participant="alive")
    await alive.join()
    dying = async_client_b.latch("l-dead", 2, ttl=0.2, participant="dying")
    await dying.join()
    await async_client_b.close()  # it stops renewing, as a SIGKILLed process would
    await async_until_missing(alive, ("dying",))
    assert await alive.count_down() == 1  # counted: its lease ends, it is not missing
    assert await alive.missing() == ("dying",)
    assert not await alive.wait(timeout=0)


async def async_until_missing(latch: AsyncLatch, expected: tuple[str, ...]) -> None:
    """Wait for a lease to run out on the server (no event tells of it)."""
    deadline = time.monotonic() + TIMEOUT
    while (seen := await latch.missing()) != expected:
        assert time.monotonic() < deadline, f"missing() is still {seen}"
        await async_sleep(0.01)


@pytest.mark.glide
async def test_a_joined_participant_is_renewed_and_leaves_on_count_down(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    worker = async_client.latch("l-renew", 1, ttl=RENEWED_TTL, participant="w")
    await worker.join()
    renewals = async_client.statistics().renewals
    # renewed every third of its ttl: four renewals take it past its first lease
    await async_until(lambda: async_client.statistics().renewals >= renewals + 4)
    assert await worker.missing() == ()  # renewed past its ttl: not missing
    assert raw.zcard(LatchKeys.for_latch("l-renew").lock) == 1
    assert await worker.count_down() == 0
    assert raw.zcard(LatchKeys.for_latch("l-renew").lock) == 0  # its lease ended with it
    assert len(async_client._wiring.watchdog) == 0
    with pytest.raises(fencelock.LockError):
        await worker.leave()  # left already


@pytest.mark.glide
async def test_reset_starts_a_new_generation(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    latch = async_client.latch("l-reset", 1, participant="a")
    assert await latch.count_down() == 0 and await latch.wait(timeout=0)
    await latch.reset(count=2)
    assert await latch.count() == 2 and not await latch.wait(timeout=0)
    assert await latch.count_down() == 1  # counted again, in the new generation
    waiter = async_client_b.latch("l-reset", 1)
    waiting = AsyncCall(lambda: waiter.wait(timeout=None))
    await async_until(lambda: async_client_b.statistics().waiting == 1)
    await latch.reset()  # the generation it waits for will never open
    with pytest.raises(fencelock.LatchReset):
        await waiting.result()
    assert await latch.count() == 1


async def test_a_waiter_is_woken_by_a_message_not_a_timer(
    async_client: AsyncLockClient, server: EmbeddedServer, raw: redis.Redis
) -> None:
    async with AsyncLockClient.from_url(server.url) as other:
        waiter = other.latch("l-wake", 1, ttl=3600)  # it looks again once an hour at most
        waiting = AsyncCall(lambda: waiter.wait(timeout=None))
        await async_until(lambda: other.statistics().waiting == 1)
        scripts = evalsha_calls(raw)
        assert await async_client.latch("l-wake", 1).count_down() == 0
        assert await waiting.result()
        assert other.statistics().polls == 0 and other.statistics().wakeups == 1
        assert evalsha_calls(raw) - scripts == 2  # the count_down, and the waiter's one look


async def test_latches_are_listed_and_inspected(async_client: AsyncLockClient) -> None:
    latch = async_client.latch("l-listed", 3, ttl=10, participant="p1")
    await latch.join()
    await async_client.latch("l-listed", 3, participant="p2").count_down()
    info = await async_client.inspect("l-listed")
    assert info is not None and info.kind == "latch"
    assert (info.count, info.limit, info.token, info.missing) == (2, 3, None, ())
    assert [h.label for h in info.holders] == ["p1"]
    assert info.label == "p1" and info.ttl is not None and 0 < info.ttl <= 10  # its lease
    assert [i.name async for i in async_client.locks("l-listed")] == ["l-listed"]


async def test_a_latch_nobody_joined_is_listed(async_client: AsyncLockClient) -> None:
    """``locks()`` found a latch by its participants' key alone: one only counted down, or only
    reset, was left out (and inspected as a lock with a hold count)."""
    await async_client.latch("l-counted", 3).count_down()
    await async_client.latch("l-made", 3).reset()
    listed = {i.name: i async for i in async_client.locks("l-*")}
    assert sorted(listed) == ["l-counted", "l-made"]
    for name, left in (("l-counted", 2), ("l-made", 3)):
        info = listed[name]
        assert (info.kind, info.count, info.limit, info.holders) == ("latch", left, 3, ())
        assert (info.ttl, info.token) == (None, None)  # no participant, no fencing token
        assert await async_client.inspect(name) == info


async def test_a_barrier_shows_its_parties_in(async_client: AsyncLockClient) -> None:
    barrier = async_client.barrier("b-shown", 2, ttl=10)
    entering = AsyncCall(lambda: barrier.enter(timeout=None))
    await async_until(lambda: async_client.statistics().waiting == 1)
    info = await async_client.inspect("b-shown")
    assert info is not None and (info.kind, info.count, info.limit) == ("barrier", 1, 2)
    other = async_client.barrier("b-shown", 2, ttl=10)
    assert await other.enter(timeout=None) and await entering.result()
    info = await async_client.inspect("b-shown")
    assert info is not None and (info.count, info.limit) == (2, 2)


async def test_a_latch_refuses_what_it_cannot_do(async_client: AsyncLockClient) -> None:
    with pytest.raises(ValueError, match="count"):
        async_client.latch("l-bad", 0)
    with pytest.raises(TypeError, match="count"):
        async_client.latch("l-bad", 1.5)  # type: ignore[arg-type]
    latch = async_client.latch("l-bad", 1)
    with pytest.raises(TypeError, match="timeout="):
        await latch.wait(1)  # type: ignore[misc]
    await latch.join()
    with pytest.raises(fencelock.LockError, match="already"):
        await latch.join()
    await async_client.close()
    with pytest.raises(fencelock.ClientClosed):
        await latch.count_down()


async def test_messages_speak_of_joining_entering_and_leaving(
    async_client: AsyncLockClient,
) -> None:
    """A latch's and a barrier's errors say what a participant does: it joins (enters) and
    leaves (a second join said "latch 'x' is already held by this latch"; issue 29, item 6)."""
    latch = async_client.latch("l-words", 2)
    with pytest.raises(fencelock.LockNotOwned) as refused:
        await latch.leave()
    assert (
        str(refused.value) == "cannot leave latch 'l-words': it is not joined by this participant"
    )
    await latch.join()
    with pytest.raises(fencelock.LockError) as twice:
        await latch.join()
    assert str(twice.value) == (
        "latch 'l-words' is already joined by this participant: leave() first to join again"
    )
    await latch.leave()
    barrier = async_client.barrier("b-words", 1)
    with pytest.raises(fencelock.LockNotOwned) as refused:
        await barrier.leave(timeout=0)
    assert str(refused.value) == (
        "cannot leave barrier 'b-words': it is not entered by this participant"
    )
    assert await barrier.enter(timeout=0)
    with pytest.raises(fencelock.LockError, match="already entered by this participant"):
        await barrier.enter(timeout=0)
    assert await barrier.leave(timeout=0)


@pytest.mark.glide
async def test_the_barrier_lets_all_in_then_waits_for_all_to_leave(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    first = async_client.barrier("b-all", 2, ttl=10)
    entering = AsyncCall(lambda: first.enter(timeout=None))
    await async_until(lambda: async_client.statistics().waiting == 1)
    second = async_client_b.barrier("b-all", 2, ttl=10)
    assert await second.enter(timeout=5)
    assert await entering.result()
    leaving = AsyncCall(lambda: first.leave(timeout=None))
    await async_until(lambda: async_client.statistics().waiting == 1)
    assert await second.leave(timeout=5)
    assert await leaving.result()
    # the next round
    third = async_client.barrier("b-all", 2, ttl=10)
    assert not await third.enter(timeout=0)  # alone: not in, and left again
    info = await async_client.inspect("b-all")
    assert info is None or info.holders == ()


async def test_a_barrier_does_not_wait_for_a_dead_participant_to_leave(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    alive = async_client.barrier("b-dead", 2, ttl=10)
    entering = AsyncCall(lambda: alive.enter(timeout=None))
    dying = async_client_b.barrier("b-dead", 2, ttl=0.3)
    assert await dying.enter(timeout=5)
    assert await entering.result()
    await async_client_b.close()  # dead: it never leaves, its lease ends
    assert await alive.leave(timeout=None)  # once its lease ended


async def test_a_barrier_as_a_context_manager(async_client: AsyncLockClient) -> None:
    async with async_client.barrier("b-with", 1, ttl=10) as barrier:
        info = await async_client.inspect("b-with")
        assert info is not None and info.kind == "barrier" and len(info.holders) == 1
    assert barrier.parties == 1
    info = await async_client.inspect("b-with")
    assert info is None or info.holders == ()


async def test_a_barrier_block_over_a_lost_lease_ends_as_every_leased_block(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    """The loss is raised when the body ended normally, and noted on the body's own error
    when it raised one (the body's error is the one to see), as a lock's block does: a
    barrier's block replaced the body's error with the LockLost of its leave."""
    lease_key = LatchKeys.for_latch("b-lost").lock
    with pytest.raises(fencelock.LockLost):
        async with async_client.barrier("b-lost", 1, ttl=10):
            assert raw.delete(lease_key) == 1  # the participant's lease is gone
    with pytest.raises(KeyError) as raised:
        async with async_client.barrier("b-lost", 1, ttl=10):
            assert raw.delete(lease_key) == 1
            raise KeyError("the body's own")
    assert any("fencelock:" in note for note in getattr(raised.value, "__notes__", ()))
