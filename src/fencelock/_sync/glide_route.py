# GENERATED from src/fencelock/_async/glide_route.py by tools/gen_sync.py: edit that file instead.
"""valkey-glide's clients as a route (docs/glide.md): one server (a ``GlideClient``), Redlock's
independent masters (a list of them), or a Cluster (a ``GlideClusterClient``: each request to
the primary of its key's slot, wake-ups by sharded pub/sub). What is above the route (the
protocol, the grants, the engine) is the same as over redis-py's clients.

* Requests go through the application's glide clients, each a non-atomic batch (the commands
  in order, on the client's one connection to the server, error replies as values) bounded by
  the deadline of the call it serves (the batch's own timeout). A batch that timed out may still
  run (``NoReply``: a grant it may make is given back late). NOSCRIPT is answered by EVAL once.
* Replies and errors are read in redis-py's terms (``_glide.decoded``), so that the kinds read
  them as they read redis-py's.
* Wake-ups come through a glide client of fencelock's own per server (made at the first watch,
  from the settings of the application's: its subscriptions and its messages are its own, and
  the application's client gets none). glide confirms a SUBSCRIBE before it returns; a release
  published after that reaches the waiter. glide re-subscribes by itself after a reconnection;
  a message published meanwhile is lost, and its waiter re-tries at its next poll (the end of
  the holder's lease, or ``max_poll``).
* On a Cluster, glide follows the slots itself for requests (MOVED, ASK, a failover: within
  the request's bound). A watch is not followed to where its slot moved, as over redis-py's
  clients (``Watch.moved`` is never set here): glide's own re-subscribing is relied on, and a
  waiter whose message was lost meanwhile re-tries at its next poll.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Final

from redis.exceptions import ConnectionError, NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._backend import SyncBackground, SyncMutex, SyncStateLock, sync_at_once
from .._core.options import ClientOptions
from .._core.quorum import node_timeout, quorum, socket_limit
from .._core.replies import NoReply, translate_error
from .._core.routing import CLUSTER, GLIDE, ONE, QUORUM, RouteSettings
from .._glide import (
    SYNC_GLIDE,
    address,
    argument,
    sync_glide,
    sync_let_go,
    config_for,
    config_of,
    decoded,
    error_reply,
    package_of,
)
from .._keys import described, validate_db
from ..errors import LockConnectionError, LockError
from .routes import SyncRoute, no_one_server, scan_keys
from .waiter import Watch

# the package whose clients this API takes, and what they are called, for messages
PACKAGE: Final = SYNC_GLIDE
CLIENT: Final = PACKAGE + ".GlideClient"


def recognised(redis: object) -> bool:
    """Whether ``redis`` is a glide client, or a list of them (no import of glide)."""
    return package_of(redis) is not None


def glide_settings(redis: Any, options: ClientOptions) -> RouteSettings:
    """The settings of the route to ``redis``: a ``GlideClient`` of this API's package, a
    non-empty list of them (Redlock), or a ``GlideClusterClient``, checked. The clients are the
    application's: never closed by fencelock."""
    package = package_of(redis)
    if package != PACKAGE:
        raise TypeError(
            f"redis is a client of {package}, not of {PACKAGE}: this LockClient takes "
            f"{CLIENT} (fencelock.LockClient takes glide_sync's, fencelock.asyncio.LockClient "
            "glide's)"
        )
    api = sync_glide()
    quorum = isinstance(redis, list | tuple)
    nodes = list(redis) if quorum else [redis]
    cluster = not quorum and isinstance(redis, api.GlideClusterClient)
    for node in nodes:
        if not isinstance(node, api.GlideClusterClient if cluster else api.GlideClient):
            if quorum:
                raise TypeError(f"Redlock nodes must be {CLIENT}, not {described(node)}")
            raise TypeError(
                f"redis must be a {CLIENT}, a {PACKAGE}.GlideClusterClient, or a non-empty "
                f"list of {CLIENT} (Redlock), not {described(node)}"
            )
        validate_db(config_of(node).database_id or 0)
    if options.min_replicas:
        raise ValueError("min_replicas is not supported with glide clients (docs/glide.md)")
    if options.scripts == "never":
        raise ValueError('scripts="never" is not supported with glide clients (docs/glide.md)')
    shape = QUORUM if quorum else CLUSTER if cluster else ONE
    return RouteSettings(
        shape,
        tuple(nodes),
        options.socket_timeout,
        owned=False,
        node_timeout=options.node_timeout if shape == QUORUM else None,
        client=GLIDE,
    )


