"""Redis transport, asyncio and threads side by side: the few primitives of the transport policy
(``_async/transport.py``) that differ between them, fencelock's own clients and pools, and the
reaping of a client dropped unclosed.

Like ``_backend.py``, the ``Async*``/``async_*`` names serve ``_async/`` and the ``Sync*``/
``sync_*`` names its generated twin.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import queue
import select
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.cluster
import redis.connection
import redis.exceptions as redis_exceptions
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._backend import closed_for_good, consume
from ._core.replies import DatabaseRefusal

if TYPE_CHECKING:
    from ._async.transport import AsyncRequester
    from ._sync.transport import SyncRequester

T = TypeVar("T")

AsyncRedis = redis.asyncio.Redis
SyncRedis = redis.Redis
AsyncPubSub = redis.asyncio.client.PubSub
SyncPubSub = redis.client.PubSub
AsyncRedisCluster = redis.asyncio.cluster.RedisCluster
SyncRedisCluster = redis.cluster.RedisCluster
# The clients of the other API, and what to use with them: a common mix-up.
ASYNC_OTHER_API = (redis.Redis, redis.cluster.RedisCluster)
ASYNC_OTHER_HINT = "a sync redis client: use fencelock.LockClient with it"
SYNC_OTHER_API = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
SYNC_OTHER_HINT = "a redis.asyncio client: use fencelock.asyncio.LockClient with it"


# What a request that ran out of time met, in the same words in both APIs (redis-py's differ
# between them, and asyncio said "no time left to connect" when a hung server did not answer a
# new connection's handshake). "In time": within the request timeout, or what was left of the
# call whose deadline it serves.
NO_REPLY = "the server is connected but sent no reply in time"
CONNECTING = "no answer in time while connecting"  # (no connection, or no reply to its handshake)


# -- the primitives of the transport policy (``_async/transport.py``) where asyncio and threads
# differ: a slot of a server's connections, connecting, reading a reply, each by a deadline

AsyncConnection = redis.asyncio.connection.AbstractConnection
SyncConnection = redis.connection.AbstractConnection
AsyncClusterNode = redis.asyncio.cluster.ClusterNode
SyncClusterNode = redis.cluster.ClusterNode
AsyncSlots = asyncio.BoundedSemaphore


class SyncSlots:
    """A server's slots for threads: ``size`` at most taken at once. A token queue, taken and
    given back in C, costs a tenth of a ``threading.BoundedSemaphore`` (a ``Condition``)."""

    def __init__(self, size: int) -> None:
        self._free: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._unmade = size  # tokens not made yet: made as first needed
        self._guard = threading.Lock()

    def acquire(self, timeout: float) -> bool:
        try:
            self._free.get_nowait()
            return True
        except queue.Empty:
            pass
        with self._guard:
            if self._unmade:
                self._unmade -= 1
                return True
        try:
            self._free.get(timeout=timeout)
        except queue.Empty:
            return False
        return True

    def release(self) -> None:
        self._free.put(None)


@dataclass(frozen=True, slots=True)
class Template:
    """How fencelock's own connections to one server are made (``async_template``)."""

    connection_class: type[Any]
    kwargs: dict[str, Any]
    max_connections: int
    connect_timeout: float  # a fan-out's bound on connecting, which its node timeout does not count

    def make(self) -> Any:
        return self.connection_class(**self.kwargs)

    @property
    def encoding(self) -> tuple[str, str]:
        """How a connection of this template writes a str: in its ``encoding``, except where
        redis-py's sync connection packs with hiredis (when installed), which writes UTF-8
        whatever the encoding: fencelock's requests are the bytes redis-py would send."""
        pack = getattr(self.make(), "pack_command", None)  # (a connection may pack nothing)
        if pack is not None and b"".join(pack("ECHO", "\xe9")).endswith(b"\xc3\xa9\r\n"):
            return "utf-8", "strict"
        return self.kwargs.get("encoding", "utf-8"), self.kwargs.get("encoding_errors", "strict")


