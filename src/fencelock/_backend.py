"""The few primitives where asyncio and threads differ, side by side.

The asyncio implementation in ``_async/`` uses the ``Async*``/``async_*`` names; the sync twin
in ``_sync/`` is generated from it by ``tools/gen_sync.py``, which renames them to
``Sync*``/``sync_*``.
Everything else is shared source, so a fix cannot land in one API only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.connection
import redis.exceptions as redis_exceptions
import redis.retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import LockError

T = TypeVar("T")

AsyncRedis = redis.asyncio.Redis
SyncRedis = redis.Redis
AsyncPubSub = redis.asyncio.client.PubSub
SyncPubSub = redis.client.PubSub
AsyncRedisCluster = redis.asyncio.cluster.RedisCluster
SyncRedisCluster = redis.cluster.RedisCluster


async def async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sync_sleep(seconds: float) -> None:
    time.sleep(seconds)


def _consume(task: asyncio.Future[Any]) -> None:
    # A shielded task whose caller was cancelled has nobody to read its outcome.
    if not task.cancelled():
        task.exception()


async def async_shield(aw: Awaitable[T]) -> T:
    """Run ``aw`` to completion even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(_consume)
    return await asyncio.shield(task)


def sync_shield(value: T) -> T:
    return value  # a sync call cannot be cancelled half-way by anyone but a signal


# How many cancellation requests the current task had when the library call began. A task can
# carry requests that were never withdrawn: after a TaskGroup failure it caught, Python 3.11 and
# 3.12 leave ``cancelling()`` at 1. Those are not meant for the lock call.
_cancelling_at_start: contextvars.ContextVar[int] = contextvars.ContextVar(
    "fencelock_cancelling_at_start", default=0
)


@contextlib.contextmanager
def async_call_scope() -> Iterator[None]:
    """Mark the start of a public lock call, for ``async_checkpoint``."""
    task = asyncio.current_task()
    token = _cancelling_at_start.set(0 if task is None else task.cancelling())
    try:
        yield
    finally:
        _cancelling_at_start.reset(token)


sync_call_scope = contextlib.nullcontext


async def async_checkpoint() -> None:
    """Raise the cancellation of the current task if one was requested during this library call
    but never delivered.

    redis.asyncio (seen with 8.1) can return a reply although the awaiting task was cancelled
    during the request, swallowing the CancelledError. An acquire that carried on would then wait
    for, or take, a lock nobody wants any more; so the acquire path checks after each request.
    Only requests made since the call began count (``async_call_scope``).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > _cancelling_at_start.get():
        raise asyncio.CancelledError


def sync_checkpoint() -> None:
    return None


# Whether a lost lock can cancel the code running under it (on_lost_policy="cancel"):
# an asyncio task can be cancelled, a thread cannot.
ASYNC_CAN_CANCEL = True
SYNC_CAN_CANCEL = False


# Whether ``lock.token`` may do I/O: a sync property can block, an asyncio one cannot await. So
# the Redlock fencing write-back runs lazily at the first token read in the sync API, and as part
# of acquire under asyncio.
ASYNC_LAZY_TOKEN = False
SYNC_LAZY_TOKEN = True


def async_blocking(call: Callable[..., Awaitable[T]], *args: Any) -> T:
    raise AssertionError("asyncio does this work in acquire (ASYNC_LAZY_TOKEN is False)")


def sync_blocking(call: Callable[..., T], *args: Any) -> T:
    return call(*args)


# Whether an ``async def`` callback (on_lost) can be run: under asyncio as a task of its own; a
# thread has no loop to run it on, so the sync API refuses one when the lock is made.
ASYNC_AWAITS_CALLBACKS = True
SYNC_AWAITS_CALLBACKS = False

_callbacks: set[asyncio.Task[None]] = set()  # running async callbacks: a task must be referenced


def async_spawn(aw: Awaitable[object], what: str) -> None:
    """Run the awaitable an ``async def`` callback returned, as a task; its error is logged."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # the loss was found outside the loop (check() from another thread)
        sync_spawn(aw, what)
        return

    async def run() -> None:
        try:
            await aw
        except Exception:
            logging.getLogger("fencelock").exception("fencelock: %s raised", what)

    task = loop.create_task(run())
    _callbacks.add(task)
    task.add_done_callback(_callbacks.discard)


def sync_spawn(aw: Awaitable[object], what: str) -> None:
    if isinstance(aw, Coroutine):
        aw.close()  # never awaited: no "coroutine was never awaited" warning later
    logging.getLogger("fencelock").error("fencelock: %s not awaited: no event loop here", what)