def ms(seconds: float) -> int:
    """A timeout as glide takes it: whole milliseconds, at least one (0 means none)."""
    return max(1, math.ceil(seconds * 1000))


def request(
    node: Any, commands: Sequence[Sequence[Any]], timeout: float, route: Any = None
) -> list[Any]:
    """The replies to ``commands``, sent by ``node`` in one non-atomic batch within ``timeout``
    seconds (error replies as redis-py's exceptions, values); ``NoReply`` when it timed out (it
    may still run), redis-py's ``ConnectionError`` when the client cannot send. ``route``: a
    cluster client's, to the one node the batch goes to."""
    if timeout <= 0:
        raise RedisTimeoutError("no time left to send the request")
    api = sync_glide()
    if route is None:
        batch, options = api.Batch(is_atomic=False), api.BatchOptions(timeout=ms(timeout))
    else:
        batch = api.ClusterBatch(is_atomic=False)
        options = api.ClusterBatchOptions(timeout=ms(timeout), route=route)
    for command in commands:
        batch.custom_command([argument(part) for part in command])
    try:
        replies = node.exec(batch, raise_on_error=False, options=options)
    except api.TimeoutError as exc:
        raise NoReply(f"{address(node)}: no reply within {ms(timeout)} ms") from exc
    except api.RequestError as exc:  # (not a reply: glide could not send it)
        raise ConnectionError(f"{address(node)}: {exc}") from exc
    except api.GlideError as exc:  # closed, or not connected
        raise ConnectionError(f"{address(node)}: {type(exc).__name__}: {exc}") from exc
    return [decoded(reply) for reply in replies or ()]


class SyncGlideWaiter:
    """The wake-up subscriptions of one client on one server, through a glide client of
    fencelock's own (see the module's docstring), made at the first watch within its bound."""

    def __init__(self, server: Any, confirm_timeout: float, sharded: bool = False) -> None:
        self.server = server  # the application's client: the settings ours is made from
        self._confirm_timeout = confirm_timeout
        self._sharded = sharded  # a Cluster's: SSUBSCRIBE, on the node of the channel's slot
        self._client: Any = None
        # our client could not be made (the server is down): not tried again before this
        # (monotonic time), so that every wait does not cost a connect timeout more
        self._unreachable_until = 0.0
        # orders the making of the client, and each channel's SUBSCRIBE and UNSUBSCRIBE: an
        # UNSUBSCRIBE decided before a new watcher came never reaches the server after its
        # SUBSCRIBE
        self._mutex = SyncMutex()
        self._guard = SyncStateLock()  # the map below (shared with the listener)
        self._watchers: dict[str, set[Watch]] = {}
        self._listener = SyncBackground("fencelock-glide-waiter")
        self._closed = False

    @contextmanager
    def watch(
        self, channel: str, what: str, watch: Watch, timeout: float | None = None
    ) -> Iterator[Watch]:
        """Subscribe to ``channel`` (active on the server before this returns) and yield
        ``watch``, which every message on it sets, until the block ends; confirmed within
        ``timeout`` seconds, never longer than one request timeout."""
        limit = self._confirm_timeout if timeout is None else min(timeout, self._confirm_timeout)
        self._subscribe(channel, what, watch, time.monotonic() + limit)
        try:
            yield watch
        finally:
            self._unwatch(channel, watch)

    def _subscribe(self, channel: str, what: str, watch: Watch, end: float) -> None:
        subscribing = f"{what}, subscribing to its wake-ups"
        api = sync_glide()
        with self._mutex:
            with self._guard:
                self._watchers.setdefault(channel, set()).add(watch)
            try:
                if time.monotonic() >= end:
                    raise RedisTimeoutError("no time left to subscribe")
                client = self._connected(end)
                subscribe = client.ssubscribe if self._sharded else client.subscribe
                subscribe({channel}, ms(end - time.monotonic()))
            except BaseException as exc:
                self._forget(channel, watch, failed=True)
                unreachable = (api.TimeoutError, api.ConnectionError, api.ClosingError, RedisError)
                if isinstance(exc, unreachable):
                    raise LockConnectionError(f"{subscribing}: {exc}") from exc
                if isinstance(exc, api.RequestError):  # an error reply (NOPERM, say)
                    raise translate_error(error_reply(str(exc)), subscribing) from exc
                raise
            if not self._listener.running():
                self._listener.start(self._listen)

    def _connected(self, end: float) -> Any:
        """Our client, made now if it is not yet, connecting by ``end``."""
        if self._closed:
            raise ConnectionError("the client is closed")
        if self._client is None:
            started = time.monotonic()
            if started < self._unreachable_until:
                raise ConnectionError("connecting failed a moment ago: not tried again yet")
            config = config_for(self.server, end - started)
            try:
                api = sync_glide()
                made = api.GlideClusterClient if self._sharded else api.GlideClient
                client = made.create(config)
            except sync_glide().GlideError:
                self._unreachable_until = time.monotonic() + self._confirm_timeout
                raise
            if self._closed:  # (meanwhile, by close(), which found no client to close)
                client.close()
                raise ConnectionError("the client is closed")
            self._client = client
        return self._client

    def _unwatch(self, channel: str, watch: Watch) -> None:
        with self._guard:
            watchers = self._watchers.get(channel)
            if watchers is None or watch not in watchers:
                return
        with self._mutex:
            self._forget(channel, watch)

    def _forget(self, channel: str, watch: Watch, failed: bool = False) -> None:
        """(Under the mutex) ``watch`` leaves ``channel``; the last one out unsubscribes it,
        confirmed within one request timeout (a failure: the connection is gone, and the
        subscription with it, or glide re-subscribes none it was told to drop). After a
        subscribing that ``failed`` (the server silent, maybe), unconfirmed: the failure's
        caller is not held up by a second bound."""
        with self._guard:
            watchers = self._watchers.get(channel, set())
            watchers.discard(watch)
            if watchers:
                return
            self._watchers.pop(channel, None)
        client = self._client
        if client is not None and not self._closed:
            with contextlib.suppress(sync_glide().GlideError):
                if failed:
                    lazy = client.sunsubscribe_lazy if self._sharded else client.unsubscribe_lazy
                    lazy({channel})
                else:
                    confirmed = client.sunsubscribe if self._sharded else client.unsubscribe
                    confirmed({channel}, ms(self._confirm_timeout))

    def _listen(self) -> None:
        client = self._client
        while not self._closed:
            try:
                message = client.get_pubsub_message()
            except sync_glide().GlideError:  # (closed: the waiter is closing)
                return
            self._dispatch(message)

    def _dispatch(self, message: Any) -> None:
        channel, data = message.channel, message.message
        raw = data.encode() if isinstance(data, str) else data
        if isinstance(channel, bytes):
            channel = channel.decode()
        if isinstance(data, bytes):
            data = data.decode(errors="replace")
        with self._guard:
            for watch in self._watchers.get(channel, ()):
                if not watch.event.is_set():
                    watch.message = raw  # (a result a store carries: compute.py)
                if isinstance(data, str) and data.startswith("g"):
                    watch.grant = data  # a release granted the lock to the waiter
                watch.event.set()

    def abandon(self) -> None:
        """The client was dropped unclosed (run by the garbage collector: nothing waited for
        here): our client is let go (``async_let_go``), and the listener ends with it."""
        self._closed = True
        if self._client is not None:
            sync_let_go(self._client)

    def close(self) -> None:
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            client.close()
        self._listener.stop(self._confirm_timeout)


