"""An asyncio lease holds while the process lives, even when its event loop is blocked (issue
24): the leases are renewed by a thread off the loop, and the stall is reported.

The blocking call is the scenario (a sync database driver, CPU work inside an async critical
section), several ttls long; another client tries to take the lock meanwhile from a thread."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import redis.cluster

import fencelock
from fencelock import _events as events
from fencelock import metrics
from fencelock._async.client import AsyncLockClient
from fencelock._keys import LockKeys
from fencelock._transport import AsyncRedisCluster
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.topology import Cluster
from tests.concurrency import async_until
from tests.conftest import _binary
from tests.engine._async.test_late_grants import connected

TTL = 1.0
BLOCKED = 3.0  # three ttls
MAKER = "fencelock-watchdog-connect"  # the thread that makes the renewal connections


async def test_a_blocked_loop_keeps_its_lease_and_nobody_else_gets_in(
    server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    stalls: list[events.Event] = []
    stop = events.subscribe(
        lambda e: stalls.append(e) if isinstance(e, events.LoopStalled) else None
    )
    blocking = threading.Event()
    tried: list[bool] = []

    def other_client() -> None:
        with fencelock.LockClient.from_url(server.url) as other:
            blocking.wait()
            time.sleep(2 * TTL)  # two ttls into the block: the lease would have run out
            tried.append(other.lock("blocked", ttl=10).acquire(timeout=0))

    thread = threading.Thread(target=other_client)
    thread.start()
    try:
        async with AsyncLockClient.from_url(server.url) as client:
            caplog.set_level(logging.WARNING, "fencelock.watchdog")
            async with client.lock("blocked", ttl=TTL, auto_renew=True) as lock:
                blocking.set()
                time.sleep(BLOCKED)  # the event loop is blocked: no task runs
                thread.join()
                lock.check()  # still held: renewed meanwhile, off the loop
            assert not lock.lost and client.statistics().losses == 0
    finally:
        stop()
        thread.join()
    assert tried == [False]  # nobody else got in
    # the stall was reported: a warning and an event (the metric's source)
    assert any("event loop was blocked" in r.getMessage() for r in caplog.records)
    assert stalls and stalls[0].seconds >= TTL / 3  # type: ignore[union-attr]


async def test_the_stall_reaches_the_metrics(server: EmbeddedServer) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    subscription = metrics.enable_prometheus(registry)
    try:
        async with AsyncLockClient.from_url(server.url) as client:
            async with client.lock("stalled", ttl=0.3, auto_renew=True):
                time.sleep(0.6)  # blocked for two ttls
                # (the loop monitor reports once the loop runs again)
                await client.lock("other", ttl=1).acquire(timeout=0)
            count = registry.get_sample_value("fencelock_event_loop_stall_seconds_count")
            assert count is not None and count >= 1
    finally:
        subscription.disable()


async def test_a_cluster_clients_renewal_connections_are_made_off_the_loop(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renewal thread's own ``RedisCluster`` discovers the slots as it is made: a round
    trip to a node, and a request timeout more for each node asked first that does not answer
    (here the replicas, stopped). It was made on the loop, at the first auto-renewed lease,
    every task of the loop waiting (issue 29); now in a thread of its own, and the lease is
    renewed as before."""
    made_in: list[threading.Thread] = []
    discover = redis.cluster.NodesManager.initialize

    def observed(manager: redis.cluster.NodesManager, *args: Any, **kwargs: Any) -> None:
        made_in.append(threading.current_thread())
        discover(manager, *args, **kwargs)

    monkeypatch.setattr(redis.cluster.NodesManager, "initialize", observed)
    for master in cluster.masters:
        with master.client() as probe:
            probe.flushall()
    user = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
    client = AsyncLockClient(user, socket_timeout=1.0)
    try:
        lock = client.lock("off-loop", ttl=3.0, auto_renew=True)
        for replica in cluster.replicas:
            replica.pause()
        try:
            assert await lock.acquire(timeout=0)
        finally:
            for replica in cluster.replicas:
                replica.resume()
        await async_until(lambda: client.statistics().renewals >= 1)
        assert made_in and threading.current_thread() not in made_in
        assert not lock.lost and await lock.held()
        await lock.release()
    finally:
        await client.close()
        await user.aclose()


async def test_renewal_connections_that_cannot_be_made_yet_are_made_again(
    server_kind: str,
) -> None:
    """A Cluster of one node, stopped with an acquire in its socket: the late grant's give-back
    is the client's first use of the renewal thread, whose cluster client cannot be made while
    the node answers nothing. It is made again, and the give-back done, once the node answers
    (issue 29). Made on the loop, it blocked the loop, then failed the acquire with redis-py's
    RedisClusterException."""
    key = LockKeys.for_name("late-job").lock
    with Cluster(_binary(server_kind), masters=1, replicas_per_master=0) as cluster:
        (node,) = cluster.masters
        user = AsyncRedisCluster(host="127.0.0.1", port=cluster.port, socket_timeout=5)
        client = AsyncLockClient(user, socket_timeout=0.5)
        try:
            lock = client.lock("late-job", ttl=300)
            given = await connected(client, lock)
            makers: set[threading.Thread] = set()

            def made_again() -> bool:  # (each maker lives one connect timeout at least)
                makers.update(t for t in threading.enumerate() if t.name == MAKER)
                return len(makers) >= 2

            node.pause()
            try:
                with pytest.raises(fencelock.LockConnectionError):
                    await lock.acquire(timeout=0)
                await async_until(made_again)
            finally:
                node.resume()
            await async_until(lambda: client.statistics().giving_back == 0)
            assert client.statistics().given_back == given + 1
            with node.client() as probe:
                assert probe.exists(key) == 0
        finally:
            await client.close()
            await user.aclose()
