"""Redis transport, asyncio and threads side by side: requests bounded by a deadline, Redlock
fan-out, fencelock's own clients and pools, and the reaping of a client dropped unclosed.

Like ``_backend.py``, the ``Async*``/``async_*`` names serve ``_async/`` and the ``Sync*``/
``sync_*`` names its generated twin.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.cluster as redis_asyncio_cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.cluster
import redis.connection
import redis.exceptions as redis_exceptions
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._backend import consume
from ._core.replies import DatabaseRefusal

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


async def async_fan_out(
    nodes: Sequence[redis.asyncio.Redis], command: Sequence[Any], timeout: float
) -> list[Any]:
    """Send ``command`` to every node at once; per node, its reply or the ``RedisError`` it
    raised (a node silent for ``timeout`` seconds gets a ``TimeoutError``).

    Connecting is not part of ``timeout`` (as in ``sync_fan_out``): a node's connection is made
    first, bounded by its own socket timeouts, and ``timeout`` counts from the request's send. A
    fresh client's first handshake must not eat a node timeout of a few milliseconds."""
    tasks = [asyncio.ensure_future(_node_request(node, command, timeout)) for node in nodes]
    try:
        await asyncio.wait(tasks)  # each is bounded: connecting, then timeout
    except asyncio.CancelledError:
        # Let requests already sent finish first (bounded as above): a release sent right after
        # on another connection could otherwise overtake them.
        await asyncio.wait(tasks)
        raise
    finally:
        for task in tasks:
            task.add_done_callback(consume)
    return [_outcome(task, timeout) for task in tasks]


async def _node_request(node: redis.asyncio.Redis, command: Sequence[Any], timeout: float) -> Any:
    pool = node.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]  # connected, bounded
    try:
        await conn.send_command(*command)
        try:
            # (not read_response(timeout=): that returns None on a timeout, like a nil reply)
            return await async_bounded(conn.read_response(), timeout)
        except redis_exceptions.ResponseError as exc:  # an error reply: this node's answer
            return exc
    finally:
        await pool.release(conn)


def _outcome(task: asyncio.Future[Any], timeout: float) -> Any:
    if not task.done() or task.cancelled():
        return RedisTimeoutError(f"no reply within {timeout * 1000:.0f} ms")
    error = task.exception()
    if error is None:
        return task.result()
    if isinstance(error, RedisError):
        return error
    raise error


def sync_fan_out(nodes: Sequence[redis.Redis], command: Sequence[Any], timeout: float) -> list[Any]:
    """The same without threads: write the request to one connection of every node, then read
    the replies in turn; the nodes work in parallel meanwhile.

    Each read is bounded by the socket timeout, or by what is left of ``timeout`` when that is
    shorter (which costs two system calls a read to change the socket's timeout). Once one read
    has timed out, the others only take what has already arrived: however many nodes hang, the
    whole costs at most twice the timeout.
    """
    replies: list[Any] = [None] * len(nodes)
    sent: list[tuple[int, Any]] = []
    for i, node in enumerate(nodes):
        pool = node.connection_pool
        try:
            conn = pool.get_connection()
        except RedisError as exc:
            replies[i] = exc
            continue
        try:
            conn.send_command(*command)  # type: ignore[no-untyped-call]
            sent.append((i, conn))
        except RedisError as exc:  # send_command has disconnected it
            pool.release(conn)
            replies[i] = exc
    # Counted from after the writes: a node whose connection had to be re-made (and hung in its
    # handshake, bounded by the socket timeout) does not eat the others' time.
    deadline = time.monotonic() + timeout
    expired = False
    for i, conn in sent:
        try:
            left = deadline - time.monotonic()
            if expired or left <= 0:
                expired = True
                if not conn.can_read(timeout=0):  # nothing arrived: give up on this node
                    conn.disconnect()  # its reply may still come: to nobody
                    raise RedisTimeoutError(f"no reply within {timeout * 1000:.0f} ms")
                replies[i] = conn.read_response()
            elif timeout >= (conn.socket_timeout or math.inf):
                replies[i] = conn.read_response()
            else:
                replies[i] = conn.read_response(timeout=left)
        except RedisTimeoutError as exc:
            expired = True
            replies[i] = exc
        except RedisError as exc:
            replies[i] = exc
        finally:
            nodes[i].connection_pool.release(conn)
    return replies


