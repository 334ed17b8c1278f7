# GENERATED from tests/topologies/_async/test_cluster_changes.py by tools/gen_sync.py: edit that file instead.
"""Waiters and leases while a Cluster changes under them: a slot that moves (the classic
migration, and Valkey 9's atomic one), a manual failover, a master killed and replaced. The
cluster (``moving_cluster``, one per session) is left as the tests change it: each finds where
its names are now.
Sync twin generated into tests/topologies/_sync by tools/gen_sync.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from redis.crc import key_slot

from fencelock._sync.client import LockClient
from fencelock._keys import LockKeys
from fencelock._transport import SyncRedisCluster
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.topology import Cluster
from tests.concurrency import SyncCall, sync_until

MIGRATIONS = ["classic", "atomic"]
NO_ATOMIC = "this server has no atomic slot migration (CLUSTER MIGRATESLOTS: Valkey 9)"
REDIRECTIONS = SyncRedisCluster.RedisClusterRequestTTL  # one call's tries, in redis-py


def slot_of(name: str) -> int:
    return key_slot(LockKeys.for_name(name).lock.encode())


def other_master(cluster: Cluster, slot: int) -> EmbeddedServer:
    """A master that does not serve ``slot`` now."""
    owner = cluster.master_for_slot(slot)
    return next(m for m in cluster.running_masters() if m is not owner)


@pytest.fixture
def clients(
    moving_cluster: Cluster,
) -> Iterator[tuple[LockClient, LockClient]]:
    """A holders' client and a waiters' client (``max_poll`` an hour: a waiter re-tries when
    woken, or at its deadline: the holders' leases are an hour long too)."""
    for master in moving_cluster.running_masters():
        with master.client() as probe:
            probe.flushall()
    redis = [
        SyncRedisCluster(host="127.0.0.1", port=moving_cluster.running_masters()[0].port)
        for _ in range(2)
    ]
    holding, waiting = LockClient(redis[0]), LockClient(redis[1], max_poll=3600)
    yield holding, waiting
    for client in (holding, waiting):
        client.close()
    for cluster in redis:
        cluster.close()


def queued(cluster: Cluster, name: str, count: int) -> None:
    """Until ``count`` waiters of ``name`` are queued where its slot is (so subscribed)."""
    queue = LockKeys.for_name(name).queue
    with cluster.master_for_slot(slot_of(name)).client() as probe:
        sync_until(lambda: probe.zcard(queue) == count)


@pytest.mark.parametrize("migration", MIGRATIONS)
def test_a_waiter_follows_its_name_to_another_master(
    moving_cluster: Cluster, clients: tuple[LockClient, LockClient], migration: str
) -> None:
    """The issue's reproducer: the slot of a name moves while a waiter waits for it; the
    holder's release (following MOVED) grants the name to the waiter on the new master, and the
    waiter, told by the old master's SUNSUBSCRIBE, subscribes there and takes it. Before, it
    never learnt: acquire returned False at its deadline, the name held by nobody meanwhile."""
    if migration == "atomic" and not moving_cluster.migrates_atomically:
        pytest.skip(NO_ATOMIC)
    holding, waiting = clients
    name = f"moving-{migration}"
    held = holding.lock(name, ttl=3600)
    assert held.acquire(timeout=0)
    waiter = waiting.lock(name, ttl=60)
    call = SyncCall(lambda: waiter.acquire(timeout=20))
    queued(moving_cluster, name, 1)
    target = other_master(moving_cluster, slot_of(name))
    moving_cluster.move_slot(slot_of(name), target, atomic=migration == "atomic")
    token = held.token
    held.release()
    assert call.result()
    assert waiter.token > token
    with target.client() as probe:
        assert probe.pttl(LockKeys.for_name(name).lock) > 0  # granted where the slot is now
    assert waiting.statistics().polls == 0  # woken, not timed out
    waiter.release()


def test_a_waiter_follows_a_manual_failover(
    moving_cluster: Cluster, clients: tuple[LockClient, LockClient]
) -> None:
    """CLUSTER FAILOVER: the old master ends its subscriptions (SUNSUBSCRIBE) as it becomes a
    replica; the release lands on the promoted one, and so does the waiter."""
    holding, waiting = clients
    name = "failing-over"
    held = holding.lock(name, ttl=3600)
    assert held.acquire(timeout=0)
    waiter = waiting.lock(name, ttl=60)
    call = SyncCall(lambda: waiter.acquire(timeout=20))
    queued(moving_cluster, name, 1)
    master = moving_cluster.master_for_slot(slot_of(name))
    (replica,) = moving_cluster.replicas_now(master)
    moving_cluster.failover(replica)
    token = held.token
    held.release()
    assert call.result()
    assert waiter.token > token
    assert waiting.statistics().polls == 0
    with replica.client() as probe:
        assert probe.pttl(LockKeys.for_name(name).lock) > 0
    waiter.release()


def test_a_waiter_follows_a_killed_master(
    moving_cluster: Cluster, clients: tuple[LockClient, LockClient]
) -> None:
    """SIGKILL of the master: the waiter's pub/sub connection breaks, and it subscribes again
    where the cluster serves the slot once it has promoted the replica (tried every
    FOLLOW_PAUSE meanwhile), rather than wait for the dead node to come back."""
    holding, waiting = clients
    name = "killed"
    held = holding.lock(name, ttl=3600)
    assert held.acquire(timeout=0)
    waiter = waiting.lock(name, ttl=60)
    call = SyncCall(lambda: waiter.acquire(timeout=20))
    queued(moving_cluster, name, 1)
    master = moving_cluster.master_for_slot(slot_of(name))
    moving_cluster.wait_synced(master)  # the grant and the queue are on the replica
    try:
        promoted = moving_cluster.kill_master(master)
        token = held.token
        held.release()
        assert call.result()
        assert waiter.token > token
        assert waiting.statistics().polls == 0
        with promoted.client() as probe:
            assert probe.pttl(LockKeys.for_name(name).lock) > 0
        waiter.release()
    finally:
        moving_cluster.rejoin(master)
    assert moving_cluster.replicas_now(promoted) == [master]  # (back, as the replica)


def test_a_subscription_sent_where_the_slot_was_follows_moved(
    moving_cluster: Cluster, clients: tuple[LockClient, LockClient]
) -> None:
    """A client that has not seen a slot move subscribes on the old master, which answers
    MOVED: the watch is made on the new one. (Before, the MOVED was raised as a LockError.)"""
    _, waiting = clients
    name = "stale-map"
    lock = waiting.lock(name, ttl=10)
    assert lock.acquire(timeout=0)  # the client learns where the slot is
    lock.release()
    channel = LockKeys.for_name(name).channel
    target = other_master(moving_cluster, slot_of(name))
    moving_cluster.move_slot(slot_of(name), target)  # behind the client's back
    with waiting._wiring.topology.watch(channel, "a test's wait", 10) as watch:
        with target.client() as probe:
            assert probe.execute_command("SPUBLISH", channel, "hello") == 1
        assert watch.event.wait(10)


def test_a_subscription_sent_to_a_demoted_master_moves_to_the_new_one(
    moving_cluster: Cluster, clients: tuple[LockClient, LockClient]
) -> None:
    """A client that has not seen a failover subscribes on the old master, now a replica. A
    replica takes the SSUBSCRIBE, and passes on the master's messages, but the master does not
    count it as listening: a release would take back the grant it made to such a waiter, and
    make it to the next, while the waiter took it from the message too (two holders, seen in
    bench.reshard after a manual failover). The watch is made on the new master instead."""
    _, waiting = clients
    name = "demoted"
    lock = waiting.lock(name, ttl=10)
    assert lock.acquire(timeout=0)  # the client learns where the slot is
    lock.release()
    channel = LockKeys.for_name(name).channel
    master = moving_cluster.master_for_slot(slot_of(name))
    (replica,) = moving_cluster.replicas_now(master)
    moving_cluster.failover(replica)  # behind the client's back
    with waiting._wiring.topology.watch(channel, "a test's wait", 10) as watch:
        with replica.client() as promoted:
            assert promoted.execute_command("SPUBLISH", channel, "hello") == 1
        assert watch.event.wait(10)


def test_lock_calls_during_a_migration(moving_cluster: Cluster) -> None:
    """While a slot migrates (MIGRATING on its master, IMPORTING on the target), its keys moved
    already: a request on one key is answered ASK and runs on the target; a script on several
    keys, some of which exist nowhere (a lock's queue), is answered TRYAGAIN until the migration
    ends, and is sent again until then, within the call's deadline. (Before, the release raised
    "TTL exhausted" after the few tries of redis-py's cluster client: 16 redirections.)"""
    redis = SyncRedisCluster(host="127.0.0.1", port=moving_cluster.running_masters()[0].port)
    client = LockClient(redis, socket_timeout=30)  # (the bound of each call)
    try:
        name = "migrating"
        held = client.lock(name, ttl=3600)
        assert held.acquire(timeout=0)
        slot, target = slot_of(name), other_master(moving_cluster, slot_of(name))
        moving_cluster.start_migration(slot, target)
        try:
            assert moving_cluster.migrate_keys(slot, target) == 1  # the lock (its token inside)
            assert held.held()
            held.extend()
            token = held.token
            with target.client() as probe:
                refused = _tryagain_replies(probe)
                releasing = SyncCall(held.release)
                # more than one call of the cluster client's worth: it gave up, fencelock not
                sync_until(lambda: _tryagain_replies(probe) > refused + REDIRECTIONS)
        finally:
            moving_cluster.finish_migration(slot, target)
        releasing.result()
        again = client.lock(name, ttl=60)
        assert again.acquire(timeout=0)
        assert again.token > token
        with target.client() as probe:
            assert probe.pttl(LockKeys.for_name(name).lock) > 0
        again.release()
    finally:
        client.close()
        redis.close()


def _tryagain_replies(probe: Redis) -> int:
    """How many TRYAGAIN error replies the server has sent."""
    stats = probe.info("errorstats").get("errorstat_TRYAGAIN", {})
    return int(stats.get("count", 0))
