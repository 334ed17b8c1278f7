"""Semaphores: permits as leases, first come first served, a stored limit.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._async.semaphore import AsyncSemaphore
from fencelock._backend import async_sleep
from fencelock._keys import SemaphoreKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.clients import AsyncClients
from tests.concurrency import RENEWED_TTL, AsyncCall, async_together, async_until, evalsha_calls


@pytest.fixture
async def waiters(
    server: EmbeddedServer, raw: redis.Redis, async_clients: AsyncClients
) -> AsyncIterator[list[AsyncLockClient]]:
    """Two clients whose fallback re-try is an hour away: only a release serves their waits."""
    made = [await async_clients.of(server, max_poll=3600.0) for _ in range(2)]
    try:
        yield made
    finally:
        for client in made:
            await client.close()


def queued(raw: redis.Redis, name: str) -> int:
    return int(raw.zcard(SemaphoreKeys.for_semaphore(name).queue))


@pytest.mark.glide
async def test_at_most_limit_permits_are_held(async_client: AsyncLockClient) -> None:
    a, b, c = (async_client.semaphore("s-limit", 2, ttl=10) for _ in range(3))
    assert await a.acquire() and await b.acquire()
    assert not await c.acquire(timeout=0)
    assert await a.available() == 0
    first = a.token
    await a.release()
    assert await c.acquire(timeout=0)
    assert c.token > b.token > first  # every grant a larger fencing token
    with pytest.raises(fencelock.LockNotOwned):
        await a.release()  # twice: nothing changes
    assert await b.available() == 0
    await b.release()
    await c.release()
    assert await c.available() == 2


@pytest.mark.glide
async def test_a_crashed_holders_permit_comes_back_when_its_lease_ends(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    crashed = async_client_b.semaphore("s-crash", 1, ttl=0.2)
    assert await crashed.acquire()
    other = async_client.semaphore("s-crash", 1, ttl=10)
    assert not await other.acquire(timeout=0)
    assert await other.acquire(timeout=5)  # taken back by the script once the lease ended
    assert crashed.lost
    await other.release()


@pytest.mark.glide
async def test_waiters_are_served_first_come_first_served(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    holder = async_client.semaphore("s-fifo", 3, ttl=10)
    assert await holder.acquire(permits=2)
    heavy = async_client_b.semaphore("s-fifo", 3, ttl=10)
    heavy_call = AsyncCall(lambda: heavy.acquire(permits=3, timeout=10))
    await async_until(lambda: async_client_b.statistics().waiting == 1)
    light = async_client.semaphore("s-fifo", 3, ttl=10)
    # one permit is free, but the heavy request came first: the light one waits behind it
    assert not await light.acquire(permits=1, timeout=0)
    light_call = AsyncCall(lambda: light.acquire(permits=1, timeout=10))
    await async_until(lambda: async_client.statistics().waiting == 1)
    await holder.release()
    assert await heavy_call.result()
    assert not light.lost and await light.available() == 0
    await heavy.release()
    assert await light_call.result()
    await light.release()


@pytest.mark.glide
async def test_auto_renewed_permits_live_as_long_as_the_work(
    async_client: AsyncLockClient,
) -> None:
    permit = async_client.semaphore("s-renew", 1, ttl=RENEWED_TTL, auto_renew=True)
    async with permit:
        await async_until(lambda: async_client.statistics().renewals >= 3)
        assert await permit.held()
        assert not await async_client.semaphore("s-renew", 1).acquire(timeout=0)


async def test_the_limit_is_stored_with_the_semaphore(async_client: AsyncLockClient) -> None:
    first = async_client.semaphore("s-stored", 2, ttl=10)
    assert await first.acquire()
    other = async_client.semaphore("s-stored", 5, ttl=10)  # the stored limit applies
    assert (await other.state()).limit == 2
    assert await other.available() == 1
    await other.set_limit(1)  # lowered: the holder keeps its permit, nobody else gets one
    assert not await other.acquire(timeout=0)
    assert list((await first.holders()).values()) == [1]
    await first.release()
    assert await other.acquire(timeout=0)
    await other.release()
    with pytest.raises(fencelock.LockError, match="limit"):
        await async_client.semaphore("s-stored", 5).acquire(permits=3)  # more than the limit gives


async def test_at_most_n_runs_at_once(async_client: AsyncLockClient) -> None:
    running: list[int] = []
    peak = 0

    @async_client.at_most(2, "s-job", ttl=10, timeout=30)
    async def job(i: int) -> int:
        nonlocal peak
        running.append(i)
        peak = max(peak, len(running))
        await async_sleep(0.05)
        running.remove(i)
        return i

    assert await async_together([lambda i=i: job(i) for i in range(6)]) == list(range(6))
    assert peak == 2


async def test_bad_arguments_are_refused(async_client: AsyncLockClient) -> None:
    with pytest.raises(ValueError, match="limit"):
        async_client.semaphore("s-bad", 0)
    with pytest.raises(TypeError, match="limit"):
        async_client.semaphore("s-bad", 2.5)  # type: ignore[arg-type]
    semaphore = async_client.semaphore("s-bad", 2)
    assert isinstance(semaphore, AsyncSemaphore)
    with pytest.raises(ValueError, match="permits must"):
        await semaphore.acquire(permits=0)


@pytest.mark.glide
async def test_one_release_grants_every_queued_waiter_that_fits(
    async_client: AsyncLockClient, waiters: list[AsyncLockClient], raw: redis.Redis
) -> None:
    """The release script grants the waiters their permits itself (first come, first served,
    while they fit): nobody re-tries. It used to wake the first waiter only, to re-try."""
    holder = async_client.semaphore("s-direct", 2, ttl=10)
    assert await holder.acquire(permits=2)
    first, second = (client.semaphore("s-direct", 2, ttl=10) for client in waiters)
    first_call = AsyncCall(lambda: first.acquire(timeout=10))
    await async_until(lambda: queued(raw, "s-direct") == 1)
    second_call = AsyncCall(lambda: second.acquire(timeout=10))
    await async_until(lambda: queued(raw, "s-direct") == 2)
    before, holder_token = evalsha_calls(raw), holder.token
    await holder.release()
    assert await first_call.result() and await second_call.result()
    assert evalsha_calls(raw) == before + 1  # the release alone
    assert holder_token < first.token < second.token  # in order of arrival
    assert await holder.available() == 0
    await first.release()
    await second.release()


async def test_a_grant_confirmed_late_keeps_its_own_token(
    async_client: AsyncLockClient, waiters: list[AsyncLockClient], raw: redis.Redis
) -> None:
    """A waiter granted by a release with less than half its ttl left confirms the grant with
    one more try, which must answer the token of its own grant, not the counter's (another
    waiter's, granted after it by the same release)."""
    holder = async_client.semaphore("s-confirm", 2, ttl=10)
    assert await holder.acquire(permits=2)
    late = waiters[0].semaphore("s-confirm", 2, ttl=1)
    other = waiters[1].semaphore("s-confirm", 2, ttl=10)
    late_call = AsyncCall(lambda: late.acquire(timeout=10))
    await async_until(lambda: queued(raw, "s-confirm") == 1)
    queued_by = time.monotonic()
    other_call = AsyncCall(lambda: other.acquire(timeout=10))
    await async_until(lambda: queued(raw, "s-confirm") == 2)
    await async_until(lambda: time.monotonic() > queued_by + 0.6)  # over half of late's ttl
    await holder.release()
    assert await late_call.result() and await other_call.result()
    assert late.token < other.token
    await other.release()