class SyncGlideRoute(SyncRoute):
    """One glide client's server, Redlock's over several, or a Cluster (``settings.shape``):
    see the module's docstring."""

    def __init__(self, settings: RouteSettings) -> None:
        super().__init__(settings)
        self.nodes: list[Any] = list(settings.servers)
        # (what it can do follows from the shape, as for redis-py's routes: ``traits``)
        if self.traits.majority:
            self.send = no_one_server
        else:
            self.send = partial(self._send, self.nodes[0])
        # what a request to one node may take, whatever its call's bound: a Redlock node's, its
        # node timeout, as redis-py's sockets of the nodes (connect.py): a hung node costs that
        self.node_limit = (
            socket_limit(settings.node_timeout) if self.traits.majority else self.request_timeout
        )
        self.glide_waiters = [
            SyncGlideWaiter(node, self.node_limit, self.traits.slotted)
            for node in (self.nodes if settings.listens else ())
        ]

    def _send(
        self,
        node: Any,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]:
        end = time.monotonic() + timeout
        api = sync_glide()
        # (a Cluster: the primary of the key's slot, wherever it is now)
        route = api.SlotKeyRoute(api.SlotType.PRIMARY, key) if self.traits.slotted else None
        replies = request(node, commands, timeout, route)
        if noscript is not None and isinstance(replies[0], NoScriptError):
            again = [noscript, *commands[1:]]
            replies = request(node, again, end - time.monotonic(), route)
        return replies

    @property
    def address(self) -> str:
        return "the Redlock nodes" if self.traits.majority else address(self.nodes[0])

    @property
    def addresses(self) -> list[str]:
        return [address(node) for node in self.nodes]

    def _targets(self, timeout: float) -> list[tuple[Any, Any, str]]:
        """Every node as (client, route, address): a Cluster's primaries (``CLUSTER NODES``,
        within ``timeout``), each reached through the cluster client by its address."""
        if not self.traits.slotted:
            return [(node, None, address(node)) for node in self.nodes]
        api = sync_glide()
        cluster = self.nodes[0]
        anyone = api.SlotIdRoute(api.SlotType.PRIMARY, 0)  # (any node knows them all)
        [nodes] = request(cluster, [("CLUSTER", "NODES")], timeout, anyone)
        if isinstance(nodes, RedisError):
            raise translate_error(nodes, "listing the Cluster's primaries")
        targets = []
        for host, port in primaries(nodes):
            targets.append((cluster, api.ByAddressRoute(host, port), f"{host}:{port}"))
        return targets

    def node_timeout(self, ttl: float) -> float:
        if not self.traits.majority:
            return self.request_timeout
        return self.settings.node_timeout or node_timeout(ttl)

    def send_all(
        self, command: Sequence[Any], timeout: float, only: Sequence[int] = ()
    ) -> list[Any]:
        end = time.monotonic() + timeout
        targets = self._targets(timeout)
        # (a Cluster's: what listing its primaries left)
        left = min(end - time.monotonic(), self.node_limit)
        if only:
            targets = [targets[i] for i in only]
        if len(targets) == 1:
            node, route, _ = targets[0]
            return [_one(node, left, route, command)]
        calls = [partial(_one, node, left, route, command) for node, route, _ in targets]
        replies = sync_at_once(calls, _nothing_to_undo)
        failure = next((r for r in replies if isinstance(r, BaseException)
                        and not isinstance(r, RedisError)), None)  # fmt: skip
        if failure is not None:  # (not a server's failure: a bug, an interrupt)
            raise failure
        return replies

    @contextmanager
    def watch(
        self, channel: str, what: str, timeout: float | None = None
    ) -> Iterator[Watch]:
        """Subscribe on the server (Redlock: on every node, a node that is down skipped: the
        others, or the re-try at the next poll, wake the waiter)."""
        self._loop.check()
        watch = Watch()
        with contextlib.ExitStack() as stack:
            for waiter in self.glide_waiters:
                try:
                    stack.enter_context(waiter.watch(channel, what, watch, timeout))
                except LockConnectionError:
                    if not self.traits.majority:
                        raise
            yield watch

    def scan(self, match: str, count: int, timeout: float) -> Iterator[bytes]:
        """A node that fails raises, unless enough answered for the listing to be whole
        (Redlock: a held name is on a majority; one server, a Cluster's primary: each holds
        names no other has)."""
        answered = 0
        failure: LockError | None = None
        try:
            targets = self._targets(timeout)
        except RedisError as exc:
            raise translate_error(exc, "listing the Cluster's primaries") from exc
        for node, route, where in targets:
            try:
                send_one = partial(_one, node, timeout, route)
                for key in scan_keys(send_one, where, match, count):
                    yield key
                answered += 1
            except LockError as exc:
                if not self.traits.majority:
                    raise
                failure = exc
        if failure is not None and len(targets) - answered >= quorum(len(targets)):
            raise failure

    def abandon(self) -> None:
        for waiter in self.glide_waiters:
            waiter.abandon()

    def pools(self) -> list[Any]:
        return []  # (no redis-py pool: glide's clients are closed by close())

    def close(self) -> None:
        for waiter in self.glide_waiters:
            waiter.close()
        super().close()

    def _close_owned(self) -> None:
        for node in self._owned():  # (the renewal twin's own clients)
            node.close()


def primaries(nodes: bytes) -> list[tuple[str, int]]:
    """The (host, port) of each primary serving slots that ``CLUSTER NODES`` lists, failing or
    not: the names in its slots are on no other node."""
    found = []
    for line in nodes.decode().splitlines():
        fields = line.split()
        if len(fields) < 9 or "master" not in fields[2].split(","):
            continue
        host, _, port = fields[1].split("@")[0].rpartition(":")
        found.append((host, int(port)))
    return found


def _one(node: Any, timeout: float, route: Any, command: Sequence[Any]) -> Any:
    """The reply to ``command`` sent by ``node`` (``route``: see ``request``) within
    ``timeout`` seconds, or the ``RedisError`` it failed with."""
    try:
        [reply] = request(node, [command], timeout, route)
    except RedisError as exc:
        return exc
    return reply


def _nothing_to_undo(i: int, reply: object) -> None:
    return None  # (a reply holds nothing to give back)
