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
import inspect
import logging
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from .errors import LockError

T = TypeVar("T")


def async_public_name(obj: object) -> str:
    """The name of ``obj``'s class in messages and reprs, as the docs name it: a class of the
    asyncio API is ``fencelock.asyncio.Lock`` there (``AsyncLock`` is a name the docs never
    use); a class of the user's own keeps its name."""
    cls = type(obj)
    name = cls.__name__
    if name.startswith("Async") and cls.__module__.startswith("fencelock."):
        return f"fencelock.asyncio.{name.removeprefix('Async')}"
    return name


def sync_public_name(obj: object) -> str:
    return type(obj).__name__


async def async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sync_sleep(seconds: float) -> None:
    time.sleep(seconds)


def consume(task: asyncio.Future[Any]) -> None:
    # A shielded task whose caller was cancelled has nobody to read its outcome.
    if not task.cancelled():
        task.exception()


async def async_shield(aw: Awaitable[T]) -> T:
    """Run ``aw`` to completion even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(consume)
    return await asyncio.shield(task)


def sync_shield(value: T) -> T:
    return value  # a sync call cannot be cancelled half-way by anyone but a signal


async def async_at_once(
    calls: Sequence[Callable[[], Awaitable[T]]], undo: Callable[[int, T], Awaitable[object]]
) -> list[T | BaseException]:
    """Run ``calls`` at once, each in a task of its own, until they have all ended: per call,
    its result or what it raised. A caller cancelled meanwhile cancels those still running,
    gives what the others made to ``undo`` (with its index), and is cancelled."""
    tasks = [asyncio.ensure_future(call()) for call in calls]
    for task in tasks:
        task.add_done_callback(consume)
    try:
        await asyncio.wait(tasks)
    except BaseException:
        for task in tasks:
            task.cancel()  # (a task cancelled undoes what it made itself)
        for i, task in enumerate(tasks):
            if task.done() and not task.cancelled() and task.exception() is None:
                await undo(i, task.result())
        raise
    return [task.exception() or task.result() for task in tasks]


def sync_at_once(
    calls: Sequence[Callable[[], T]], undo: Callable[[int, T], object]
) -> list[T | BaseException]:
    # one thread each: a thread's calls block it
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [
        threading.Thread(target=run, args=(i,), name="fencelock-at-once", daemon=True)
        for i in range(len(calls))
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # (a signal's exception: the calls end by their own bounds)
        for thread in threads:
            thread.join()
        for i, result in enumerate(results):
            if not isinstance(result, BaseException):
                undo(i, result)
        raise
    return results


def async_cancelled(error: BaseException) -> bool:
    """Whether ``error`` is the caller's cancellation: it must get control back at once, and
    what is left to do (a give-back) is left to ``AsyncDetached``."""
    return isinstance(error, asyncio.CancelledError)


def sync_cancelled(error: BaseException) -> bool:
    return False


def closed_for_good(error: BaseException) -> bool:
    """Whether ``error`` ends a call that is closed for good: the garbage collector closes a
    call left suspended in a loop closed without cancelling it. It throws in ``GeneratorExit``,
    which redis-py's code, closed on the way, may have turned into another error ('no running
    event loop': its ``disconnect()`` needs a running loop). Nothing can run any more."""
    return isinstance(error, GeneratorExit) or asyncio._get_running_loop() is None


async def async_wait_done(aw: Awaitable[object]) -> bool:
    """Wait until ``aw`` (a request left in flight, bounded by its own timer) has ended, however;
    whether it got its reply (else the server may still run it)."""
    task = asyncio.ensure_future(aw)
    await asyncio.wait((task,))
    return not task.cancelled() and task.exception() is None


def sync_wait_done(aw: object) -> bool:
    return True  # (a thread's call is never left half-way: there is never a request to wait for)


class AsyncDetached:
    """Clean-ups left to finish in the background when their caller was cancelled (a give-back
    after the request in flight), each bounded by its requests; tracked, so that closing the
    client lets them finish first, for at most ``timeout`` seconds.

    So does the end of ``asyncio.run`` (or an ``asyncio.Runner``): it cancels the tasks still
    running, which starts their clean-ups, then closes the loop's async generators before the
    loop itself. One of those, ``_guard``, waits for the clean-ups: else they were destroyed
    pending, a waiter's place in a queue or a give-back left undone."""

    def __init__(self, timeout: float) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()
        self._timeout = timeout
        self._guard: AsyncGenerator[None] | None = None

    async def clean_up(self, aw: Coroutine[Any, Any, object], error: BaseException) -> None:
        """Run ``aw``, the clean-up of a call that failed with ``error``: to its end; in the
        background when the caller was cancelled (it gets control back at once); not at all
        when the call is closed for good (``closed_for_good``: nothing can run any more, and
        the leases end by themselves)."""
        if closed_for_good(error):
            aw.close()
        elif async_cancelled(error):
            self._add(aw)
        else:
            await async_shield(aw)

    def _add(self, aw: Awaitable[object]) -> None:
        task = asyncio.ensure_future(aw)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(consume)
        if self._guard is None:
            self._guard = self._until_the_loop_ends()
            # Its first step, now: the running loop learns of it (the first-iteration hook).
            with contextlib.suppress(StopIteration):
                self._guard.asend(None).send(None)

    async def _until_the_loop_ends(self) -> AsyncGenerator[None]:
        try:
            yield
        finally:  # the loop shuts down, or the client closes
            await self._finish()

    async def _finish(self) -> None:
        """Let the clean-ups finish, for at most the timeout; cancel what is left."""
        if self._tasks:
            tasks = list(self._tasks)
            _, left = await asyncio.wait(tasks, timeout=self._timeout)
            for task in left:
                task.cancel()

    async def close(self) -> None:
        guard, self._guard = self._guard, None
        await (self._finish() if guard is None else guard.aclose())


