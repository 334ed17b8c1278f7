"""A barging lock (``client.lock(name, fair=False)``): a release wakes the first queued waiter
without granting it the name, a newcomer may take the name first, and a waiter that lost
``BARGED_TRIES`` races is granted the name in order (docs/contention.md, "Barging").
Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from fencelock._async.client import AsyncLockClient
from fencelock._core.kinds import BARGED_TRIES
from fencelock._core.replies import lock_value
from fencelock._keys import LockKeys
from fencelock._scripts import ACQUIRE, RELEASE
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import AsyncCall, async_until, evalsha_calls

NAME = "barged"
KEYS = LockKeys.for_name(NAME)


@pytest.fixture
async def clients(server: EmbeddedServer) -> AsyncIterator[list[AsyncLockClient]]:
    """Two clients (two processes, as far as the lock can tell); the fallback re-try is an hour
    away, so only a release message wakes a waiter."""
    made = [AsyncLockClient.from_url(server.url, max_poll=3600.0) for _ in range(2)]
    try:
        yield made
    finally:
        for client in made:
            await client.close()


def queue(raw: redis.Redis) -> list[tuple[str, float]]:
    return [(str(m), float(s)) for m, s in raw.zrange(KEYS.queue, 0, -1, withscores=True)]


async def test_a_release_wakes_the_first_waiter_and_a_newcomer_takes_the_name(
    clients: list[AsyncLockClient], raw: redis.Redis
) -> None:
    first, second = clients
    holder = first.lock(NAME, ttl=3600, fair=False)
    assert await holder.acquire(timeout=0)
    token = holder.token
    # a waiter queued by its id, as a barging waiter's first re-tries queue it
    raw.zadd(KEYS.queue, {"w": 1})
    listener = raw.pubsub()
    listener.subscribe(f"{KEYS.channel}:w")
    assert listener.get_message(timeout=10)["type"] == "subscribe"
    for taker in (holder, second.lock(NAME, ttl=3600, fair=False)):  # the releaser, a newcomer
        await holder.release()
        message = listener.get_message(timeout=10)
        assert message is not None and message["data"] == "1"  # woken, not granted
        assert not raw.exists(KEYS.lock)
        assert queue(raw) == [("w", 1.0)]  # still first in line
        before = evalsha_calls(raw)
        assert await taker.acquire(timeout=10)
        assert evalsha_calls(raw) == before + 1  # at once: the releaser does not hold back
        assert taker.token > token
        token = taker.token
        holder = taker
    await holder.release()
    assert [c.statistics().polls for c in clients] == [0, 0]
    listener.close()


async def test_a_waiter_that_lost_its_races_is_granted_the_name_in_order(
    clients: list[AsyncLockClient], raw: redis.Redis
) -> None:
    # The holder barges: it releases and takes the name again in one transaction, so each
    # re-try of the woken waiter finds it taken, until the waiter queues in order.
    waiter = clients[0].lock(NAME, ttl=3600, fair=False)
    channel = KEYS.channel

    def barge(holder: str, then: str | None) -> list[object]:
        # (EVAL, not EVALSHA: evalsha_calls counts the waiter's tries alone)
        with raw.pipeline(transaction=True) as pipe:
            if holder:
                args = (holder, channel, "PUBLISH", "", "", "1")
                pipe.execute_command(*RELEASE.eval((KEYS.lock, KEYS.queue, KEYS.fence), args))
            if then is not None:
                args = (then, 3600_000, 1, "")
                pipe.execute_command(*ACQUIRE.eval((KEYS.lock, KEYS.fence, KEYS.queue), args))
            replies: list[object] = pipe.execute()
            return replies

    ((granted, token),) = barge("", "h0")
    assert granted == 1
    tokens = [int(token)]

    async def take() -> int:
        assert await waiter.acquire(timeout=None)
        return waiter.token

    call = AsyncCall(take)
    await async_until(lambda: evalsha_calls(raw) == 2)  # its try, then the one that queues it
    ((entry, score),) = queue(raw)
    assert " " not in entry  # by its id
    tries = 2
    for n in range(1, BARGED_TRIES + 2):
        released, taken = barge(f"h{n - 1}", f"h{n}")
        if n <= BARGED_TRIES:
            assert released == 3 and taken[0] == 1  # woken, and the name taken before its re-try
            tokens.append(int(taken[1]))
            tries += 1
            await async_until(lambda n=tries: evalsha_calls(raw) == n)  # its re-try: busy
            ((now_entry, now_score),) = queue(raw)
            assert now_score == score  # its place kept
            # by its id for its first BARGED_TRIES tries in the queue, in order from then on
            assert (" " in now_entry) == (n >= BARGED_TRIES)
        else:
            # the release granted it the name: nobody barges past it any more
            assert released == 4 and taken[0] == 0
    token = await call.result()
    assert token > max(tokens) and tokens == sorted(tokens)
    assert lock_value(raw.get(KEYS.lock))[1] == token
    assert queue(raw) == []
    await waiter.release()
    assert not raw.exists(KEYS.lock)


async def test_a_waiter_that_gives_up_passes_its_wake_up_on(
    clients: list[AsyncLockClient], raw: redis.Redis
) -> None:
    # A barging release leaves the woken waiter's entry queued: if that waiter leaves instead
    # of re-trying, its leaving wakes the next one while the name is free.
    holder = clients[0].lock(NAME, ttl=3600, fair=False)
    assert await holder.acquire(timeout=0)
    raw.zadd(KEYS.queue, {"leaving": 1, "next": 2})
    listener = raw.pubsub()
    listener.subscribe(f"{KEYS.channel}:leaving", f"{KEYS.channel}:next")
    for _ in range(2):
        assert listener.get_message(timeout=10)["type"] == "subscribe"
    await holder.release()
    message = listener.get_message(timeout=10)
    assert message is not None and message["channel"] == f"{KEYS.channel}:leaving"
    assert queue(raw) == [("leaving", 1.0), ("next", 2.0)]
    # the waiter "leaving" gives up: a release with its entry (as contention._leave_queue sends)
    args = ("its-token", KEYS.channel, "PUBLISH", "leaving 3600000 1 its-token", "", "1")
    assert raw.execute_command(*RELEASE.eval((KEYS.lock, KEYS.queue, KEYS.fence), args)) == 0
    message = listener.get_message(timeout=10)
    assert message is not None and message["channel"] == f"{KEYS.channel}:next"
    assert queue(raw) == [("next", 2.0)]
    listener.close()


async def test_fair_false_is_for_a_simple_lock(clients: list[AsyncLockClient]) -> None:
    with pytest.raises(ValueError, match="fair=False is for a simple lock"):
        clients[0].lock(NAME, reentrant=True, fair=False)
    with pytest.raises(TypeError, match="fair"):
        clients[0].lock(NAME, fair="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="fair"):
        clients[0].semaphore(NAME, 2, fair=False)  # type: ignore[call-arg]
