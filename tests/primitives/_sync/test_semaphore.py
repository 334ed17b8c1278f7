# GENERATED from tests/primitives/_async/test_semaphore.py by tools/gen_sync.py: edit that file instead.
"""Semaphores: permits as leases, first come first served, a stored limit.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.semaphore import Semaphore
from fencelock._backend import sync_sleep
from fencelock._keys import SemaphoreKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.clients import SyncClients
from tests.concurrency import RENEWED_TTL, SyncCall, sync_together, sync_until, evalsha_calls


@pytest.fixture
def waiters(
    server: EmbeddedServer, raw: redis.Redis, sync_clients: SyncClients
) -> Iterator[list[LockClient]]:
    """Two clients whose fallback re-try is an hour away: only a release serves their waits."""
    made = [sync_clients.of(server, max_poll=3600.0) for _ in range(2)]
    try:
        yield made
    finally:
        for client in made:
            client.close()


def queued(raw: redis.Redis, name: str) -> int:
    return int(raw.zcard(SemaphoreKeys.for_semaphore(name).queue))


@pytest.mark.glide
def test_at_most_limit_permits_are_held(sync_client: LockClient) -> None:
    a, b, c = (sync_client.semaphore("s-limit", 2, ttl=10) for _ in range(3))
    assert a.acquire() and b.acquire()
    assert not c.acquire(timeout=0)
    assert a.available() == 0
    first = a.token
    a.release()
    assert c.acquire(timeout=0)
    assert c.token > b.token > first  # every grant a larger fencing token
    with pytest.raises(fencelock.LockNotOwned):
        a.release()  # twice: nothing changes
    assert b.available() == 0
    b.release()
    c.release()
    assert c.available() == 2


@pytest.mark.glide
def test_a_crashed_holders_permit_comes_back_when_its_lease_ends(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    crashed = sync_client_b.semaphore("s-crash", 1, ttl=0.2)
    assert crashed.acquire()
    other = sync_client.semaphore("s-crash", 1, ttl=10)
    assert not other.acquire(timeout=0)
    assert other.acquire(timeout=5)  # taken back by the script once the lease ended
    assert crashed.lost
    other.release()


@pytest.mark.glide
def test_waiters_are_served_first_come_first_served(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    holder = sync_client.semaphore("s-fifo", 3, ttl=10)
    assert holder.acquire(permits=2)
    heavy = sync_client_b.semaphore("s-fifo", 3, ttl=10)
    heavy_call = SyncCall(lambda: heavy.acquire(permits=3, timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    light = sync_client.semaphore("s-fifo", 3, ttl=10)
    # one permit is free, but the heavy request came first: the light one waits behind it
    assert not light.acquire(permits=1, timeout=0)
    light_call = SyncCall(lambda: light.acquire(permits=1, timeout=10))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    holder.release()
    assert heavy_call.result()
    assert not light.lost and light.available() == 0
    heavy.release()
    assert light_call.result()
    light.release()


@pytest.mark.glide
def test_auto_renewed_permits_live_as_long_as_the_work(
    sync_client: LockClient,
) -> None:
    permit = sync_client.semaphore("s-renew", 1, ttl=RENEWED_TTL, auto_renew=True)
    with permit:
        sync_until(lambda: sync_client.statistics().renewals >= 3)
        assert permit.held()
        assert not sync_client.semaphore("s-renew", 1).acquire(timeout=0)


def test_the_limit_is_stored_with_the_semaphore(sync_client: LockClient) -> None:
    first = sync_client.semaphore("s-stored", 2, ttl=10)
    assert first.acquire()
    other = sync_client.semaphore("s-stored", 5, ttl=10)  # the stored limit applies
    assert (other.state()).limit == 2
    assert other.available() == 1
    other.set_limit(1)  # lowered: the holder keeps its permit, nobody else gets one
    assert not other.acquire(timeout=0)
    assert list((first.holders()).values()) == [1]
    first.release()
    assert other.acquire(timeout=0)
    other.release()
    with pytest.raises(fencelock.LockError, match="limit"):
        sync_client.semaphore("s-stored", 5).acquire(permits=3)  # more than the limit gives


def test_at_most_n_runs_at_once(sync_client: LockClient) -> None:
    running: list[int] = []
    peak = 0

    @sync_client.at_most(2, "s-job", ttl=10, timeout=30)
    def job(i: int) -> int:
        nonlocal peak
        running.append(i)
        peak = max(peak, len(running))
        sync_sleep(0.05)
        running.remove(i)
        return i

    assert sync_together([lambda i=i: job(i) for i in range(6)]) == list(range(6))
    assert peak == 2


def test_bad_arguments_are_refused(sync_client: LockClient) -> None:
    with pytest.raises(ValueError, match="limit"):
        sync_client.semaphore("s-bad", 0)
    with pytest.raises(TypeError, match="limit"):
        sync_client.semaphore("s-bad", 2.5)  # type: ignore[arg-type]
    semaphore = sync_client.semaphore("s-bad", 2)
    assert isinstance(semaphore, Semaphore)
    with pytest.raises(ValueError, match="permits must"):
        semaphore.acquire(permits=0)


@pytest.mark.glide
def test_one_release_grants_every_queued_waiter_that_fits(
    sync_client: LockClient, waiters: list[LockClient], raw: redis.Redis
) -> None:
    """The release script grants the waiters their permits itself (first come, first served,
    while they fit): nobody re-tries. It used to wake the first waiter only, to re-try."""
    holder = sync_client.semaphore("s-direct", 2, ttl=10)
    assert holder.acquire(permits=2)
    first, second = (client.semaphore("s-direct", 2, ttl=10) for client in waiters)
    first_call = SyncCall(lambda: first.acquire(timeout=10))
    sync_until(lambda: queued(raw, "s-direct") == 1)
    second_call = SyncCall(lambda: second.acquire(timeout=10))
    sync_until(lambda: queued(raw, "s-direct") == 2)
    before, holder_token = evalsha_calls(raw), holder.token
    holder.release()
    assert first_call.result() and second_call.result()
    assert evalsha_calls(raw) == before + 1  # the release alone
    assert holder_token < first.token < second.token  # in order of arrival
    assert holder.available() == 0
    first.release()
    second.release()


def test_a_grant_confirmed_late_keeps_its_own_token(
    sync_client: LockClient, waiters: list[LockClient], raw: redis.Redis
) -> None:
    """A waiter granted by a release with less than half its ttl left confirms the grant with
    one more try, which must answer the token of its own grant, not the counter's (another
    waiter's, granted after it by the same release)."""
    holder = sync_client.semaphore("s-confirm", 2, ttl=10)
    assert holder.acquire(permits=2)
    late = waiters[0].semaphore("s-confirm", 2, ttl=1)
    other = waiters[1].semaphore("s-confirm", 2, ttl=10)
    late_call = SyncCall(lambda: late.acquire(timeout=10))
    sync_until(lambda: queued(raw, "s-confirm") == 1)
    queued_by = time.monotonic()
    other_call = SyncCall(lambda: other.acquire(timeout=10))
    sync_until(lambda: queued(raw, "s-confirm") == 2)
    sync_until(lambda: time.monotonic() > queued_by + 0.6)  # over half of late's ttl
    holder.release()
    assert late_call.result() and other_call.result()
    assert late.token < other.token
    other.release()