class AsyncRequester:
    """Requests bounded by a deadline of their own, whatever the socket timeout: waiting for a
    free connection, connecting and the reply all count (a renewal must not outlive the lease it
    renews; a lock call must meet its documented bound)."""

    def __init__(self) -> None:
        # Pools that fail with "Too many connections" rather than wait (a Sentinel pool has no
        # waiting variant): per pool, as many requests in flight as it has connections (the
        # pub/sub connection has a pool of its own); more wait for a slot, within their deadline.
        self._slots: dict[int, asyncio.Semaphore] = {}

    def _gate(
        self, client: redis.asyncio.Redis | redis.asyncio.RedisCluster
    ) -> asyncio.Semaphore | None:
        pool = getattr(client, "connection_pool", None)  # (a RedisCluster has one per node)
        if pool is None or isinstance(pool, redis.asyncio.BlockingConnectionPool):
            return None
        slots = self._slots.get(id(pool))
        if slots is None:
            slots = self._slots[id(pool)] = asyncio.Semaphore(pool.max_connections)
        return slots

    async def request(
        self,
        redis: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]:
        """Send ``commands`` on one connection (a pipeline; on a Cluster, to the node of
        ``key``) and return their replies, error replies included; ``TimeoutError`` after
        ``timeout`` seconds, connecting included (at once, sending nothing, if none is left).
        ``noscript``: sent instead of the first command (an EVALSHA) if the server answers
        NOSCRIPT (SCRIPT FLUSH, a restart: nothing ran, and EVAL caches the script)."""
        deadline = time.monotonic() + timeout
        replies = await self._routed(redis, commands, deadline, key)
        if noscript is not None and isinstance(replies[0], NoScriptError):
            replies = await self._routed(redis, [noscript, *commands[1:]], deadline, key)
        return replies

    async def _routed(
        self,
        redis: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        commands: Sequence[Sequence[Any]],
        deadline: float,
        key: str,
    ) -> list[Any]:
        cluster = isinstance(redis, redis_asyncio_cluster.RedisCluster)
        try:
            replies = await self._send(redis, commands, deadline - time.monotonic())
            moved = cluster and isinstance(replies[0], redis_exceptions.AskError)
        except redis_exceptions.ConnectionError:
            if not cluster:
                raise
            moved = True  # or failed over
        if moved:  # the cluster client re-learns which node serves the slot, in the time left
            assert len(commands) == 1  # (no WAIT on a Cluster)
            replies = await async_bounded(
                async_one(redis, commands[0]), deadline - time.monotonic()
            )
        return replies

    async def _send(
        self,
        redis: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        commands: Sequence[Sequence[Any]],
        timeout: float,
    ) -> list[Any]:
        if timeout <= 0:  # (before any coroutine is made: none is left unawaited)
            raise RedisTimeoutError("no time left to send the request")
        if len(commands) == 1:  # the common case: no pipeline to build
            send: Awaitable[list[Any]] = async_one(redis, commands[0])
        else:
            pipe = redis.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            send = pipe.execute(raise_on_error=False)
        gate = self._gate(redis)
        return await async_bounded(send if gate is None else _gated(gate, send), timeout)

    async def close(self) -> None:
        return None


async def _gated(gate: asyncio.Semaphore, send: Awaitable[T]) -> T:
    try:
        await gate.acquire()
    except BaseException:
        if asyncio.iscoroutine(send):
            send.close()  # never started: nothing was sent
        raise
    try:
        return await send
    finally:
        gate.release()


async def async_one(
    redis: redis.asyncio.Redis | redis.asyncio.RedisCluster, command: Sequence[Any]
) -> list[Any]:
    """``[reply]`` to ``command`` sent by ``redis`` itself (an error reply as ``[error]``, as a
    pipeline returns it)."""
    try:
        return [await redis.execute_command(*command)]
    except redis_exceptions.ResponseError as exc:
        return [exc]


def sync_one(redis: redis.Redis | redis.RedisCluster, command: Sequence[Any]) -> list[Any]:
    try:
        return [redis.execute_command(*command)]  # type: ignore[no-untyped-call]
    except redis_exceptions.ResponseError as exc:
        return [exc]


# A request whose caller was cancelled while it was in flight: it goes on within its bound (it
# may be granting something), and whoever gives back for the caller goes after it.
_inflight: contextvars.ContextVar[asyncio.Future[Any] | None] = contextvars.ContextVar(
    "fencelock_inflight", default=None
)


async def async_bounded(aw: Awaitable[T], timeout: float) -> T:
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


