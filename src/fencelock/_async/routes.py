"""Routes: where a client's keys live, and how to reach them. A route sends a request to the
server of a key, or a command to every node, watches a wake-up channel, scans the nodes for
keys, and closes; a handful of members, whatever is behind them:

* one server (a plain Redis, or a Sentinel master): ``AsyncOneServerRoute``;
* a ``RedisCluster``: the same per key, on the node of its hash slot (every key of a name is in
  one slot, thanks to the hash tag); wake-ups use sharded pub/sub (``AsyncClusterRoute``);
* several independent masters (Redlock): every request goes to all of them at once, each
  bounded by a per-node timeout, and a majority decides (``AsyncQuorumRoute``).

A route is made from its settings (``RouteSettings``, a value: ``route``): ``connect.py`` makes
them from what the user passed, and the asyncio client's renewal thread makes its twin's from
its route's (``_offloop.py``). What is sent is the protocol's (``protocol.py``); what the
answers mean, the grants' (``grants.py``).
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, Protocol

from redis.exceptions import RedisError

from .._backend import AsyncLoopGuard, AsyncStateLock
from .._core.quorum import node_timeout, quorum, socket_limit
from .._core.replies import translate_error
from .._core.routing import CLUSTER, GLIDE, QUORUM, RouteSettings, RouteTraits
from .._transport import (
    AsyncClusterNode,
    AsyncRedis,
    AsyncRedisCluster,
    async_cluster_ready,
    async_own_client,
)
from ..errors import LockConnectionError, LockError
from .transport import AsyncRequester
from .waiter import AsyncClusterWaiters, AsyncWaiter, Watch

# seconds between two tries at subscribing a waiter where its slot moved, while none succeeds
FOLLOW_PAUSE: Final = 0.5


class AsyncSend(Protocol):
    """A request to the server of ``key``: the replies to ``commands`` on one connection,
    within ``timeout`` seconds, error replies as values (``noscript``: sent instead of the first
    command if the server answers NOSCRIPT)."""

    async def __call__(
        self,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]: ...


class AsyncRoute(abc.ABC):
    """Where the keys live (see the module's docstring). What it is and can do follows from
    its settings: ``traits`` (``RouteTraits``: a hand-off to a local waiter, a grant by a
    release, the jitter of re-tries, one fencing counter, a majority, Cluster slots, how a
    script publishes)."""

    # a request to the server of a key (Redlock: none, a majority decides)
    send: AsyncSend

    def __init__(self, settings: RouteSettings) -> None:
        self.settings = settings
        self.traits = RouteTraits.of(settings)
        # one request's bound ("one request timeout" in the README): waiting for a connection,
        # connecting and the reply included
        self.request_timeout = settings.request_timeout
        # every request goes through it (closed when a dropped client is reaped, too)
        self.requester = AsyncRequester(settings.request_timeout)
        self.waiters: dict[object, AsyncWaiter] = {}
        self._guard = AsyncStateLock()  # (waiters are made as channels are first watched)
        self._loop = AsyncLoopGuard()

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """The server, for messages."""

    @property
    def addresses(self) -> list[str]:
        """Every node's, in the order of ``send_all``'s replies."""
        return [self.address]

    @abc.abstractmethod
    async def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        """``command`` to every node at once (``only``: to these of them): per node its reply
        or the ``RedisError`` it failed with (silent for ``timeout`` seconds: timed out)."""

    @abc.abstractmethod
    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        """Subscribe to ``channel`` and yield what a message on it sets, the subscription
        confirmed within ``timeout`` seconds (None: one request timeout); ``what``: the object
        that waits, for errors."""

    async def follow(self, watch: Watch, timeout: float) -> bool:
        """Subscribe a watch whose channel moved (``Watch.moved``: a Cluster's slot) where it
        is served now, trying again every ``FOLLOW_PAUSE`` seconds while no node takes it (a
        failover under way), until ``timeout``: whether it is subscribed. (Only a Cluster's
        channels move.)"""
        return False

    @abc.abstractmethod
    def scan(self, match: str, count: int, timeout: float) -> AsyncIterator[bytes]:
        """Every key matching ``match`` on every node (SCAN, each call within ``timeout``). A
        node that fails raises, unless the others answered enough for the listing to be whole
        (Redlock: a held name is on a majority)."""

    def node_timeout(self, ttl: float) -> float:
        """How long one server may take to answer a request about a grant of ``ttl``: one
        request timeout (Redlock: a node's own timeout)."""
        return self.request_timeout

    def abandon(self) -> None:
        """The client was dropped unclosed: the listeners end by themselves (they only set
        flags here: this runs in the garbage collector)."""
        for waiter in list(self.waiters.values()):
            waiter.abandon()

    def pools(self) -> list[Any]:
        """The connection pools of fencelock's own clients (reaped when dropped unclosed)."""
        return [node.connection_pool for node in self._owned()]

    async def close(self) -> None:
        await self.requester.close()
        for waiter in list(self.waiters.values()):
            await waiter.close()
            await waiter.redis.connection_pool.disconnect()  # its own pool
        await self._close_owned()

    async def _close_owned(self) -> None:
        for node in self._owned():
            await node.aclose()
            # a pool of fencelock's own is not closed by aclose()
            await node.connection_pool.disconnect()

    def _owned(self) -> tuple[Any, ...]:
        return self.settings.servers if self.settings.owned else ()

    def _waiter(self, key: object, client: Callable[[], AsyncRedis], timeout: float) -> AsyncWaiter:
        """The waiter of ``key`` (a node), made once over a client of its own (``client()``:
        its pub/sub connection has a pool of its own, as in the requests' pool it would take
        a connection they may be waiting for)."""
        with self._guard:
            waiter = self.waiters.get(key)
            if waiter is None:
                waiter = AsyncWaiter(client(), confirm_timeout=timeout)
                self.waiters[key] = waiter
        return waiter


class AsyncOneServerRoute(AsyncRoute):
    """One server's word is final: a plain Redis, or a Sentinel master (``min_replicas``: no
    local hand-off and no grant by a release, as one script cannot wait for replicas)."""

    def __init__(self, settings: RouteSettings) -> None:
        super().__init__(settings)
        [self.redis] = settings.servers
        # (the requester's own method: the hot path of every acquire stays short)
        self.send = partial(self.requester.request, self.redis)
        if settings.listens and settings.shape != CLUSTER:  # (a Cluster's: one per node)
            timeout = settings.request_timeout
            self._waiter(0, partial(async_own_client, self.redis, timeout), timeout)

    @property
    def address(self) -> str:
        return server_address(self.redis)

    async def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        return await self.requester.fan_out(await self._nodes(timeout), command, timeout)

    async def _nodes(self, timeout: float) -> Sequence[AsyncRedis | AsyncClusterNode]:
        return [self.redis]

    async def scan(self, match: str, count: int, timeout: float) -> AsyncIterator[bytes]:
        for node in await self._nodes(timeout):
            async for key in scan_node(self.requester, node, match, count, timeout):
                yield key

    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        self._loop.check()
        return self.waiters[0].watch(channel, what, timeout=timeout)


class AsyncClusterRoute(AsyncOneServerRoute):
    """A ``RedisCluster``: each key on the node of its hash slot; wake-ups by sharded pub/sub
    on that node (one waiter per node, made as channels on it are first watched), following
    their slot when it moves (``waiter.AsyncClusterWaiters``)."""

    def __init__(self, settings: RouteSettings) -> None:
        super().__init__(settings)
        self.watches = AsyncClusterWaiters(
            self.redis, self.requester, self.request_timeout, self.waiters
        )

    async def _nodes(self, timeout: float) -> Sequence[AsyncRedis | AsyncClusterNode]:
        # (redis.asyncio's Cluster client learns its nodes at its first command: before that it
        # knows no primary, and a listing made first found nothing)
        await async_cluster_ready(self.redis, timeout)
        return self.redis.get_primaries()  # type: ignore[no-any-return]

    def pools(self) -> list[Any]:
        return []  # (a Cluster client's are its nodes', closed by its aclose)

    async def _close_owned(self) -> None:
        if self.settings.owned:  # (the renewal twin's own Cluster client)
            await self.redis.aclose()

    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        self._loop.check()
        return self.watches.watch(channel, what, timeout)

    async def follow(self, watch: Watch, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while True:
            if await self.watches.follow(watch, end - time.monotonic()):
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            watch.event.clear()
            await watch.event.wait(min(FOLLOW_PAUSE, left))


class AsyncQuorumRoute(AsyncRoute):
    """Redlock's independent masters: every command to all of them at once, each within its
    node timeout; wake-ups from any of them."""

    def __init__(self, settings: RouteSettings) -> None:
        super().__init__(settings)
        self.nodes: list[AsyncRedis] = list(settings.servers)
        self.send = no_one_server
        limit = socket_limit(settings.node_timeout)
        for i, node in enumerate(self.nodes if settings.listens else ()):
            self._waiter(i, partial(async_own_client, node, limit), limit)

    def node_timeout(self, ttl: float) -> float:
        """How long one node may take to answer a request about a lock of ``ttl``."""
        return self.settings.node_timeout or node_timeout(ttl)

    @property
    def address(self) -> str:
        return "the Redlock nodes"

    @property
    def addresses(self) -> list[str]:
        return [server_address(node) for node in self.nodes]

    async def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        nodes = [self.nodes[i] for i in only] if only else self.nodes
        return await self.requester.fan_out(nodes, command, timeout)

    @asynccontextmanager
    async def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> AsyncIterator[Watch]:
        """Subscribe on every node: a release message from any of them wakes the waiter."""
        self._loop.check()
        watch = Watch()
        async with contextlib.AsyncExitStack() as stack:
            for waiter in self.waiters.values():
                # a node that is down is skipped: the others, or the fallback re-try, wake us
                with contextlib.suppress(LockConnectionError):
                    await stack.enter_async_context(waiter.watch(channel, what, watch, timeout))
            yield watch

    async def scan(self, match: str, count: int, timeout: float) -> AsyncIterator[bytes]:
        answered = 0
        failure: LockError | None = None
        for node in self.nodes:
            try:
                async for key in scan_node(self.requester, node, match, count, timeout):
                    yield key
                answered += 1
            except LockError as exc:
                failure = exc
        # a lock is held on a majority: with fewer nodes silent than a majority, one of its
        # nodes answered; with more, the listing could miss some
        if failure is not None and len(self.nodes) - answered >= quorum(len(self.nodes)):
            raise failure


async def no_one_server(*args: Any, **kwargs: Any) -> list[Any]:
    raise TypeError("Redlock mode has no one server to send a request to")


def route(settings: RouteSettings) -> AsyncRoute:
    """The route ``settings`` describe (no request is sent)."""
    if settings.client == GLIDE:
        from .glide_route import AsyncGlideRoute  # (it imports this module)

        return AsyncGlideRoute(settings)
    if settings.shape == QUORUM:
        return AsyncQuorumRoute(settings)
    if settings.shape == CLUSTER:
        return AsyncClusterRoute(settings)
    return AsyncOneServerRoute(settings)


async def scan_node(
    requester: AsyncRequester,
    node: AsyncRedis | AsyncClusterNode,
    match: str,
    count: int,
    timeout: float,
) -> AsyncIterator[bytes]:
    """The keys of one server matching ``match`` (SCAN, each call within ``timeout``)."""

    async def send_one(command: Sequence[Any]) -> Any:
        [reply] = await requester.fan_out([node], command, timeout)
        return reply

    where = node.name if isinstance(node, AsyncClusterNode) else server_address(node)
    async for key in scan_keys(send_one, where, match, count):
        yield key


async def scan_keys(
    send_one: Callable[[Sequence[Any]], Any], where: str, match: str, count: int
) -> AsyncIterator[bytes]:
    """The keys matching ``match`` of the server ``send_one`` sends a command to (its reply, or
    the ``RedisError`` it failed with), by SCAN; ``where``: that server, for errors."""
    cursor = 0
    while True:
        reply = await send_one(("SCAN", cursor, "MATCH", match, "COUNT", count))
        if isinstance(reply, RedisError):
            # (the server, not the pattern: that is fencelock's key layout, not the user's)
            raise translate_error(reply, f"listing the names held on {where}")
        cursor = int(reply[0])
        for key in reply[1]:
            yield key
        if cursor == 0:
            return


def server_address(redis: AsyncRedis | AsyncRedisCluster) -> str:
    """host:port (or the socket path) of a client's server, for messages."""
    pool = getattr(redis, "connection_pool", None)  # (a RedisCluster has one per node)
    if pool is None:
        return "the Cluster's default node"
    options = pool.connection_kwargs
    if "path" in options:
        return str(options["path"])
    return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"
