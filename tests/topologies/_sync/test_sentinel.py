# GENERATED from tests/topologies/_async/test_sentinel.py by tools/gen_sync.py: edit that file instead.
"""Sentinel: a master, a replica and a sentinel, failed over for real.
Sync twin generated into tests/topologies/_sync by tools/gen_sync.py."""

from __future__ import annotations

import pytest

import fencelock
from fencelock._sync.client import LockClient
from fencelock._sync.lock import Lock
from fencelock._keys import LockKeys
from fencelock_tools.servers.topology import SentinelSetup
from tests.concurrency import SyncSentinel, sync_together, sync_until

KEYS = LockKeys.for_name("job")


def sentinel_client(setup: SentinelSetup) -> LockClient:
    sentinel = SyncSentinel([("127.0.0.1", setup.sentinel_port)], socket_timeout=2)
    return LockClient(sentinel.master_for(setup.service_name, socket_timeout=2))


def test_a_lock_survives_a_forced_failover(sentinel_setup: SentinelSetup) -> None:
    client = sentinel_client(sentinel_setup)
    lock = client.lock("job", ttl=5, auto_renew=True)
    assert lock.acquire(timeout=0)
    token = lock.token
    old = sentinel_setup.master
    new = sentinel_setup.failover()
    assert new is not old
    # the old master is made a replica and drops its clients: ours reconnect through the
    # sentinel, to the new master
    sentinel_setup.wait_synced(demote=True)
    renewed = client.statistics().renewals
    sync_until(lambda: client.statistics().renewals >= renewed + 2)
    assert not lock.lost and lock.held()
    with new.client() as probe:
        assert probe.exists(KEYS.lock)
    other = client.lock("other", ttl=5)
    assert other.acquire(timeout=0)  # on the new master
    with new.client() as probe:
        assert probe.exists(LockKeys.for_name("other").lock)
    other.release()
    lock.release()
    assert token > 0
    client.close()


def test_a_lock_lost_in_the_failover_is_signalled(sentinel_setup: SentinelSetup) -> None:
    # pitfall 10: asynchronous replication loses the lock on failover: the holder is told
    lost: list[Lock] = []
    client = sentinel_client(sentinel_setup)
    # a ttl that outlasts the failover: the loss is found by the renewal on the new master
    lock = client.lock("job", ttl=10, auto_renew=True, on_lost=lost.append)
    assert lock.acquire(timeout=0)
    token = lock.token
    old, replica = sentinel_setup.master, sentinel_setup.replica
    # The grant did not reach the replica (asynchronous replication lost it): remove it there.
    with replica.client() as probe:
        sync_until(lambda: probe.exists(KEYS.lock) == 1)
        probe.config_set("replica-read-only", "no")
        probe.delete(KEYS.lock)
    old.kill()
    sentinel_setup.wait_promoted()
    # the flag is set before on_lost is called (from the watchdog): wait for the callback
    sync_until(lambda: lost == [lock])
    assert lock.lost
    assert not lock.held()
    again = client.lock("job", ttl=3)
    assert again.acquire(timeout=5)  # the library works against the new master
    # the fencing counter had reached the replica (only the lock key was removed there); had it
    # not, tokens could go backwards: min_replicas makes every grant wait for the replica
    assert again.token > token
    again.release()
    client.close()


def test_200_concurrent_acquires_through_a_sentinel_pool(
    sentinel_setup: SentinelSetup,
) -> None:
    # redis-py's Sentinel pool holds 100 connections and refuses the 101st ("Too many
    # connections"), and has no waiting variant: fencelock's requests wait for a slot instead.
    client = sentinel_client(sentinel_setup)

    def cycle(i: int) -> bool:
        lock = client.lock(f"many-{i}", ttl=30)
        got = lock.acquire(timeout=10)
        lock.release()
        return got

    assert sync_together([lambda i=i: cycle(i) for i in range(200)]) == [True] * 200
    client.close()


def test_the_other_primitives_survive_a_forced_failover(
    sentinel_setup: SentinelSetup,
) -> None:
    """A permit, a write lock and a multi-lock stay held and renewed across a failover that
    lost nothing; a versioned value and a fenced read-modify-write go on from the new master."""
    client = sentinel_client(sentinel_setup)
    permit = client.semaphore("jobs", 2, ttl=5, auto_renew=True)
    writer = client.rw_lock("catalog", ttl=5, auto_renew=True).write()
    multi = client.multi_lock(["from", "to"], ttl=5, auto_renew=True)
    assert permit.acquire(timeout=0) and writer.acquire(timeout=0)
    assert multi.acquire(timeout=0)
    counter = client.versioned("counter")
    assert counter.update(lambda v: int(v or 0) + 1) == (1, 1)
    assert client.fenced_update("stock", multi.tokens["from"], lambda v: 10) == 10
    sentinel_setup.failover()
    sentinel_setup.wait_synced(demote=True)
    renewed = client.statistics().renewals
    sync_until(lambda: client.statistics().renewals >= renewed + 8)  # all four, twice
    assert not permit.lost and permit.held()
    assert not writer.lost and writer.held()
    assert not multi.lost and multi.held()
    assert client.semaphore("jobs", 2).available() == 1  # on the new master
    assert not client.rw_lock("catalog").read().acquire(timeout=0)
    assert counter.update(lambda v: int(v or 0) + 1) == (2, 2)
    token = multi.tokens["from"]
    assert client.fenced_update("stock", token, lambda v: int(v or 0) - 1) == 9
    with pytest.raises(fencelock.StaleToken):  # the fence came across with the value
        client.fenced_update("stock", token - 1, lambda v: 0)
    permit.release()
    writer.release()
    multi.release()
    client.close()