def async_current_task() -> asyncio.Task[Any] | None:
    return asyncio.current_task()


def sync_current_task() -> Any:
    return None


def async_uncancel(task: asyncio.Task[Any] | None) -> None:
    """Withdraw a cancellation the library itself requested (and has now turned into LockLost),
    so the task's later awaits and timeouts behave as if it never happened."""
    if task is not None and task.cancelling():
        task.uncancel()


def sync_uncancel(task: None) -> None:
    return None


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
            task.add_done_callback(_consume)
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
    ) -> list[Any]:
        """Send ``commands`` on one connection (a pipeline; on a Cluster, to the node of
        ``key``) and return their replies, error replies included; ``TimeoutError`` after
        ``timeout`` seconds, connecting included (at once, sending nothing, if none is left)."""
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


async def async_bounded(aw: Awaitable[T], timeout: float) -> T:
    """The result of ``aw``, or ``TimeoutError`` after ``timeout`` seconds (``aw`` cancelled)."""
    if timeout <= 0:
        if asyncio.iscoroutine(aw):
            aw.close()  # never started: nothing was sent
        raise RedisTimeoutError("no time left to send the request")
    task = asyncio.ensure_future(aw)
    task.add_done_callback(_consume)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    finally:
        if not task.done():
            task.cancel()  # redis.asyncio closes a connection whose read was cancelled
    if not done:
        raise RedisTimeoutError(f"no reply within {timeout * 1000:.0f} ms")
    return task.result()


def sync_bounded(value: T, timeout: float) -> T:
    # A blocking call cannot be bounded from outside: the caller's socket timeouts bound it.
    return value


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

    def _take(self, pool: redis.ConnectionPool) -> redis.connection.AbstractConnection:
        with self._guard:
            idle = self._idle.get(id(pool))
            if idle:
                return idle.pop()
        conn: redis.connection.AbstractConnection = pool.connection_class(**pool.connection_kwargs)
        conn.retry = sync_no_retry()  # one connect attempt, within the deadline
        return conn

    def _slot(self, pool: redis.ConnectionPool) -> threading.BoundedSemaphore:
        with self._guard:
            if self._pid != os.getpid():  # forked: the sockets are the parent's
                self._pid, self._idle, self._slots = os.getpid(), {}, {}
            slots = self._slots.get(id(pool))
            if slots is None:
                slots = self._slots[id(pool)] = threading.BoundedSemaphore(pool.max_connections)
            return slots

    def request(
        self,
        redis: redis.Redis | redis.RedisCluster,
        commands: Sequence[Sequence[Any]],
        timeout: float,
        key: str,
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
        try:
            return self._send(pool, commands, deadline)
        finally:
            slots.release()

    def _send(
        self, pool: redis.ConnectionPool, commands: Sequence[Sequence[Any]], deadline: float
    ) -> list[Any]:
        conn = self._take(pool)
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RedisTimeoutError("no time left to send the request")
            # used when connecting only: the reads below pass their own timeouts
            conn.socket_timeout = conn.socket_connect_timeout = left
            try:
                # (connects if need be) an idle connection with something to read is broken:
                # the server closed it (a restart, a failover) or a late reply is pending
                if conn.can_read(timeout=0):
                    conn.disconnect()  # type: ignore[no-untyped-call]
            except redis_exceptions.ConnectionError:
                conn.disconnect()  # type: ignore[no-untyped-call]
            conn.connect()  # type: ignore[no-untyped-call]
            conn.send_packed_command(conn.pack_commands(commands))  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in commands:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RedisTimeoutError("no reply in time")
                try:
                    replies.append(conn.read_response(timeout=left))
                except redis_exceptions.ResponseError as exc:  # an error reply; the next follows
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]  # else late replies come next
            raise
        with self._guard:
            self._idle.setdefault(id(pool), []).append(conn)
        return replies

    def close(self) -> None:
        with self._guard:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.disconnect()  # type: ignore[no-untyped-call]


def async_no_retry() -> redis.asyncio.retry.Retry:
    """No reconnect-and-retry inside redis-py (whose default is 10 tries with backoff): a
    Redlock node that fails counts as failed in that round, within its node timeout."""
    return redis.asyncio.retry.Retry(NoBackoff(), 0)


def sync_no_retry() -> redis.retry.Retry:
    return redis.retry.Retry(NoBackoff(), 0)


