"""The in-memory topology (issue 22, point 7): the real ``AsyncTopology`` over the real routes
(``AsyncOneServerRoute``, ``AsyncQuorumRoute``), with their real ``AsyncRequester`` and
``AsyncWaiter``, over simulated servers (``client.py``
gives them redis-py's surface, ``world.py`` the network). A ``SimClient`` is what
``LockClient`` wires, wired by hand for one simulated process: the topology, the local queues,
the watchdog and the counters in an ``AsyncWiring``, and the facades made from it as the client
makes them (``AsyncLock(wiring, LeaseOptions.checked(...), reentrant=..., fair=...)``).
Nothing in the library is replaced: every script, reply, wait and renewal is the library's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fencelock._async.election import DEFAULT_POLICY, AsyncElection
from fencelock._async.engine import AsyncWiring, ClientState
from fencelock._async.lock import AsyncLock
from fencelock._async.routes import route
from fencelock._async.rw_lock import AsyncReadWriteLock
from fencelock._async.semaphore import AsyncSemaphore
from fencelock._async.singleflight import AsyncLocalQueues
from fencelock._async.topology import AsyncTopology
from fencelock._async.waiter import AsyncWaiter
from fencelock._async.watchdog import AsyncWatchdog
from fencelock._backend import AsyncStateLock
from fencelock._core.options import DEFAULT_MAX_HANDOFFS, LeaseOptions
from fencelock._core.routing import ONE, QUORUM, RouteSettings
from fencelock._core.stats import Counters
from fencelock._keys import DEFAULT_PREFIX

from .client import SimRedis
from .world import Process, World

REQUEST_TIMEOUT = 0.25  # a simulated client's socket_timeout: its one request's bound


@dataclass
class SimClient:
    """One simulated process's client: ``lock()``, ``semaphore()``, ``rw_lock()``,
    ``election()`` as ``LockClient`` makes them, and ``close()``."""

    process: Process
    wiring: AsyncWiring

    @property
    def topology(self) -> AsyncTopology:
        return self.wiring.topology

    def _options(self, name: str, ttl: float, timeout: float | None, **given: Any) -> LeaseOptions:
        return LeaseOptions.checked(name, ttl, timeout=timeout, threads=False, **given)

    def lock(
        self,
        name: str,
        ttl: float,
        *,
        timeout: float | None = None,
        reentrant: bool = False,
        fair: bool = True,
        **given: Any,
    ) -> AsyncLock:
        options = self._options(name, ttl, timeout, **given)
        return AsyncLock(self.wiring, options, reentrant=reentrant, fair=fair)

    def semaphore(
        self, name: str, limit: int, ttl: float, *, timeout: float | None = None, **given: Any
    ) -> AsyncSemaphore:
        return AsyncSemaphore(self.wiring, self._options(name, ttl, timeout, **given), limit)

    def rw_lock(
        self, name: str, ttl: float, *, timeout: float | None = None, **given: Any
    ) -> AsyncReadWriteLock:
        return AsyncReadWriteLock(self.wiring, self._options(name, ttl, timeout, **given))

    def election(
        self,
        name: str,
        ttl: float,
        *,
        timeout: float | None = None,
        on_lost: Callable[[Any], object] | None = None,
    ) -> AsyncElection:
        options = self._options(
            name, ttl, timeout, auto_renew=True, on_lost=on_lost, on_lost_policy=DEFAULT_POLICY
        )
        return AsyncElection(self.wiring, options)

    async def close(self) -> None:
        self.wiring.state.closed = True
        await self.wiring.watchdog.close()
        await self.wiring.topology.close()


def sim_client(
    world: World,
    process: Process,
    *,
    redlock: bool = False,
    wake: str = "one",
    max_handoffs: int = DEFAULT_MAX_HANDOFFS,
    request_timeout: float = REQUEST_TIMEOUT,
    node_timeout: float | None = None,
    max_poll: float | None = None,
) -> SimClient:
    """The client ``process`` would make of the world's servers: the first node alone, or
    every node as Redlock (as ``connect`` does, without a socket)."""
    counters = Counters(AsyncStateLock())
    # (the simulated clients are the world's: not closed with the route; its waiters are made
    # here, over simulated clients, not by the route)
    if redlock:
        nodes = tuple(SimRedis(world, process, node) for node in world.nodes)
        limit = node_timeout or request_timeout
        waiters = {
            i: AsyncWaiter(SimRedis(world, process, node), confirm_timeout=limit)  # type: ignore[arg-type]
            for i, node in enumerate(world.nodes)
        }
        settings = RouteSettings(
            QUORUM, nodes, request_timeout, owned=False, node_timeout=node_timeout, listens=False
        )
    else:
        node = world.nodes[0]
        waiters = {0: AsyncWaiter(SimRedis(world, process, node), confirm_timeout=request_timeout)}  # type: ignore[arg-type]
        server = (SimRedis(world, process, node),)
        settings = RouteSettings(ONE, server, request_timeout, owned=False, listens=False)
    made = route(settings)
    made.waiters.update(waiters)
    topology = AsyncTopology(made, counters)
    # (the eviction-policy check, one INFO per client, is left out: it only logs)
    topology.protocol.server_checked = True
    wiring = AsyncWiring(
        topology,
        topology.grants,
        AsyncLocalQueues(max_handoffs, counters),
        AsyncWatchdog(topology.grants, topology.traits.slot_of, counters),
        counters,
        ClientState(f"SimClient of {process.name}"),
        AsyncStateLock(),
        DEFAULT_PREFIX,
        wake == "one",
        max_poll,
    )
    return SimClient(process, wiring)
