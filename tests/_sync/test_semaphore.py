# GENERATED from tests/_async/test_semaphore.py by tools/gen_sync.py: edit that file instead.
"""Semaphores: permits as leases, first come first served, a stored limit.

Sync twin generated into tests/_sync by tools/gen_sync.py."""

from __future__ import annotations

import pytest

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.semaphore import Semaphore
from fencelock._backend import sync_sleep
from tests.concurrency import SyncCall, sync_together, sync_until


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


def test_waiters_are_served_first_come_first_served(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    holder = sync_client.semaphore("s-fifo", 3, ttl=10)
    assert holder.acquire(2)
    heavy = sync_client_b.semaphore("s-fifo", 3, ttl=10)
    heavy_call = SyncCall(lambda: heavy.acquire(3, timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    light = sync_client.semaphore("s-fifo", 3, ttl=10)
    # one permit is free, but the heavy request came first: the light one waits behind it
    assert not light.acquire(1, timeout=0)
    light_call = SyncCall(lambda: light.acquire(1, timeout=10))
    sync_until(lambda: sync_client.statistics().waiting == 1)
    holder.release()
    assert heavy_call.result()
    assert not light.lost and light.available() == 0
    heavy.release()
    assert light_call.result()
    light.release()


def test_auto_renewed_permits_live_as_long_as_the_work(
    sync_client: LockClient,
) -> None:
    permit = sync_client.semaphore("s-renew", 1, ttl=0.3, auto_renew=True)
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
        sync_client.semaphore("s-stored", 5).acquire(3)  # more than the limit can give


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
    with pytest.raises(ValueError, match="n must"):
        semaphore.acquire(0)