def async_template(target: redis.asyncio.Redis | AsyncClusterNode, timeout: float) -> Template:
    """The settings of fencelock's connections to ``target``: the server of one of fencelock's
    own clients (``async_own_client``), or a Cluster node (its settings made fencelock's, as
    ``_own_kwargs`` says; ``timeout`` bounds connecting). The asyncio connections have no socket
    timeout: ``async_read`` and ``async_connect`` bound every await by the request's deadline."""
    connection_class: type[AsyncConnection]
    if isinstance(target, AsyncClusterNode):
        kwargs = _own_kwargs(target, timeout, async_no_retry(), async_select_checked)
        connection_class, size = target.connection_class, target.max_connections
    else:
        pool = target.connection_pool
        kwargs = dict(pool.connection_kwargs)
        connection_class, size = pool.connection_class, pool.max_connections
    connect = kwargs.get("socket_connect_timeout") or timeout
    kwargs["socket_timeout"] = None
    return Template(connection_class, kwargs, size, connect)


def sync_template(target: redis.Redis | SyncClusterNode, timeout: float) -> Template:
    # (the socket timeouts are set per request: sync_connect, sync_read)
    pool: redis.ConnectionPool
    if isinstance(target, SyncClusterNode):
        pool = target.redis_connection.connection_pool
        kwargs = _own_kwargs(pool, timeout, sync_no_retry(), sync_select_checked)
    else:
        pool = target.connection_pool
        kwargs = dict(pool.connection_kwargs)
    connect = kwargs.get("socket_connect_timeout") or timeout
    return Template(pool.connection_class, kwargs, pool.max_connections, connect)


def async_node_of(cluster: redis.asyncio.RedisCluster, key: str) -> AsyncClusterNode | None:
    """The node that serves ``key``'s slot as far as ``cluster`` knows (None: it does not know
    yet: it has not been initialized, or the slot is not covered)."""
    try:
        return cluster.get_node_from_key(key)
    except (redis_exceptions.RedisClusterException, RedisError):
        return None


def sync_node_of(cluster: redis.RedisCluster, key: str) -> SyncClusterNode | None:
    try:
        node = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
    except (redis_exceptions.RedisClusterException, RedisError):
        return None
    return node if node is not None and node.redis_connection is not None else None


async def async_take(slots: asyncio.BoundedSemaphore, deadline: float) -> None:
    """One of a server's slots (a connection's worth of requests in flight) by ``deadline``."""
    if slots.locked():
        with _Expiry(deadline, "no connection free in time"):
            await slots.acquire()
    else:
        await slots.acquire()  # (at once)


def sync_take(slots: SyncSlots, deadline: float) -> None:
    if not slots.acquire(timeout=max(deadline - time.monotonic(), 0)):
        raise RedisTimeoutError("no connection free in time")


# (redis-py 8 renamed the check; older versions have only the first name)
_dirty = (
    getattr(redis.asyncio.connection.Connection, "can_read", None)
    or redis.asyncio.connection.Connection.can_read_destructive
)


async def async_connect(conn: AsyncConnection, deadline: float) -> None:
    """``conn`` ready to send by ``deadline``: (re)connected if need be, with one attempt. An
    idle connection with something to read is broken (the server closed it: a restart, a
    failover) and is made anew."""
    if conn.is_connected:
        try:
            if not await _dirty(conn):
                return
        except redis_exceptions.ConnectionError:
            pass
        await conn.disconnect(nowait=True)
    left = deadline - time.monotonic()
    if left <= 0:
        raise RedisTimeoutError("no time left to send the request")
    conn.socket_connect_timeout = left
    try:
        with _Expiry(deadline, CONNECTING):
            await conn.connect()  # type: ignore[no-untyped-call]
    except RedisTimeoutError:  # (redis-py's: "Timeout connecting to server")
        raise RedisTimeoutError(CONNECTING) from None