def _own_kwargs(pool: Any, socket_timeout: float, retry: Any) -> dict[str, Any]:
    """The connection settings of fencelock's own connections to the server of ``pool``: the
    same address, credentials and TLS, with

    * every socket operation bounded by fencelock's ``socket_timeout`` (the application's
      client may have none, or one meant for its own slow commands);
    * no retries inside redis-py (``retry``: none), whose default is 10 tries with backoff:
      fencelock re-sends a request itself, within the deadline of the call;
    * replies not decoded, whatever the application chose: redis-py 8.0/8.1 mis-parse the pub/sub
      reply to ``PING <nonce>`` when decoding, and fencelock reads bytes anyway.
    """
    kwargs = dict(pool.connection_kwargs)
    kwargs["socket_timeout"] = kwargs["socket_connect_timeout"] = socket_timeout
    kwargs["retry"] = retry
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
    kwargs = _own_kwargs(pool, socket_timeout, async_no_retry())
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
    kwargs = _own_kwargs(pool, socket_timeout, sync_no_retry())
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
    kwargs = _own_kwargs(node, socket_timeout, async_no_retry())
    pool = redis.asyncio.ConnectionPool(connection_class=node.connection_class, **kwargs)
    return redis.asyncio.Redis(connection_pool=pool)


def sync_node_client(node: Any, socket_timeout: float) -> redis.Redis:
    template = node.redis_connection.connection_pool
    kwargs = _own_kwargs(template, socket_timeout, sync_no_retry())
    pool = redis.ConnectionPool(connection_class=template.connection_class, **kwargs)
    return redis.Redis(connection_pool=pool)


class AsyncLoopGuard:
    """redis.asyncio connections, tasks and locks belong to the event loop they were made in.
    A client used from a second loop (a second ``asyncio.run``) would fail deep in redis-py, or
    hang: say so instead."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def check(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise LockError(
                "this fencelock.asyncio LockClient was first used in another event loop: make "
                "one client per event loop (e.g. inside the coroutine given to asyncio.run)"
            )


class SyncLoopGuard:
    def check(self) -> None:
        return None


class AsyncEvent:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        # the last grant a release announced on the watched channel (see waiter.py)
        self.grant: str | None = None

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float | None) -> bool:
        if self._event.is_set():
            return True
        # Not asyncio.timeout()/wait_for(): on Python 3.11 they can swallow a cancellation that
        # arrives as the timer fires, and a waiter that ignores cancellation may take the lock.
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait((waiter,), timeout=timeout)
        finally:
            waiter.cancel()
        return self._event.is_set()


class SyncEvent:
    def __init__(self) -> None:
        self._event = threading.Event()
        # the last grant a release announced on the watched channel (see waiter.py)
        self.grant: str | None = None

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)


class AsyncStateLock:
    """Guards plain state shared with the background worker. Under asyncio every section without
    an ``await`` is already atomic, so this is a no-op; the sync twin is a real mutex."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


SyncStateLock = threading.Lock

# A lock held across awaits (sync: across blocking calls).
AsyncMutex = asyncio.Lock
SyncMutex = threading.Lock


_reaping: set[asyncio.Task[None]] = set()  # a task the loop holds only weakly could vanish


def async_reap(
    close: Callable[[], Awaitable[None]], requester: AsyncRequester, pools: Sequence[Any]
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
    task.add_done_callback(_consume)


def sync_reap(
    close: Callable[[], None], requester: SyncRequester, pools: Sequence[redis.ConnectionPool]
) -> None:
    """The same with threads: close() would wait for the workers, which a finalizer must not (it
    may run in any thread). What it can do at once is close the idle connections (a pool's lock
    is re-entrant; the requester's is only taken by calls of the live client); the workers close
    theirs as they end. Not left to the pools' own collection: redis-py's are in reference
    cycles, which only a full collection, maybe much later, frees."""
    requester.close()
    for pool in pools:
        pool.disconnect(inuse_connections=False)


class AsyncBackground:
    """One long-running worker: a task of the running loop."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, target: Callable[[], Awaitable[None]]) -> None:
        self._task = asyncio.get_running_loop().create_task(target(), name=self._name)  # type: ignore[arg-type]

    async def stop(self, timeout: float) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.gather(task, return_exceptions=True)
            except TimeoutError:
                pass


class SyncBackground:
    """One long-running worker: a daemon thread (it must not keep the interpreter alive)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._thread: threading.Thread | None = None

    def running(self) -> bool:
        # After fork() the child has no other threads: is_alive() is then False.
        return self._thread is not None and self._thread.is_alive()

    def start(self, target: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=target, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        # The target watches its own stop flag; threads cannot be cancelled.
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