class SyncRequester:
    """The same with threads, on connections of its own (per server, kept between requests):
    a pooled connection would be (re)connected by the pool with the full socket timeout and
    redis-py's retries, and a server that hangs in the handshake would hold the request. At most
    the pool's ``max_connections`` requests per server are in flight; more wait for one to end,
    within their deadline."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._idle: dict[int, list[redis.connection.AbstractConnection]] = {}
        self._slots: dict[int, threading.BoundedSemaphore] = {}
        self._pid = os.getpid()

    def _slot(self, pool: redis.ConnectionPool) -> threading.BoundedSemaphore:
        with self._guard:
            if self._pid != os.getpid():  # forked: the sockets are the parent's
                self._pid, self._idle, self._slots = os.getpid(), {}, {}
            slots = self._slots.get(id(pool))
            if slots is None:
                slots = self._slots[id(pool)] = threading.BoundedSemaphore(pool.max_connections)
            return slots

    def _connected(
        self, pool: redis.ConnectionPool, deadline: float
    ) -> redis.connection.AbstractConnection:
        """An idle connection of ours to the server of ``pool``, (re)connected if need be within
        ``deadline``, with one connect attempt."""
        with self._guard:
            idle = self._idle.get(id(pool))
            conn: redis.connection.AbstractConnection | None = idle.pop() if idle else None
        if conn is None:
            conn = pool.connection_class(**pool.connection_kwargs)
            conn.retry = sync_no_retry()
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RedisTimeoutError("no time left to send the request")
            # used when connecting only: the reads pass their own timeouts
            conn.socket_timeout = conn.socket_connect_timeout = left
            try:
                # (connects if need be) an idle connection with something to read is broken:
                # the server closed it (a restart, a failover) or a late reply is pending
                if conn.can_read(timeout=0):
                    conn.disconnect()
            except redis_exceptions.ConnectionError:
                conn.disconnect()
            conn.connect()
        except BaseException:
            conn.disconnect()
            raise
        return conn

    def request(
        self,
        redis: redis.Redis | redis.RedisCluster,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
        noscript: Sequence[Any] | None = None,
    ) -> list[Any]:
        if timeout <= 0:  # a socket timeout of 0 or less would not bound anything
            raise RedisTimeoutError("no time left to send the request")
        deadline = time.monotonic() + timeout
        client = redis
        if isinstance(redis, SyncRedisCluster):
            node = redis.get_node_from_key(key)  # type: ignore[no-untyped-call]
            if node is None or node.redis_connection is None:
                raise redis_exceptions.ConnectionError(f"no Cluster node serves {key!r}")
            client = node.redis_connection
        assert isinstance(client, SyncRedis)
        pool = client.connection_pool
        slots = self._slot(pool)
        if not slots.acquire(timeout=timeout):  # every connection is busy, for all that time
            raise RedisTimeoutError(f"no connection free within {timeout * 1000:.0f} ms")
        moved = False
        try:
            conn = self._connected(pool, deadline)
            try:
                # Sent here, not in a helper: the hot path of every lock call stays short.
                conn.send_packed_command(conn.pack_commands(commands))  # type: ignore[no-untyped-call]
                replies = [_read(conn, deadline) for _ in commands]
                if noscript is not None and isinstance(replies[0], NoScriptError):
                    commands = [noscript, *commands[1:]]
                    conn.send_packed_command(conn.pack_commands(commands))  # type: ignore[no-untyped-call]
                    replies = [_read(conn, deadline) for _ in commands]
            except BaseException as exc:
                conn.disconnect()  # type: ignore[no-untyped-call]  # else late replies come next
                if client is redis or not isinstance(exc, redis_exceptions.ConnectionError):
                    raise
                moved = True  # the node failed over
            else:
                with self._guard:
                    self._idle.setdefault(id(pool), []).append(conn)
                moved = client is not redis and isinstance(replies[0], redis_exceptions.AskError)
        finally:
            slots.release()
        if moved:  # the cluster client re-learns which node serves the slot, in its own time
            assert len(commands) == 1  # (no WAIT on a Cluster)
            replies = sync_one(redis, commands[0])
            if noscript is not None and isinstance(replies[0], NoScriptError):
                replies = sync_one(redis, noscript)
        return replies

    def close(self) -> None:
        with self._guard:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.disconnect()  # type: ignore[no-untyped-call]


def _read(conn: redis.connection.AbstractConnection, deadline: float) -> Any:
    """The next reply on ``conn`` by ``deadline`` (an error reply returned, not raised: the next
    reply follows it)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise RedisTimeoutError("no reply in time")
    try:
        return conn.read_response(timeout=left)
    except redis_exceptions.ResponseError as exc:
        return exc


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
) -> redis.RedisCluster:
    """A sync ``RedisCluster`` to the nodes of an asyncio one (see ``sync_client_like``)."""
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
    return redis.RedisCluster(startup_nodes=nodes, **kwargs)


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