def sync_connect(conn: SyncConnection, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise RedisTimeoutError("no time left to send the request")
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        if not _readable(conn, sock):
            sock.settimeout(left)  # the send's bound (the reads pass their own)
            return
        conn.disconnect()  # type: ignore[no-untyped-call]
    conn.socket_timeout = conn.socket_connect_timeout = left
    try:
        conn.connect()  # type: ignore[no-untyped-call]
    except RedisTimeoutError:  # ("Timeout connecting to server", "Timeout reading from ...")
        raise RedisTimeoutError(CONNECTING) from None


def _readable(conn: SyncConnection, sock: Any) -> bool:
    """Whether an idle connection has something to read (or its end): a poll of its socket, as
    redis-py's ``can_read`` in a fourth of its time (a read attempt that fails, two timeout
    changes). TLS: a record that is no data makes the socket readable: it reads to tell."""
    if isinstance(sock, ssl.SSLSocket):
        try:
            return conn.can_read(timeout=0)
        except redis_exceptions.ConnectionError:
            return True
    return _has_input(sock)


if hasattr(select, "poll"):
    # kept here: eventlet's monkey-patching, should it come after this import, deletes it
    _poll, _POLLIN = select.poll, select.POLLIN

    def _has_input(sock: Any) -> bool:
        poll = _poll()
        poll.register(sock, _POLLIN)
        return bool(poll.poll(0))

else:  # eventlet's monkey-patching came first: its select has no poll (gevent's has one)

    def _has_input(sock: Any) -> bool:
        return bool(select.select([sock], [], [], 0)[0])


async def async_read(conn: AsyncConnection, deadline: float) -> Any:
    """The next reply on ``conn`` by ``deadline`` (past it, only one that has arrived already);
    an error reply returned, not raised: the next reply follows it. Its caller's cancellation
    leaves ``conn`` as it was: the reply can still be read (the parser keeps what it read)."""
    try:
        with _Expiry(deadline, NO_REPLY):
            return await conn.read_response(disconnect_on_error=False)
    except redis_exceptions.ResponseError as exc:
        return exc


def sync_read(conn: SyncConnection, deadline: float) -> Any:
    left = deadline - time.monotonic()
    try:
        if left > 0:
            return conn.read_response(timeout=left)
        if conn.can_read(timeout=0):
            return conn.read_response()
    except redis_exceptions.ResponseError as exc:
        return exc
    except RedisTimeoutError:  # ("Timeout reading from ...": as asyncio says it)
        raise RedisTimeoutError(NO_REPLY) from None
    raise RedisTimeoutError(NO_REPLY)


async def async_drop(conn: AsyncConnection, error: BaseException | None = None) -> None:
    """Close ``conn``: it may have a late reply pending, or be broken. Not when ``error``, what
    ended its request, closes the call for good (``closed_for_good``): redis-py's
    ``disconnect()`` needs a running loop, and the connection goes with its loop."""
    if error is None or not closed_for_good(error):
        await conn.disconnect(nowait=True)


def sync_drop(conn: SyncConnection, error: BaseException | None = None) -> None:
    # (a thread's call is never closed from outside: it always drops)
    conn.disconnect()  # type: ignore[no-untyped-call]


class _Expiry:
    """Bounds the awaits of the current task inside it by ``deadline``: then they are
    cancelled and ``TimeoutError(what)`` raised, unless the task was cancelled by someone else
    too (that cancellation goes on). No task, no future: one timer.

    What was there when the loop saw the deadline pass wins: the timer cancels one loop step
    later, after the wake-ups of the I/O that step found (the loop runs I/O callbacks before
    timers, and the task they wake after both). A loop that runs late (a busy loop, a loaded
    machine) would otherwise take a reply that had come in time for a timeout, and close its
    connection: with Redlock's node timeouts of a few ms, a client under load would spend its
    time reconnecting.

    Not ``asyncio.timeout()``: on Python 3.11 it compares the task's cancellation requests with
    0, not with their count on entry, so a task that carries stale ones (after a TaskGroup
    failure it caught) gets a cancellation for a timeout."""

    __slots__ = ("_baseline", "_deadline", "_expired", "_task", "_timer", "_what")

    _timer: asyncio.Handle  # the deadline's timer, then the cancellation one step later

    def __init__(self, deadline: float, what: str) -> None:
        self._deadline = deadline
        self._what = what
        self._expired = False

    def __enter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task, self._baseline = task, task.cancelling()
        left = self._deadline - time.monotonic()
        # (the task's loop: get_running_loop() would cost a getpid() system call)
        self._timer = task.get_loop().call_later(left, self._expire)

    def _expire(self) -> None:
        self._timer = self._task.get_loop().call_soon(self._cancel)

    def _cancel(self) -> None:
        self._expired = True
        self._task.cancel()

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self._timer.cancel()
        # Its cancellation withdrawn, however the block ended (redis-py may have swallowed it).
        mine = self._expired and self._task.uncancel() <= self._baseline
        if mine and kind is not None and issubclass(kind, asyncio.CancelledError):
            raise RedisTimeoutError(self._what) from None


async def async_within(timeout: float, call: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await call(*args)`` within ``timeout`` seconds (in a task: see ``_bounded``)."""
    return await _bounded(call(*args), timeout)


def sync_within(timeout: float, call: Callable[..., T], *args: Any) -> T:
    # (a blocking call cannot be cut off: it is bounded by its client's own socket timeouts)
    if timeout <= 0:
        raise RedisTimeoutError("no time left to send the request")
    return call(*args)


async def async_cluster_ready(cluster: redis.asyncio.RedisCluster, timeout: float) -> None:
    """Within ``timeout``, ``cluster`` knows its nodes (it learns them at its first command).
    Raises a ``RedisError``: redis-py's "cannot be connected" is no ``RedisError`` of its own."""
    try:
        await async_within(timeout, cluster.initialize)
    except redis_exceptions.RedisClusterException as exc:
        raise redis_exceptions.ConnectionError(str(exc)) from exc


def sync_cluster_ready(cluster: redis.RedisCluster, timeout: float) -> None:
    """(redis-py's sync Cluster client learns its nodes when it is made)"""


# What redis-py's cluster client raises, instead of a ConnectionError, when another task or
# thread closes its connections under a command in flight (it does so on a failover's
# CLUSTERDOWN or a node's failure): "'NoneType' object has no attribute 'writelines'" (seen in
# python -m bench.reshard, a master killed). A broken connection, for fencelock's callers.
_CLOSED_UNDER = (AttributeError, RuntimeError)


async def async_one(
    redis: redis.asyncio.Redis | redis.asyncio.RedisCluster, command: Sequence[Any]
) -> list[Any]:
    """``[reply]`` to ``command`` sent by ``redis`` itself (an error reply as ``[error]``, as a
    pipeline returns it)."""
    try:
        return [await redis.execute_command(*command)]
    except redis_exceptions.ResponseError as exc:
        return [exc]
    except _CLOSED_UNDER as exc:
        raise redis_exceptions.ConnectionError(f"{type(exc).__name__}: {exc}") from exc


def sync_one(redis: redis.Redis | redis.RedisCluster, command: Sequence[Any]) -> list[Any]:
    try:
        return [redis.execute_command(*command)]  # type: ignore[no-untyped-call]
    except redis_exceptions.ResponseError as exc:
        return [exc]
    except _CLOSED_UNDER as exc:
        raise redis_exceptions.ConnectionError(f"{type(exc).__name__}: {exc}") from exc


# A request whose caller was cancelled while it was in flight: it goes on within its bound (it
# may be granting something), and whoever gives back for the caller goes after it.
_inflight: contextvars.ContextVar[asyncio.Future[Any] | None] = contextvars.ContextVar(
    "fencelock_inflight", default=None
)


def async_carry_on(rest: Awaitable[None]) -> None:
    """Finish the request in flight of a cancelled caller (``rest``, bounded by the request's
    deadline) in a task, which ``async_inflight`` hands to the caller's clean-up."""
    task = asyncio.ensure_future(rest)
    task.add_done_callback(consume)
    _inflight.set(task)


def sync_carry_on(rest: None) -> None:
    return None  # (a thread's call is never left half-way: sync_cancelled)


async def _bounded(aw: Awaitable[T], timeout: float) -> T:
    """The result of ``aw``, or ``TimeoutError`` after ``timeout`` seconds (``aw`` cancelled).
    A caller cancelled meanwhile gets the cancellation at once, while ``aw`` goes on, still
    within ``timeout`` (``async_inflight`` hands it to the caller's clean-up)."""
    if timeout <= 0:
        if asyncio.iscoroutine(aw):
            aw.close()  # never started: nothing was sent
        raise RedisTimeoutError("no time left to send the request")
    task = asyncio.ensure_future(aw)
    task.add_done_callback(consume)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    except asyncio.CancelledError:
        if not task.done():
            bound = asyncio.get_running_loop().call_later(timeout, task.cancel)
            task.add_done_callback(lambda _: bound.cancel())
            _inflight.set(task)
        raise
    if not done:
        task.cancel()  # redis.asyncio closes a connection whose read was cancelled
        raise RedisTimeoutError(f"no reply within {timeout * 1000:.0f} ms")
    return task.result()


def async_inflight() -> asyncio.Future[Any] | None:
    """The request left in flight by this task's cancelled call (and forget it), if any."""
    task: asyncio.Future[Any] | None = _inflight.get()
    _inflight.set(None)
    return task


def sync_inflight() -> None:
    return None  # (a thread's call is never left half-way)


def async_no_retry() -> redis.asyncio.retry.Retry:
    """No reconnect-and-retry inside redis-py (whose default is 10 tries with backoff): a
    Redlock node that fails counts as failed in that round, within its node timeout."""
    return redis.asyncio.retry.Retry(NoBackoff(), 0)


def sync_no_retry() -> redis.retry.Retry:
    return redis.retry.Retry(NoBackoff(), 0)


def _handshake_failed(conn: Any, exc: redis_exceptions.ResponseError) -> NoReturn:
    """Raise ``exc``, an error reply during the handshake of ``conn``, or, if it is the server's
    refusal of its ``SELECT`` ("DB index is out of range": Redis and Valkey alike), a
    ``DatabaseRefusal`` that names the index."""
    if conn.db and "DB index" in str(exc):
        raise DatabaseRefusal(conn.db, str(exc)) from exc
    raise exc


def async_select_checked(
    then: Callable[[Any], Awaitable[None] | None] | None,
) -> Callable[[Any], Awaitable[None]]:
    """A ``redis_connect_func`` running the handshake (``then``, the pool's own, else redis-py's)
    that reports a refused ``SELECT`` with its index: redis-py reports only the server's words."""

    async def connect(conn: Any) -> None:
        try:
            done = conn.on_connect() if then is None else then(conn)
            if inspect.isawaitable(done):
                await done
        except redis_exceptions.ResponseError as exc:
            _handshake_failed(conn, exc)

    return connect


def sync_select_checked(then: Callable[[Any], None] | None) -> Callable[[Any], None]:
    def connect(conn: Any) -> None:
        try:
            conn.on_connect() if then is None else then(conn)
        except redis_exceptions.ResponseError as exc:
            _handshake_failed(conn, exc)

    return connect


def _own_kwargs(
    pool: Any, socket_timeout: float, retry: Any, checked: Callable[[Any], Any]
) -> dict[str, Any]:
    """The connection settings of fencelock's own connections to the server of ``pool``: the
    same address, credentials and TLS, with

    * every socket operation bounded by fencelock's ``socket_timeout`` (the application's
      client may have none, or one meant for its own slow commands);
    * no retries inside redis-py (``retry``: none), whose default is 10 tries with backoff:
      fencelock re-sends a request itself, within the deadline of the call;
    * replies not decoded, whatever the application chose: redis-py 8.0/8.1 mis-parse the pub/sub
      reply to ``PING <nonce>`` when decoding, and fencelock reads bytes anyway;
    * a database index the server refuses named in the error (``checked``, ``*_select_checked``).
    """
    kwargs = dict(pool.connection_kwargs)
    kwargs["socket_timeout"] = kwargs["socket_connect_timeout"] = socket_timeout
    kwargs["retry"] = retry
    kwargs["redis_connect_func"] = checked(kwargs.get("redis_connect_func"))
    kwargs["decode_responses"] = False
    for option in ("service_name", "sentinel_manager"):  # a Sentinel pool finds its master so
        if hasattr(pool, option):
            kwargs[option] = getattr(pool, option)
    return kwargs


def async_own_client(client: redis.asyncio.Redis, socket_timeout: float) -> redis.asyncio.Redis:
    """fencelock's own client to the server of ``client`` (its pool untouched: the application
    may rely on blocking commands or on decoding). A plain pool becomes a pool that waits for a
    free connection rather than failing with "Too many connections": each request bounds the
    wait by its deadline (``AsyncRequester``)."""
    pool = client.connection_pool
    kwargs = _own_kwargs(pool, socket_timeout, async_no_retry(), async_select_checked)
    size = pool.max_connections
    if type(pool) in (redis.asyncio.ConnectionPool, redis.asyncio.BlockingConnectionPool):
        own: redis.asyncio.ConnectionPool = redis.asyncio.BlockingConnectionPool(
            max_connections=size, timeout=None, connection_class=pool.connection_class, **kwargs
        )
    else:
        own = type(pool)(connection_class=pool.connection_class, max_connections=size, **kwargs)
    return redis.asyncio.Redis(connection_pool=own)


def sync_own_client(client: redis.Redis, socket_timeout: float) -> redis.Redis:
    # Lock requests go through SyncRequester, which makes its own connections from this pool's
    # settings and waits for a free one within the deadline; a blocking pool serves the rest
    # (pub/sub, Redlock fan-outs) the same way.
    pool = client.connection_pool
    kwargs = _own_kwargs(pool, socket_timeout, sync_no_retry(), sync_select_checked)
    size = pool.max_connections
    if type(pool) in (redis.ConnectionPool, redis.BlockingConnectionPool):
        own: redis.ConnectionPool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
            max_connections=size, timeout=None, connection_class=pool.connection_class, **kwargs
        )
    else:
        own = type(pool)(connection_class=pool.connection_class, max_connections=size, **kwargs)
    return redis.Redis(connection_pool=own)


def async_node_client(node: Any, socket_timeout: float) -> redis.asyncio.Redis:
    """fencelock's own client (a pool of its own, as ``async_own_client``) to one node of an
    asyncio ``RedisCluster``: a pub/sub connection must stay on the node of its channel."""
    kwargs = _own_kwargs(node, socket_timeout, async_no_retry(), async_select_checked)
    pool = redis.asyncio.ConnectionPool(connection_class=node.connection_class, **kwargs)
    return redis.asyncio.Redis(connection_pool=pool)


def sync_node_client(node: Any, socket_timeout: float) -> redis.Redis:
    template = node.redis_connection.connection_pool
    kwargs = _own_kwargs(template, socket_timeout, sync_no_retry(), sync_select_checked)
    pool = redis.ConnectionPool(connection_class=template.connection_class, **kwargs)
    return redis.Redis(connection_pool=pool)


# What a sync connection needs of an asyncio one's settings: its address, database, credentials
# and TLS (not its retries, handlers or registries, which are the asyncio client's own objects).
_SYNC_CONNECTIONS: dict[type[Any], type[Any]] = {
    redis.asyncio.connection.Connection: redis.connection.Connection,
    redis.asyncio.connection.SSLConnection: redis.connection.SSLConnection,
    redis.asyncio.connection.UnixDomainSocketConnection: (
        redis.connection.UnixDomainSocketConnection
    ),
}
_ADDRESS = ("host", "port", "path", "db", "username", "password", "credential_provider",
            "client_name", "protocol")  # fmt: skip


def _sync_kwargs(kwargs: dict[str, Any], socket_timeout: float) -> dict[str, Any]:
    picked = {k: v for k, v in kwargs.items() if k in _ADDRESS or k.startswith("ssl_")}
    picked.update(
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        retry=sync_no_retry(),
        decode_responses=False,
    )
    return picked


def sync_client_like(client: redis.asyncio.Redis, socket_timeout: float) -> redis.Redis:
    """A sync client, with a pool of its own, to the server of an asyncio client (a Sentinel
    master's: through sync sentinels at the same addresses): the asyncio client's renewals run
    in a thread on it (``_offloop.py``)."""
    pool = client.connection_pool
    kwargs = _sync_kwargs(pool.connection_kwargs, socket_timeout)
    own: redis.ConnectionPool
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None:
        sentinels = [
            (
                s.connection_pool.connection_kwargs["host"],
                s.connection_pool.connection_kwargs["port"],
            )
            for s in manager.sentinels
        ]
        sync_manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            sentinels,
            sentinel_kwargs=_sync_kwargs(manager.sentinel_kwargs, socket_timeout),
            **_sync_kwargs(manager.connection_kwargs, socket_timeout),
        )
        service = getattr(pool, "service_name")  # noqa: B009 (a Sentinel pool's)
        own = redis.sentinel.SentinelConnectionPool(  # type: ignore[no-untyped-call]
            service, sync_manager, **kwargs
        )
    else:
        connection_class = _SYNC_CONNECTIONS.get(pool.connection_class)
        if connection_class is None:
            raise TypeError(
                f"cannot renew leases off the event loop over a {pool.connection_class.__name__}"
            )
        own = redis.ConnectionPool(connection_class=connection_class, **kwargs)
    return redis.Redis(connection_pool=own)


