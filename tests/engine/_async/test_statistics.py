"""``client.statistics()``: what a client's locks did, read as a user reads it.

Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._async.lock import AsyncLock
from tests.concurrency import RENEWED_TTL, AsyncCall, async_until


async def test_a_fresh_client_has_done_nothing(async_client: AsyncLockClient) -> None:
    stats = async_client.statistics()
    assert stats == fencelock.Statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.held = 1  # type: ignore[misc]  # a snapshot, not a live view


async def test_grants_holds_and_releases_are_counted(async_client: AsyncLockClient) -> None:
    a, b = async_client.lock("stats-a", ttl=10), async_client.lock("stats-b", ttl=10)
    assert await a.acquire(timeout=0) and await b.acquire(timeout=0)
    assert (async_client.statistics().held, async_client.statistics().acquired) == (2, 2)
    await a.release()
    async with a:
        assert async_client.statistics().held == 2
    await b.release()
    stats = async_client.statistics()
    assert (stats.held, stats.acquired, stats.losses) == (0, 3, 0)


async def test_waiting_queued_wakeups_and_handoffs(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    holder = async_client_b.lock("stats-wait", ttl=3600)
    assert await holder.acquire(timeout=0)
    head, behind = async_client.lock("stats-wait", ttl=10), async_client.lock("stats-wait", ttl=10)

    async def take_and_release(lock: AsyncLock) -> None:
        assert await lock.acquire(timeout=None)
        await lock.release()

    first = AsyncCall(lambda: take_and_release(head))
    await async_until(lambda: async_client.statistics().waiting == 1)  # the head, in Redis
    second = AsyncCall(lambda: take_and_release(behind))
    await async_until(lambda: async_client.statistics().queued == 1)  # behind it, locally
    await holder.release()
    await first.result()
    await second.result()
    stats = async_client.statistics()
    assert (stats.waiting, stats.queued, stats.held) == (0, 0, 0)
    assert stats.wakeups == 1 and stats.polls == 0  # woken by the release message
    assert stats.acquired == 2 and stats.handoffs == 1  # the head handed it to the next


async def test_renewals_and_losses(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    lock = async_client.lock("stats-renew", ttl=RENEWED_TTL, auto_renew=True)
    assert await lock.acquire(timeout=0)
    await async_until(lambda: async_client.statistics().renewals >= 2)
    assert async_client.statistics().renewal_calls >= 2
    raw.delete(lock._lease.spec.keys.lock)  # an operator deletes it: the next renewal finds it gone
    await async_until(lambda: lock.lost)
    stats = async_client.statistics()
    assert stats.losses == 1 and stats.held == 1  # lost, but not released yet
    with pytest.raises(fencelock.LockLost):
        await lock.release()
    assert async_client.statistics().held == 0


async def test_each_concern_logs_to_its_own_logger(
    async_client: AsyncLockClient, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fencelock")
    lock = async_client.lock("logged", ttl=10)
    async with lock:
        token = lock.token
    assert await lock.acquire(timeout=0)
    raw.set(lock._lease.spec.keys.lock, "someone else")  # taken over: extend finds it gone
    with pytest.raises(fencelock.LockLost):
        await lock.extend()
    assert any(
        r.name == "fencelock.acquire" and r.getMessage() == f"'logged' acquired, token {token}"
        for r in caplog.records
    )
    assert any(
        r.name == "fencelock.release" and f"token {token}" in r.getMessage() for r in caplog.records
    )
    [lost] = [r for r in caplog.records if r.name == "fencelock.lease"]
    assert lost.levelno == logging.WARNING and "'logged'" in lost.getMessage()
