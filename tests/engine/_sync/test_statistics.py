# GENERATED from tests/engine/_async/test_statistics.py by tools/gen_sync.py: edit that file instead.
"""``client.statistics()``: what a client's locks did, read as a user reads it.

Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from tests.concurrency import RENEWED_TTL, SyncCall, sync_until


def test_a_fresh_client_has_done_nothing(sync_client: LockClient) -> None:
    stats = sync_client.statistics()
    assert stats == fencelock.Statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.held = 1  # type: ignore[misc]  # a snapshot, not a live view


def test_grants_holds_and_releases_are_counted(sync_client: LockClient) -> None:
    a, b = sync_client.lock("stats-a", ttl=10), sync_client.lock("stats-b", ttl=10)
    assert a.acquire(timeout=0) and b.acquire(timeout=0)
    assert (sync_client.statistics().held, sync_client.statistics().acquired) == (2, 2)
    a.release()
    with a:
        assert sync_client.statistics().held == 2
    b.release()
    stats = sync_client.statistics()
    assert (stats.held, stats.acquired, stats.losses) == (0, 3, 0)


def test_waiting_queued_wakeups_and_handoffs(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    holder = sync_client_b.lock("stats-wait", ttl=3600)
    assert holder.acquire(timeout=0)
    head, behind = sync_client.lock("stats-wait", ttl=10), sync_client.lock("stats-wait", ttl=10)

    def take_and_release(lock: Lock) -> None:
        assert lock.acquire(timeout=None)
        lock.release()

    first = SyncCall(lambda: take_and_release(head))
    sync_until(lambda: sync_client.statistics().waiting == 1)  # the head, in Redis
    second = SyncCall(lambda: take_and_release(behind))
    sync_until(lambda: sync_client.statistics().queued == 1)  # behind it, locally
    holder.release()
    first.result()
    second.result()
    stats = sync_client.statistics()
    assert (stats.waiting, stats.queued, stats.held) == (0, 0, 0)
    assert stats.wakeups == 1 and stats.polls == 0  # woken by the release message
    assert stats.acquired == 2 and stats.handoffs == 1  # the head handed it to the next


def test_renewals_and_losses(sync_client: LockClient, raw: redis.Redis) -> None:
    lock = sync_client.lock("stats-renew", ttl=RENEWED_TTL, auto_renew=True)
    assert lock.acquire(timeout=0)
    sync_until(lambda: sync_client.statistics().renewals >= 2)
    assert sync_client.statistics().renewal_calls >= 2
    raw.delete(lock._lease.spec.keys.lock)  # an operator deletes it: the next renewal finds it gone
    sync_until(lambda: lock.lost)
    stats = sync_client.statistics()
    assert stats.losses == 1 and stats.held == 1  # lost, but not released yet
    with pytest.raises(fencelock.LockLost):
        lock.release()
    assert sync_client.statistics().held == 0


def test_each_concern_logs_to_its_own_logger(
    sync_client: LockClient, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fencelock")
    lock = sync_client.lock("logged", ttl=10)
    with lock:
        token = lock.token
    assert lock.acquire(timeout=0)
    raw.set(lock._lease.spec.keys.lock, "someone else")  # taken over: extend finds it gone
    with pytest.raises(fencelock.LockLost):
        lock.extend()
    assert any(
        r.name == "fencelock.acquire" and r.getMessage() == f"'logged' acquired, token {token}"
        for r in caplog.records
    )
    assert any(
        r.name == "fencelock.release" and f"token {token}" in r.getMessage() for r in caplog.records
    )
    [lost] = [r for r in caplog.records if r.name == "fencelock.lease"]
    assert lost.levelno == logging.WARNING and "'logged'" in lost.getMessage()