class SyncDetached:
    def __init__(self, timeout: float) -> None:
        return None

    def clean_up(self, done: object, error: BaseException) -> None:
        return None  # (in a thread the clean-up has run already, in the caller)

    def close(self) -> None:
        return None


# How many cancellation requests the current task had when the library call began. A task can
# carry requests that were never withdrawn: after a TaskGroup failure it caught, Python 3.11 and
# 3.12 leave ``cancelling()`` at 1. Those are not meant for the lock call.
_cancelling_at_start: contextvars.ContextVar[int] = contextvars.ContextVar(
    "fencelock_cancelling_at_start", default=0
)


class _CallScope:
    """Marks the start of a public lock call, for ``async_checkpoint`` (a class, not a
    ``contextlib.contextmanager``, nor ``contextlib.suppress`` below: every call passes here)."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        task = asyncio.current_task()
        self._token = _cancelling_at_start.set(0 if task is None else task.cancelling())

    def __exit__(self, *exc: object) -> None:
        try:  # noqa: SIM105
            _cancelling_at_start.reset(self._token)
        except ValueError:  # closed by the garbage collector, in another context: none to restore
            pass


async_call_scope = _CallScope


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


# Whether a lost lock can cancel the code running under it (on_lost_policy="cancel"): an asyncio
# task can be cancelled, a thread cannot (nor await an ``async def`` on_lost callback).
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


async def async_result(fn: Callable[[], Any]) -> Any:
    """What ``fn()``, an async callable, gives (``compute_once``'s ``compute``)."""
    outcome = fn()
    if not inspect.isawaitable(outcome):
        raise TypeError(
            f"compute returned {type(outcome).__name__}, not an awaitable: "
            "fencelock.asyncio runs an async callable"
        )
    return await outcome


def sync_result(fn: Callable[[], Any]) -> Any:
    outcome = fn()
    if inspect.isawaitable(outcome):
        if isinstance(outcome, Coroutine):
            outcome.close()  # never awaited: no "coroutine was never awaited" warning later
        raise TypeError(
            "compute returned an awaitable, which a thread cannot await: pass a plain "
            "function (or use fencelock.asyncio)"
        )
    return outcome


def async_current_task() -> asyncio.Task[Any] | None:
    return asyncio.current_task()


def sync_current_task() -> Any:
    return None


def async_running_loop() -> object:
    """The running event loop, which asyncio clients belong to (threads: None, one for all)."""
    return asyncio.get_running_loop()


def sync_running_loop() -> object:
    return None


def async_uncancel(task: asyncio.Task[Any] | None) -> None:
    """Withdraw a cancellation the library itself requested (and has now turned into LockLost),
    so the task's later awaits and timeouts behave as if it never happened."""
    if task is not None and task.cancelling():
        task.uncancel()


def sync_uncancel(task: None) -> None:
    return None


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
    """Each wait is a future, not a task: a wait left suspended in a loop closed without
    cancelling its tasks leaves no task behind, never started ('coroutine was never awaited'
    in the garbage collector), and waking one there schedules nothing."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            # (a closed loop: the garbage collector is closing a call that woke another)
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout: float | None) -> bool:
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.add(waiter)
        # The timer ends the wait as set() does. Not asyncio.timeout()/wait_for(): on Python
        # 3.11 they can swallow a cancellation that arrives as the timer fires, and a waiter
        # that ignores cancellation may take the lock; a cancellation raises at this await,
        # whether the timer fired or not. (Nor asyncio.wait(): a future, a callback and a set
        # more on every wait, issue 34.)
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)
            if timer is not None:
                timer.cancel()
        return self._set


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class SyncEvent:
    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)


# A watch's wake-up (``waiter.Watch.event``), which one caller at a time waits on: under asyncio
# an ``AsyncEvent``; in threads a lock that ``set()`` releases, where a ``threading.Event`` takes
# a ``Condition`` and its lock on each side (issue 34: that thread hop is on every hand-off).
AsyncWakeup = AsyncEvent


class SyncWakeup:
    """An event that one thread at a time waits on: its lock is held while it is clear, and
    ``set()`` releases it. A ``set()`` and a ``clear()`` at once may leave it clear and its
    lock free: the next ``wait()`` then returns False at once, as if timed out (the caller
    looks again, as after a timeout), and leaves it as a clear event."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._set = False
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        self._set = True
        try:  # noqa: SIM105 (suppress() is three calls more, on every wake-up)
            self._lock.release()
        except RuntimeError:  # (set already)
            pass

    def clear(self) -> None:
        self._set = False
        self._lock.acquire(False)  # (held already: not set since, or taken by a wait)

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None) -> bool:
        if not self._set:
            if timeout is None:
                self._lock.acquire()
            elif timeout > 0:
                self._lock.acquire(True, timeout)
            else:
                self._lock.acquire(False)
        return self._set


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


def async_watchdog(topology: Any, counters: Any) -> Any:
    """The asyncio client's watchdog: leases renewed in a thread, off the event loop (a loop
    blocked by a sync call must not cost them: _offloop.py)."""
    from ._offloop import OffLoopWatchdog  # (the sync API never imports the asyncio code)

    return OffLoopWatchdog(topology, counters)


def sync_watchdog(topology: Any, counters: Any) -> Any:
    from ._sync.watchdog import Watchdog

    return Watchdog(topology.grants, topology.traits.slot_of, counters)