async def test_a_semaphore_leaves_only_its_limit_behind(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    """Every key but the stored limit expires when the last holder and waiter are gone, even
    when they crashed and nobody runs a script of the semaphore again."""
    keys = SemaphoreKeys.for_semaphore("s-gone")
    crashed = async_client_b.semaphore("s-gone", 1, ttl=0.3, auto_renew=True)
    assert await crashed.acquire()
    waiter = async_client.semaphore("s-gone", 1, ttl=0.3)
    assert not await waiter.acquire(timeout=0.05)  # queued, then gave up
    await async_until(lambda: async_client_b.statistics().renewals >= 2)
    assert 0 < raw.pttl(keys.lock) <= 300  # renewed: the set lives as long as the lease
    await async_client_b.close()  # the holder stops renewing without releasing
    await async_until(lambda: not raw.exists(keys.lock, keys.queue, keys.alive))
    assert raw.hget(keys.state, "limit") == "1"


async def test_a_raised_limit_lets_queued_waiters_in_at_once(
    async_client: AsyncLockClient, waiters: list[AsyncLockClient], raw: redis.Redis
) -> None:
    """set_limit serves the queue as a release does (it used to leave the waiters until the
    next release or lease end: an hour here)."""
    holder = async_client.semaphore("s-raise", 1, ttl=3600)
    assert await holder.acquire()
    waiter = waiters[0].semaphore("s-raise", 1, ttl=10)
    call = AsyncCall(lambda: waiter.acquire(timeout=10))
    await async_until(lambda: queued(raw, "s-raise") == 1)
    await holder.set_limit(2)
    assert await call.result()
    assert (await holder.state()).used == 2
    await waiter.release()
    await holder.release()


async def test_one_semaphore_object_acquired_by_two_callers_at_once(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    """The acquire that came second waits behind the first; when the first grant is released
    it takes permits of its own from the server: permits are never handed from one acquire to
    the next."""
    blocker = async_client_b.semaphore("s-twice", 1, ttl=10)
    assert await blocker.acquire()
    sem = async_client.semaphore("s-twice", 1, ttl=10)
    calls = [AsyncCall(lambda: sem.acquire(timeout=10)) for _ in range(2)]
    await async_until(lambda: async_client.statistics().queued == 1)  # one behind the other
    await blocker.release()
    await async_until(lambda: async_client.statistics().held == 1)
    first = sem.token
    await sem.release()
    await async_until(lambda: async_client.statistics().held == 1)
    assert sem.token > first
    await sem.release()
    assert [await call.result() for call in calls] == [True, True]
    assert (await sem.state()).used == 0