def sync_cluster_like(
    cluster: redis.asyncio.RedisCluster, socket_timeout: float
) -> Callable[[], redis.RedisCluster]:
    """How to make a sync ``RedisCluster`` to the nodes of an asyncio one (see
    ``sync_client_like``): its settings read now, the client made by the call, which discovers
    the slots (I/O: a round trip to a node, a timeout more for each that does not answer)."""
    kwargs = _sync_kwargs(cluster.get_connection_kwargs(), socket_timeout)
    if cluster.get_connection_kwargs().get("connection_class") is (
        redis.asyncio.connection.SSLConnection
    ):
        kwargs["ssl"] = True
    for address in ("host", "port", "db"):  # (the nodes are given; a Cluster has db 0)
        kwargs.pop(address, None)
    nodes = [
        redis.cluster.ClusterNode(n.host, n.port)  # type: ignore[no-untyped-call]
        for n in cluster.get_nodes()
    ]
    return partial(redis.RedisCluster, startup_nodes=nodes, **kwargs)


_reaping: set[asyncio.Task[None]] = set()  # a task the loop holds only weakly could vanish


def async_reap(
    close: Callable[[], Awaitable[None]], requester: AsyncRequester | None, pools: Sequence[Any]
) -> None:
    """From the finalizer of a client dropped unclosed (the garbage collector, maybe amid the
    loop's own code): run its ``close()`` in full, as a task of the loop running in this thread,
    started by the loop, not here."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # collected outside the loop: the workers end by themselves
    loop.call_soon(_reap_task, close)


def _reap_task(close: Callable[[], Awaitable[None]]) -> None:
    task = asyncio.ensure_future(close())
    _reaping.add(task)
    task.add_done_callback(_reaping.discard)
    task.add_done_callback(consume)


def sync_reap(
    close: Callable[[], None],
    requester: SyncRequester | None,
    pools: Sequence[redis.ConnectionPool],
) -> None:
    """The same with threads: close() would wait for the workers, which a finalizer must not (it
    may run in any thread). What it can do at once is close the idle connections (a pool's lock
    is re-entrant; the requester's is only taken by calls of the live client); the workers close
    theirs as they end. Not left to the pools' own collection: redis-py's are in reference
    cycles, which only a full collection, maybe much later, frees."""
    if requester is not None:
        requester.close()
    for pool in pools:
        pool.disconnect(inuse_connections=False)