def test_a_semaphore_leaves_only_its_limit_behind(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    """Every key but the stored limit expires when the last holder and waiter are gone, even
    when they crashed and nobody runs a script of the semaphore again."""
    keys = SemaphoreKeys.for_semaphore("s-gone")
    crashed = sync_client_b.semaphore("s-gone", 1, ttl=0.3, auto_renew=True)
    assert crashed.acquire()
    waiter = sync_client.semaphore("s-gone", 1, ttl=0.3)
    assert not waiter.acquire(timeout=0.05)  # queued, then gave up
    sync_until(lambda: sync_client_b.statistics().renewals >= 2)
    assert 0 < raw.pttl(keys.lock) <= 300  # renewed: the set lives as long as the lease
    sync_client_b.close()  # the holder stops renewing without releasing
    sync_until(lambda: not raw.exists(keys.lock, keys.queue, keys.alive))
    assert raw.hget(keys.state, "limit") == "1"


def test_a_raised_limit_lets_queued_waiters_in_at_once(
    sync_client: LockClient, waiters: list[LockClient], raw: redis.Redis
) -> None:
    """set_limit serves the queue as a release does (it used to leave the waiters until the
    next release or lease end: an hour here)."""
    holder = sync_client.semaphore("s-raise", 1, ttl=3600)
    assert holder.acquire()
    waiter = waiters[0].semaphore("s-raise", 1, ttl=10)
    call = SyncCall(lambda: waiter.acquire(timeout=10))
    sync_until(lambda: queued(raw, "s-raise") == 1)
    holder.set_limit(2)
    assert call.result()
    assert (holder.state()).used == 2
    waiter.release()
    holder.release()


def test_one_semaphore_object_acquired_by_two_callers_at_once(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    """The acquire that came second waits behind the first; when the first grant is released
    it takes permits of its own from the server: permits are never handed from one acquire to
    the next."""
    blocker = sync_client_b.semaphore("s-twice", 1, ttl=10)
    assert blocker.acquire()
    sem = sync_client.semaphore("s-twice", 1, ttl=10)
    calls = [SyncCall(lambda: sem.acquire(timeout=10)) for _ in range(2)]
    sync_until(lambda: sync_client.statistics().queued == 1)  # one behind the other
    blocker.release()
    sync_until(lambda: sync_client.statistics().held == 1)
    first = sem.token
    sem.release()
    sync_until(lambda: sync_client.statistics().held == 1)
    assert sem.token > first
    sem.release()
    assert [call.result() for call in calls] == [True, True]
    assert (sem.state()).used == 0
