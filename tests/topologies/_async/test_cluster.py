"""Redis Cluster: three masters with a replica each, built by the test suite.
Sync twin generated into tests/topologies/_sync by tools/gen_sync.py."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator

import pytest
from redis.crc import key_slot

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._backend import AsyncEvent
from fencelock._core.compute import COMPUTE, ComputeKeys
from fencelock._keys import LockKeys, fence_key_for, version_key_for
from fencelock._transport import AsyncRedisCluster
from fencelock_tools.servers.topology import Cluster
from tests.clients import AsyncClients
from tests.concurrency import TIMEOUT, AsyncCall, async_together, async_until, evalsha_calls
from tests.engine._async.test_late_grants import connected

# names whose keys land on different shards (and slots)
NAMES = [f"job-{i}" for i in range(12)]
# The ttl of the auto-renewed leases that must live on: a loaded machine stalls the watchdog
# (half a second seen with two CPU burners beside the suite); renewed at a third of it.
RENEWED_TTL = 3.0


@pytest.fixture
async def cluster_client(
    cluster: Cluster, async_clients: AsyncClients
) -> AsyncIterator[AsyncLockClient]:
    for master in cluster.masters:
        with master.client() as probe:
            probe.flushall()
    client = await async_clients.of_cluster(cluster)
    yield client
    await client.close()


def test_every_key_of_a_lock_is_in_one_slot() -> None:
    for name in NAMES:
        keys = LockKeys.for_name(name)
        slots = {key_slot(k.encode()) for k in (keys.lock, keys.fence, keys.channel)}
        assert len(slots) == 1, name
    assert len({key_slot(LockKeys.for_name(n).lock.encode()) for n in NAMES}) > 3


@pytest.mark.glide
async def test_locks_across_shards(cluster_client: AsyncLockClient, cluster: Cluster) -> None:
    locks = [cluster_client.lock(name, ttl=10) for name in NAMES]
    for lock in locks:
        assert await lock.acquire(timeout=0)
    first = locks[0].token
    shards = {cluster.master_for_key(LockKeys.for_name(n).lock).port for n in NAMES}
    assert len(shards) == 3  # the test really spans the cluster
    other = cluster_client.lock(NAMES[0], ttl=10)
    assert not await other.acquire(timeout=0)
    for lock in locks:
        assert await lock.held()
        await lock.extend()
        await lock.release()
    assert await other.acquire(timeout=0)
    assert other.token > first
    await other.release()


@pytest.mark.glide
@pytest.mark.parametrize(("wake", "fair"), [("all", True), ("one", True), ("one", False)])
async def test_release_wakes_a_waiter_by_sharded_pubsub(
    cluster_client: AsyncLockClient,
    cluster: Cluster,
    async_clients: AsyncClients,
    wake: str,
    fair: bool,
) -> None:
    # (fair=False: a barging release wakes the waiter without granting it; it re-tries)
    waiter_client = await async_clients.of_cluster(cluster, max_poll=3600, wake=wake)
    for name in NAMES[:3]:
        held = cluster_client.lock(name, ttl=3600, fair=fair)
        assert await held.acquire(timeout=0)
        waiting = waiter_client.lock(name, ttl=10, fair=fair)

        async def acquire_and_release() -> bool:
            granted = await waiting.acquire(timeout=None)  # noqa: B023 (awaited within the iteration)
            await waiting.release()  # noqa: B023
            return granted

        wakeups = waiter_client.statistics().wakeups
        call = AsyncCall(acquire_and_release)
        await async_until(lambda: waiter_client.statistics().waiting == 1)
        await held.release()
        assert await call.result()
        # a message woke it: the only timer is an hour long
        assert waiter_client.statistics().wakeups == wakeups + 1
    assert waiter_client.statistics().polls == 0
    await waiter_client.close()


@pytest.mark.glide
async def test_watchdog_renews_locks_of_every_slot(cluster_client: AsyncLockClient) -> None:
    locks = [cluster_client.lock(name, ttl=RENEWED_TTL, auto_renew=True) for name in NAMES]
    for lock in locks:
        assert await lock.acquire(timeout=0)
    # one multi-key script per slot and round: a CROSSSLOT error would lose every lock
    await async_until(lambda: cluster_client.statistics().renewals >= 2 * len(NAMES))
    assert cluster_client.statistics().losses == 0
    for lock in locks:
        assert not lock.lost and await lock.held()
        await lock.release()


@pytest.mark.glide
async def test_renewals_follow_a_failover(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    # The watchdog sends each renewal straight to the node of its slot, bounded by the lease's
    # deadline; after a failover that node answers MOVED, and the cluster client must take over.
    lock = cluster_client.lock("failover-job", ttl=3, auto_renew=True)
    assert await lock.acquire(timeout=0)
    old = cluster.master_for_key(lock._lease.spec.keys.lock)
    (replica,) = cluster.replicas_of(old)
    try:
        # TAKEOVER needs no votes: a plain manual failover is refused when the masters voted
        # for a replica of that shard in the last two node timeouts
        cluster.failover(replica, takeover=True)
        renewed = cluster_client.statistics().renewals
        await async_until(lambda: cluster_client.statistics().renewals >= renewed + 2)
        assert not lock.lost and await lock.held()
        await lock.release()
        with replica.client() as new_master:
            assert new_master.exists(lock._lease.spec.keys.lock) == 0
    finally:  # the session's cluster goes back to its first layout for the other tests
        cluster.failover(old, takeover=True)


async def test_a_late_grant_is_given_back_at_its_keys_node(cluster: Cluster) -> None:
    """The master of a lock's slot stopped with the acquire in its socket (for less than the
    cluster's node timeout: no failover), which it runs once resumed: the client's watchdog
    gives that grant back on that node (issue 29)."""
    key = LockKeys.for_name("late-job").lock
    master = cluster.master_for_key(key)
    redis = AsyncRedisCluster(
        host="127.0.0.1", port=cluster.port, socket_timeout=5, socket_connect_timeout=5
    )
    client = AsyncLockClient(redis, socket_timeout=0.5)  # (the node timeout is 2 s)
    try:
        lock = client.lock("late-job", ttl=300)
        given = await connected(client, lock)
        master.pause()
        try:
            with pytest.raises(fencelock.LockConnectionError):
                await lock.acquire(timeout=0)
        finally:
            master.resume()
        await async_until(lambda: client.statistics().giving_back == 0)
        assert client.statistics().given_back == given + 1
        with master.client() as probe:
            assert probe.exists(key) == 0
    finally:
        await client.close()
        await redis.aclose()


@pytest.mark.glide
async def test_reentrant_and_fenced_write_on_a_cluster(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    lock = cluster_client.lock("stock", ttl=10, reentrant=True)
    assert await lock.acquire(timeout=0)
    assert await lock.acquire(timeout=0)
    await cluster_client.fenced_set("stock-level", "41", lock.token)
    await cluster_client.fenced_set("stock-level", "42", lock.token + 1)  # a newer holder's
    with pytest.raises(fencelock.StaleToken):
        await cluster_client.fenced_set("stock-level", "40", lock.token)
    node = cluster.master_for_key("stock-level")
    assert node is cluster.master_for_key(fence_key_for("stock-level"))
    with node.client() as probe:
        assert probe.get("stock-level") == b"42"
    await lock.release()
    await lock.release()
    assert not await lock.held()


async def test_writes_without_a_lock_on_a_cluster(cluster: Cluster) -> None:
    # A decoding client of the application's: each value and its companion keys share a slot.
    for master in cluster.masters:
        with master.client() as probe:
            probe.flushall()
    redis = AsyncRedisCluster(
        host="127.0.0.1", port=cluster.port, socket_timeout=5, decode_responses=True
    )
    client = AsyncLockClient(redis)
    keys = ["hits-a", "hits-b", "{user:7}:hits"]
    assert len({cluster.master_for_key(k).port for k in keys}) > 1

    async def work(key: str) -> None:
        for _ in range(10):
            await client.versioned(key).update(lambda v: int(v or 0) + 1, retries=1000)

    calls = [AsyncCall(lambda k=k: work(k)) for k in keys * 2]  # type: ignore[misc]
    for call in calls:
        await call.result()
    for key in keys:
        assert await client.versioned(key).get() == (b"20", 20)
        assert cluster.master_for_key(key) is cluster.master_for_key(version_key_for(key))
    lock = client.lock("stock", ttl=10)
    assert await lock.acquire(timeout=0)
    assert await client.fenced_update("hits-a", lock.token, lambda v: int(v or 0) - 1) == 19
    with pytest.raises(fencelock.StaleToken):
        await client.fenced_get("hits-a", lock.token - 1)
    await lock.release()
    await client.close()
    await redis.aclose()


@pytest.mark.glide
async def test_operators_see_and_free_locks_on_every_master(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    locks = [cluster_client.lock(name, ttl=10, label=name) for name in NAMES]
    for lock in locks:
        assert await lock.acquire(timeout=0)
    listed = {info.name: info async for info in cluster_client.locks("job-*")}
    assert set(listed) == set(NAMES)  # SCAN on all three masters
    assert all(listed[lock.name].token == lock.token for lock in locks)
    assert all(info.label == name for name, info in listed.items())
    for lock in locks:
        forced = await cluster_client.force_release(lock.name, token=lock.token)
        assert forced.outcome is fencelock.ForceOutcome.RELEASED
        assert not await lock.held()
    assert [info async for info in cluster_client.locks()] == []


async def test_a_client_whose_cluster_client_is_new_lists_the_names_held(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    # A listing as the first command of a default Cluster client: redis.asyncio's learns its
    # nodes at its first command (before that it knows no primary, and nothing was listed).
    locks = [cluster_client.lock(name, ttl=10) for name in NAMES]
    for lock in locks:
        assert await lock.acquire(timeout=0)
    redis = AsyncRedisCluster(host="127.0.0.1", port=cluster.port)
    operator = AsyncLockClient(redis)
    try:
        assert {info.name async for info in operator.locks("job-*")} == set(NAMES)
    finally:
        await operator.close()
        await redis.aclose()
    for lock in locks:
        await lock.release()


@pytest.mark.glide
async def test_a_primary_that_cannot_list_its_names_fails_the_listing(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    """Its names are on no other node: a listing without them is not passed off as whole.
    (Over glide's clients one primary's failure was excused, as one Redlock node's is.)"""
    locks = [cluster_client.lock(name, ttl=10) for name in NAMES]
    for lock in locks:
        assert await lock.acquire(timeout=0)
    refusing = cluster.masters[1]
    with refusing.client() as probe:
        probe.execute_command("ACL", "SETUSER", "default", "-scan")
    try:
        with pytest.raises(fencelock.LockError, match="listing the names held on"):
            [info async for info in cluster_client.locks("job-*")]
    finally:
        with refusing.client() as probe:
            probe.execute_command("ACL", "SETUSER", "default", "+@all")
    for lock in locks:
        await lock.release()


@pytest.mark.glide
async def test_latches_and_barriers_on_a_cluster(
    cluster_client: AsyncLockClient, cluster: Cluster, async_clients: AsyncClients
) -> None:
    """Every key of a latch in one slot; its waiters are woken by sharded pub/sub; a joined
    participant is renewed on the latch's slot; a barrier's parties meet across clients."""
    other = await async_clients.of_cluster(cluster)
    try:
        for name in NAMES[:3]:
            waiter = other.latch(name, 2, ttl=3600)  # no timer: only a message wakes it
            waiting = AsyncCall(lambda: waiter.wait(timeout=None))  # noqa: B023
            await async_until(lambda: other.statistics().waiting == 1)
            joined = cluster_client.latch(name, 2, ttl=RENEWED_TTL, participant="joined")
            await joined.join()
            renewals = cluster_client.statistics().renewals
            await async_until(lambda: cluster_client.statistics().renewals > renewals)  # noqa: B023
            assert await cluster_client.latch(name, 2).count_down() == 1
            assert await joined.count_down() == 0
            assert await waiting.result()
            info = await other.inspect(name)
            assert info is not None and info.kind == "latch" and info.count == 0
        assert other.statistics().polls == 0
        barrier = cluster_client.barrier(NAMES[4], 2, ttl=10)
        entering = AsyncCall(lambda: barrier.enter(timeout=None))
        assert await other.barrier(NAMES[4], 2, ttl=10).enter(timeout=10)
        assert await entering.result()
    finally:
        await other.close()


@pytest.mark.glide
async def test_semaphores_on_a_cluster(
    cluster_client: AsyncLockClient, cluster: Cluster, async_clients: AsyncClients
) -> None:
    """Every key of a semaphore in one slot; a release wakes the first waiter by sharded
    pub/sub; renewals go to the permits' slot."""
    other = await async_clients.of_cluster(cluster, max_poll=3600)
    try:
        for name in NAMES[:3]:
            held = cluster_client.semaphore(name, 1, ttl=3600)
            assert await held.acquire(timeout=0)
            waiting = other.semaphore(name, 1, ttl=10)
            call = AsyncCall(lambda: waiting.acquire(timeout=None))  # noqa: B023
            await async_until(lambda: other.statistics().waiting == 1)
            await held.release()
            assert await call.result()
            assert waiting.token > 0
            await waiting.release()
        # a read-write lock's downgrade serves its queue by sharded pub/sub too
        writer = cluster_client.rw_lock(NAMES[0], ttl=3600).write()
        assert await writer.acquire(timeout=0)
        reader = other.rw_lock(NAMES[0], ttl=10).read()
        reading = AsyncCall(lambda: reader.acquire(timeout=None))
        await async_until(lambda: other.statistics().waiting == 1)
        await writer.downgrade()
        assert await reading.result()
        await reader.release()
        await writer.release()
        assert other.statistics().polls == 0  # woken by messages (the only timer: an hour)
        renewed = [
            cluster_client.semaphore(name, 1, ttl=RENEWED_TTL, auto_renew=True) for name in NAMES
        ]
        for permit in renewed:
            assert await permit.acquire(timeout=0)
        renewals = cluster_client.statistics().renewals
        await async_until(lambda: cluster_client.statistics().renewals >= renewals + 2 * len(NAMES))
        for permit in renewed:
            assert await permit.held()
            await permit.release()
    finally:
        await other.close()


async def test_multi_lock_across_slots(cluster_client: AsyncLockClient, cluster: Cluster) -> None:
    """Names on three shards: taken in canonical order, given back when one is busy, and two
    callers in opposite orders never deadlock."""
    names = NAMES[:6]
    assert len({cluster.master_for_key(LockKeys.for_name(n).lock).port for n in names}) == 3
    redis = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
    other = AsyncLockClient(redis)
    try:
        busy = other.lock(names[-1], ttl=10)
        assert await busy.acquire(timeout=0)
        multi = cluster_client.multi_lock(reversed(names), ttl=10, auto_renew=True)
        assert not await multi.acquire(timeout=0)
        for name in names[:-1]:  # all or none: the others were given back
            free = other.lock(name, ttl=10)
            assert await free.acquire(timeout=0)
            await free.release()
        await busy.release()

        async def cycles(client: AsyncLockClient, order: list[str]) -> None:
            mine = client.multi_lock(order, ttl=10, timeout=10)
            for _ in range(5):
                async with mine:
                    assert set(mine.tokens) == set(names)

        await async_together(
            [lambda: cycles(cluster_client, names), lambda: cycles(other, names[::-1])]
        )
        async with multi:
            assert await multi.held()
    finally:
        await other.close()
        await redis.aclose()


def names_in_one_slot(count: int) -> list[str]:
    """``count`` names whose keys all land in one slot. (A name's keys are tagged with the whole
    name, its braces escaped, so a hash tag inside a name does not choose the slot: such names
    are found, not made.)"""
    by_slot: dict[int, list[str]] = {}
    for i in itertools.count():
        name = f"acct-{i}"
        found = by_slot.setdefault(key_slot(LockKeys.for_name(name).lock.encode()), [])
        found.append(name)
        if len(found) == count:
            return found
    raise AssertionError("unreachable")


async def test_multi_lock_in_one_slot_is_one_script(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    """Names in one slot: one script each way on that slot's master, and waits served by its
    sharded wake-ups, with plain locks and another multi-lock of another client."""
    names = names_in_one_slot(3)
    master = cluster.master_for_key(LockKeys.for_name(names[0]).lock)
    redis = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
    other = AsyncLockClient(redis, max_poll=3600.0)  # woken by releases only
    probe = master.client()
    try:
        multi = cluster_client.multi_lock(names, ttl=10)
        async with multi:  # (a client's first acquire also reads the eviction policy)
            pass
        before = evalsha_calls(probe)
        assert await multi.acquire(timeout=0)
        assert evalsha_calls(probe) == before + 1
        assert await multi.held()
        plain = other.lock(names[1], ttl=10)
        assert not await plain.acquire(timeout=0)
        waiting = AsyncCall(lambda: plain.acquire(timeout=30))
        await async_until(lambda: probe.zcard(LockKeys.for_name(names[1]).queue) == 1)
        tokens = multi.tokens
        before = evalsha_calls(probe)
        await multi.release()
        assert evalsha_calls(probe) == before + 1
        assert await waiting.result() and plain.token > tokens[names[1]]
        rival = other.multi_lock(names[::-1], ttl=10)
        waiting = AsyncCall(lambda: rival.acquire(timeout=30))
        await async_until(lambda: probe.zcard(LockKeys.for_name(names[1]).queue) == 1)
        await plain.release()
        assert await waiting.result()
        assert not await multi.acquire(timeout=0)
        await rival.release()
        renewed = cluster_client.multi_lock(names, ttl=RENEWED_TTL, auto_renew=True)
        async with renewed:
            await async_until(lambda: cluster_client.statistics().renewals >= 2)
            assert await renewed.held() and not renewed.lost
    finally:
        probe.close()
        await other.close()
        await redis.aclose()


async def test_compute_once_on_a_cluster(cluster_client: AsyncLockClient, cluster: Cluster) -> None:
    """Every key of a computed key in one slot; one build across clients, its waiters woken by
    sharded pub/sub; a result stored on the key's slot."""
    redis = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
    other = AsyncLockClient(redis)
    try:
        for name in NAMES[:3]:
            keys = ComputeKeys.for_compute(name, "fencelock:", COMPUTE)
            slots = {key_slot(k.encode()) for k in (*keys.looked(), keys.channel)}
            assert len(slots) == 1, name
            go, builds = AsyncEvent(), []

            async def build() -> str:
                builds.append(1)  # noqa: B023 (called within the iteration)
                assert await go.wait(TIMEOUT)  # noqa: B023
                return f"result of {name}"  # noqa: B023

            clients = (cluster_client, other) * 3
            calls = [lambda c=c: c.compute_once(name, build, fresh_for=60) for c in clients]  # noqa: B023
            running = AsyncCall(lambda: async_together(calls))  # noqa: B023
            # one caller per client asks the server (the builder, and one waiting on sharded
            # pub/sub); the other four follow the first caller of their client
            await async_until(lambda: builds != [] and waiting(cluster_client, other) == 1)  # noqa: B023
            await async_until(lambda: queued(cluster_client, other) == 4)
            go.set()
            assert await running.result() == [f"result of {name}"] * 6
            assert builds == [1]
            master = cluster.master_for_key(keys.result)
            with master.client() as probe:
                assert probe.hget(keys.result, "v") == f'"result of {name}"'.encode()
        assert cluster_client.statistics().polls + other.statistics().polls == 0
    finally:
        await other.close()
        await redis.aclose()


def waiting(*clients: AsyncLockClient) -> int:
    return sum(client.statistics().waiting for client in clients)


def queued(*clients: AsyncLockClient) -> int:
    """compute_once callers waiting for the first caller of their own client."""
    return sum(client.statistics().compute_queued for client in clients)


def channels_on_one_node(cluster: Cluster, count: int) -> list[str]:
    """``count`` lock channels of different slots that one master serves."""
    by_node: dict[int, list[str]] = {}
    for i in itertools.count():
        channel = LockKeys.for_name(f"chan-{i}").channel
        found = by_node.setdefault(cluster.master_for_key(channel).port, [])
        found.append(channel)
        if len(found) == count:
            return found
    raise AssertionError("unreachable")


async def test_channels_of_several_slots_leave_together(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    """Channels of different slots on one node, left at once: each is unsubscribed (a
    SUNSUBSCRIBE of several slots is refused with CROSSSLOT: they stayed subscribed, and the
    error was taken for the refusal of whichever subscription was being confirmed)."""
    channels = channels_on_one_node(cluster, 3)
    topology = cluster_client._wiring.topology
    with cluster.master_for_key(channels[0]).client() as probe:

        def subscribers() -> list[int]:
            reply = probe.execute_command("PUBSUB", "SHARDNUMSUB", *channels)
            return [int(n) for n in reply[1::2]]

        async with contextlib.AsyncExitStack() as stack:
            for channel in channels:
                await stack.enter_async_context(topology.watch(channel, "a test's wait", 10))
            assert subscribers() == [1, 1, 1]
        await async_until(lambda: subscribers() == [0, 0, 0])
        async with topology.watch(
            channels[0], "a test's wait", 10
        ) as watch:  # (no refusal left to take)
            assert probe.execute_command("SPUBLISH", channels[0], "x") == 1
            assert await watch.event.wait(10)


async def test_watches_of_several_slots_survive_a_broken_connection(
    cluster_client: AsyncLockClient, cluster: Cluster
) -> None:
    """The node closes the pub/sub connection: its watches (of channels of different slots)
    follow their slots and are subscribed again, each on its own (redis-py re-subscribes all
    of a connection's channels in one SSUBSCRIBE, refused when they span slots: they were
    all lost)."""
    channels = channels_on_one_node(cluster, 2)
    topology = cluster_client._wiring.topology
    with cluster.master_for_key(channels[0]).client() as probe:
        async with contextlib.AsyncExitStack() as stack:
            watches = [
                await stack.enter_async_context(topology.watch(channel, "a test's wait", 10))
                for channel in channels
            ]
            probe.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            for channel, watch in zip(channels, watches, strict=True):
                # Woken by the break, then followed. The listener, re-making its connection,
                # may take it for broken once more (its PING failed): the watch is then moved
                # out again, woken, and followed by the next wait. So: until a message reaches it.
                for _ in range(5):
                    assert await topology.wait(watch, 10)
                    watch.event.clear()
                    if not watch.moved and probe.execute_command("SPUBLISH", channel, "x") == 1:
                        break
                else:
                    raise AssertionError(f"{channel}: never subscribed again")
                assert await topology.wait(watch, 10)  # (the message)
