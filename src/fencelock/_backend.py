"""The few primitives where asyncio and threads differ, side by side.

The asyncio implementation in ``_async/`` uses the ``Async*``/``async_*`` names; the sync twin
in ``_sync/`` is generated from it by ``tools/gen_sync.py``, which renames them to
``Sync*``/``sync_*``.
Everything else is shared source, so a fix cannot land in one API only.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, TypeVar

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


async def async_checkpoint() -> None:
    """Raise the cancellation of the current task if it is pending but was never delivered.

    redis.asyncio (seen with 8.1) can return a reply although the awaiting task was cancelled
    during the request, swallowing the CancelledError. An acquire that carried on would then wait
    for, or take, a lock nobody wants any more; so the acquire path checks after each request.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
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
    raised (a node silent for ``timeout`` seconds gets a ``TimeoutError``)."""
    send = [node.execute_command(*command) for node in nodes]  # type: ignore[no-untyped-call]
    tasks = [asyncio.ensure_future(request) for request in send]
    try:
        await asyncio.wait(tasks, timeout=timeout)
    except asyncio.CancelledError:
        # Let requests already sent finish first (bounded by the timeout): a release sent right
        # after on another connection could otherwise overtake them.
        await asyncio.wait(tasks, timeout=timeout)
        raise
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
            task.add_done_callback(_consume)
    return [_outcome(task, timeout) for task in tasks]


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
    """Requests bounded by a deadline of their own, whatever the socket timeout: a renewal must
    not outlive the lease it renews."""

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
        if timeout <= 0:
            raise RedisTimeoutError("no time left to send the request")
        pipe = redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        task = asyncio.ensure_future(pipe.execute(raise_on_error=False))
        task.add_done_callback(_consume)
        try:
            done, _ = await asyncio.wait((task,), timeout=timeout)
        finally:
            if not task.done():
                task.cancel()  # redis.asyncio closes a connection whose read was cancelled
        if not done:
            raise RedisTimeoutError(f"no reply within {timeout * 1000:.0f} ms")
        replies: list[Any] = task.result()
        return replies

    async def close(self) -> None:
        return None


class SyncRequester:
    """The same with threads, on connections of its own (per server, kept between requests):
    a pooled connection would be (re)connected by the pool with the full socket timeout and
    redis-py's retries, and a server that hangs in the handshake would hold the request."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._idle: dict[int, list[redis.connection.AbstractConnection]] = {}
        self._pid = os.getpid()

    def _take(self, pool: redis.ConnectionPool) -> redis.connection.AbstractConnection:
        with self._guard:
            if self._pid != os.getpid():  # forked: the sockets are the parent's
                self._pid, self._idle = os.getpid(), {}
            idle = self._idle.get(id(pool))
            if idle:
                return idle.pop()
        conn: redis.connection.AbstractConnection = pool.connection_class(**pool.connection_kwargs)
        conn.retry = sync_no_retry()  # one connect attempt, within the deadline
        return conn

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
        conn = self._take(pool)
        try:
            # used when connecting only: the reads below pass their own timeouts
            conn.socket_timeout = conn.socket_connect_timeout = timeout
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
                    raise RedisTimeoutError(f"no reply within {timeout * 1000:.0f} ms")
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


def async_node_client(node: Any) -> redis.asyncio.Redis:
    """A plain client (a pool of its own) to one node of an asyncio ``RedisCluster``, with the
    cluster's connection settings: a pub/sub connection must stay on the node of its channel."""
    pool = redis.asyncio.ConnectionPool(
        connection_class=node.connection_class, **node.connection_kwargs
    )
    return redis.asyncio.Redis(connection_pool=pool)


def sync_node_client(node: Any) -> redis.Redis:
    template = node.redis_connection.connection_pool
    pool = redis.ConnectionPool(
        connection_class=template.connection_class, **template.connection_kwargs
    )
    return redis.Redis(connection_pool=pool)


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


# Under asyncio a grant belongs to the task that acquired it (and to tasks it spawns, which copy
# its context). One module-level variable holds an immutable mapping slot -> value: creating a
# ContextVar per lock object would leak, since contexts keep their variables alive.
_owned: contextvars.ContextVar[Mapping[object, Any]] = contextvars.ContextVar(
    "fencelock_owned", default=MappingProxyType({})
)


class AsyncOwnerSlot(Generic[T]):
    """Where a lock object keeps its grant: per asyncio task."""

    def get(self) -> T | None:
        value: T | None = _owned.get().get(self)
        return value

    def set(self, value: T | None) -> None:
        owned = dict(_owned.get())
        if value is None:
            owned.pop(self, None)
        else:
            owned[self] = value
        _owned.set(owned)


class SyncOwnerSlot(Generic[T]):
    """Where a lock object keeps its grant: on the object (the sync holder is the lock object)."""

    def __init__(self) -> None:
        self._value: T | None = None

    def get(self) -> T | None:
        return self._value

    def set(self, value: T | None) -> None:
        self._value = value
