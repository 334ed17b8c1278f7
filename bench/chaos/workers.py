"""The worker process: acquire, read the counter, work, ``check()``, fenced write, release.

One process per worker, so that a nemesis can SIGKILL or SIGSTOP a holder for real. Each worker
records every step to its own JSONL file (``history.Recorder``) with ``time.monotonic()``, and
``on_lost`` records the loss signal from whatever thread it runs on (the watchdog, or ``check()``).
A grant, and a re-entry, record when the lease ends by the worker's own clock (``lease_end``).

Kinds ``default``, ``auto_renew`` and ``reentrant`` drive the sync API (``Worker``), and so do
``semaphore``, ``rw_write`` and ``multi_lock``: the other primitives, each held as a mutex (a
semaphore of one permit, the write side of a read-write lock, a multi-lock of two names) so
that the checker holds them to every promise of the lock.
``async_cancel`` drives the asyncio API (``AsyncWorker``): each round is an ``async with lock:``
block of a lock with ``auto_renew=True, on_lost_policy="cancel"``, so a lost lease cancels the
block at its next await (recorded: ``cancelled``), and the block then ends with ``LockLost``.
The two rounds are different protocols on purpose (the sync API has no cancellation), so neither
worker is generated from the other: what they share, every step without I/O, is written once in
``_Worker``, and each does only its own API's I/O around it.

The counter lives on the resource server: the worker reads it, works, and writes (value read) + 1
with ``client.fenced_set(key, value, token, redis=resource)`` (in the sinks' scenarios, in a
sink of ``fencelock.fences`` instead: ``sinks.py``). The write is fenced, the read is
not: docs/leases.md, "Read-modify-write: fence the read too", and the checker's "lost updates".

Each worker shows the harness where it is through one slot of a shared array (``PHASES``), so a
nemesis can hit a holder at a chosen point: while it works (before ``check()``), or between a
passed ``check()`` and its write. A second array counts its grants. A third one tells an
asyncio worker how long to block its event loop on the nemesis's SIGUSR1
(``AsyncWorker.block_loop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import redis
import redis.asyncio
from redis.exceptions import RedisError

import fencelock
import fencelock.asyncio
from fencelock._keys import LockKeys, SemaphoreKeys
from fencelock._sync.rw_lock import RWSide

from . import history as h
from .history import ASYNC_CANCEL as ASYNC_CANCEL
from .history import AUTO_RENEW as AUTO_RENEW
from .history import DEFAULT as DEFAULT
from .history import MULTI as MULTI
from .history import REENTRANT as REENTRANT
from .history import RW_WRITE as RW_WRITE
from .history import SEMAPHORE as SEMAPHORE
from .history import VERSIONED as VERSIONED
from .sinks import Sink, SinkSpec, open_sink
from .topologies import (
    ClientSpec,
    close_async_client,
    close_client,
    counter_key,
    make_async_client,
    make_client,
)

# The phase of a worker, in its slot of the shared array.
STARTING: Final = -1  # started, its client not made yet (the harness waits for it)
IDLE: Final = 0  # not holding (acquiring, or between rounds)
WORKING: Final = 1  # holding: read the counter, working, check() not yet called
CHECKED: Final = 2  # check() passed, the write not yet sent
WRITTEN: Final = 3  # the write answered, release not yet called
BLOCKED: Final = 4  # holding, its event loop blocked by a sync call (asyncio workers only)
HOLDING: Final = (WORKING, CHECKED)  # where a blocked loop is a sync call inside the block

STOP_POLL: Final = 0.02  # seconds between two looks at the stop flag while working
# the resource server (holding the counter), on this host
RESOURCE_OPTIONS: Final[dict[str, Any]] = {
    "host": "127.0.0.1",
    "socket_timeout": 5,
    "socket_connect_timeout": 5,
}

LOCK_KINDS: Final = (DEFAULT, AUTO_RENEW, REENTRANT, ASYNC_CANCEL, SEMAPHORE, RW_WRITE, MULTI)
# Redlock is for the mutex only (docs/semaphore.md): no semaphore, no read-write lock
REDLOCK_KINDS: Final = tuple(k for k in LOCK_KINDS if k not in (SEMAPHORE, RW_WRITE))


def second_name(name: str) -> str:
    """The other name a ``multi_lock`` worker takes with ``name`` (its own hash slot)."""
    return f"{name}+b"


def lock_keys(kind: str, name: str) -> list[LockKeys]:
    """The keys a grant of ``kind`` on ``name`` takes (the orphan check and the nemesis)."""
    if kind == SEMAPHORE:
        return [SemaphoreKeys.for_semaphore(name)]
    if kind == RW_WRITE:
        return [SemaphoreKeys.for_semaphore(name, kind="rw")]
    if kind == MULTI:
        return [LockKeys.for_name(n) for n in (name, second_name(name))]
    if kind == VERSIONED:
        return []
    return [LockKeys.for_name(name)]


SyncLock = fencelock.Lock | fencelock.MultiLock | fencelock.Semaphore | RWSide


def new_lock(
    client: fencelock.LockClient,
    kind: str,
    name: str,
    ttl: float,
    on_lost: Callable[[fencelock.Lock], object] | None = None,
) -> SyncLock:
    """The lock object of one round of a sync worker of ``kind`` (or of the final acquire)."""
    lost: dict[str, Any] = {"on_lost": on_lost, "on_lost_policy": "ignore"}
    if kind == SEMAPHORE:
        return client.semaphore(name, 1, ttl, auto_renew=True, **lost)
    if kind == RW_WRITE:
        return client.rw_lock(name, ttl, **lost).write()
    if kind == MULTI:  # (not renewed: the checker asks no loss signal of it, and it has no on_lost)
        return client.multi_lock([name, second_name(name)], ttl)
    return client.lock(
        name, ttl, auto_renew=kind == AUTO_RENEW, reentrant=kind == REENTRANT, **lost
    )


def lease_end(lock: SyncLock | fencelock.asyncio.Lock) -> float:
    """When the grant's lease ends by this process's clock, as the library knows it now: what
    ``check()`` goes by. (A renewal moves it later, unrecorded: the checker uses it only for
    locks that are not renewed.)"""
    return time.monotonic() + lock.remaining()


def token_of(lock: SyncLock, name: str) -> int:
    """The grant's fencing token for the counter of ``name``."""
    return lock.tokens[name] if isinstance(lock, fencelock.MultiLock) else lock.token


@dataclass(frozen=True)
class WorkerSpec:
    worker: str
    name: str
    kind: str  # one of LOCK_KINDS
    ttl: float
    client: ClientSpec
    resource_port: int
    sink: SinkSpec  # where the counter lives (sinks.py)
    history: str  # the JSONL file of this worker
    work: tuple[float, float]  # seconds of work per round, uniform in this range
    gap: float  # between a passed check() and the write (the window a pause can hit)
    think: float  # after a release, before the next acquire
    acquire_timeout: float
    deadline: float  # monotonic time at which the worker stops by itself, whatever happens
    seed: int


class _LibraryLog(logging.Handler):
    """fencelock's own log lines (why a lock was declared lost) go into the history."""

    def __init__(self, recorder: h.Recorder, name: str) -> None:
        super().__init__(logging.INFO)
        self.recorder = recorder
        self.lock_name = name

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            detail = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:  # logger.exception(...)
                exc = record.exc_info[1]
                detail += f": {type(exc).__name__}: {exc}"
            self.recorder.record(h.LIBRARY_LOG, name=self.lock_name, detail=detail)


def run(spec: WorkerSpec, phases: Any, grants: Any, slot: int, stop: Any, blocks: Any) -> None:
    """The worker's main (the target of its process). ``phases``/``grants``: shared int arrays;
    ``stop``: a shared int array whose first item the harness sets to ask every worker to stop;
    ``blocks``: a shared float array (seconds to block the event loop, asyncio workers only).
    Shared memory without locks: a multiprocessing Event would not do, since its lock can be
    left taken by a worker SIGKILLed or SIGSTOPped inside ``wait()``, blocking all others."""
    recorder = h.Recorder(spec.history, spec.worker)
    library = logging.getLogger("fencelock")
    library.addHandler(_LibraryLog(recorder, spec.name))
    library.propagate = False  # into the history, not onto the harness's stderr
    default_hook = threading.excepthook

    def thread_died(args: threading.ExceptHookArgs) -> None:
        """A library thread (watchdog, pub/sub listener) that dies is recorded, then reported
        as usual on stderr."""
        thread = args.thread.name if args.thread is not None else "?"
        what = f"{thread}: {args.exc_type.__name__}: {args.exc_value}"
        with contextlib.suppress(Exception):
            recorder.record(h.THREAD_DIED, name=spec.name, detail=what)
        default_hook(args)

    threading.excepthook = thread_died
    parent = os.getppid()

    def stopping() -> bool:
        return bool(stop[0]) or time.monotonic() > spec.deadline or os.getppid() != parent

    try:
        if spec.kind == ASYNC_CANCEL:
            worker = AsyncWorker(spec, recorder, phases, grants, slot, stop, blocks=blocks)
            asyncio.run(worker.loop(stopping))
        else:
            sync = VersionedWorker if spec.kind == VERSIONED else Worker
            sync(spec, recorder, phases, grants, slot, stop).loop(stopping)
    except Exception as exc:  # an error no step expects (the library's promise: typed errors)
        with contextlib.suppress(Exception):
            what = f"worker {spec.worker}: {type(exc).__name__}: {exc}"
            recorder.record(h.THREAD_DIED, name=spec.name, detail=what)
        raise
    finally:
        phases[slot] = IDLE
        recorder.close()


class _Worker:
    """What the sync and the asyncio worker share: the spec, the history, the shared slots, and
    every step that does no I/O (each worker does the I/O its API's way around these)."""

    def __init__(
        self,
        spec: WorkerSpec,
        recorder: h.Recorder,
        phases: Any,
        grants: Any,
        slot: int,
        stop: Any = None,
    ) -> None:
        self.spec = spec
        self.stop = stop  # shared flag (stop[0]): set, it cuts the work of a round short
        self.rec = recorder
        self.phases = phases
        self.grants = grants
        self.slot = slot
        self.rng = random.Random(spec.seed)
        self.token: int | None = None  # of the current grant, for on_lost
        self.key = counter_key(spec.name)

    def record(self, kind: str, **fields: Any) -> None:
        self.rec.record(kind, name=self.spec.name, **fields)

    def stopped(self) -> bool:
        return self.stop is not None and bool(self.stop[0])

    def granted(self, token: int, asked: float, detail: str, until: float | None) -> None:
        """The acquire returned a grant: recorded (``until``: its lease's end by this
        process's clock, ``lease_end``), counted, and shown as held (WORKING)."""
        self.record(h.ACQUIRE, token=token, t0=asked, detail=detail, until=until)
        self.grants[self.slot] += 1
        self.phases[self.slot] = WORKING

    def backoff(self) -> float:
        """Seconds to wait after an acquire failed on an error: the server is down, do not spin."""
        return 0.05 + self.rng.random() * 0.05

    def read(self, token: int, raw: bytes | str | int | None) -> int:
        """The counter as read from the resource (absent: 0), recorded."""
        value = int(raw) if raw is not None else 0
        self.record(h.READ, token=token, value=value)
        return value

    def naps(self, seconds: float) -> Iterator[float]:
        """The critical section's work, as the sleeps it is made of; cut short when the run
        stops (the round still checks, writes and releases)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self.stopped():
            yield min(left, STOP_POLL)

    def checked(self, lock: SyncLock | fencelock.asyncio.Lock, token: int) -> bool:
        """``lock.check()`` (no I/O in either API), recorded: True if the write may go."""
        try:
            lock.check()
        except fencelock.LockLost:
            self.record(h.CHECK_FAILED, token=token)
            return False
        self.record(h.CHECK_PASSED, token=token)
        self.phases[self.slot] = CHECKED
        return True

    def wrote(self, token: int, value: int, sent: float, outcome: Callable[[], object]) -> None:
        """Record the fenced write's outcome: ``outcome()`` returns, or raises the write's error."""
        try:
            outcome()
        except fencelock.StaleToken as exc:
            self.record(h.WRITE_REFUSED, token=token, value=value, t0=sent, detail=str(exc.seen))
        except Exception as exc:  # (a sink's own errors too: psycopg's, botocore's, OSError)
            self.record(h.WRITE_ERROR, token=token, value=value, t0=sent, detail=repr(exc))
        else:
            self.record(h.WRITE_ACCEPTED, token=token, value=value, t0=sent)


class Worker(_Worker):
    client: fencelock.LockClient
    resource: redis.Redis
    sink: Sink

    def on_lost(self, lock: fencelock.Lock) -> None:
        self.record(h.LOST, token=self.token, detail=threading.current_thread().name)

    def loop(self, stopping: Callable[[], bool]) -> None:
        self.client = make_client(self.spec.client)
        self.resource = redis.Redis(port=self.spec.resource_port, **RESOURCE_OPTIONS)
        self.sink = open_sink(self.spec.sink, self.spec.name, self.client)
        self.phases[self.slot] = IDLE  # (started)
        try:
            while not stopping():
                self.round()
        finally:
            self.record(h.EXIT)
            with contextlib.suppress(Exception):
                close_client(self.client)
            self.resource.close()
            self.sink.close()

    def round(self) -> None:
        spec = self.spec
        lock = new_lock(self.client, spec.kind, spec.name, spec.ttl, self.on_lost)
        asked = time.monotonic()
        try:
            granted = lock.acquire(timeout=spec.acquire_timeout)
        except (fencelock.LockError, RedisError) as exc:
            self.record(h.ACQUIRE_FAILED, t0=asked, detail=type(exc).__name__)
            time.sleep(self.backoff())
            return
        if not granted:
            self.record(h.ACQUIRE_FAILED, t0=asked, detail="timeout")
            return
        returned = time.monotonic()
        try:
            self.token = token_of(lock, spec.name)  # Redlock: the write-back happens here
        except fencelock.LockError as exc:  # LockLost, or no majority answered the write-back
            detail = f"{type(exc).__name__} when the token was read"
            self.record(h.ACQUIRE_FAILED, t0=asked, detail=detail)
            with contextlib.suppress(fencelock.LockError, RedisError):
                lock.release()  # nothing was handed out: this is no grant
            return
        took = f"acquire() {returned - asked:.3f} s, token {time.monotonic() - returned:.3f} s"
        self.granted(self.token, asked, took, lease_end(lock))
        try:
            self.hold(lock, self.token)
        finally:
            self.release(lock)
            self.phases[self.slot] = IDLE
            self.token = None
        time.sleep(spec.think)

    def hold(self, lock: SyncLock, token: int) -> None:
        spec = self.spec
        inner = False
        if spec.kind == REENTRANT:
            try:
                inner = lock.acquire(timeout=0)
                until = lease_end(lock) if inner else None  # (a re-entry restarts the lease)
                self.record(h.REENTER, token=token, detail="" if inner else "refused", until=until)
            except fencelock.LockError as exc:
                self.record(h.REENTER, token=token, detail=type(exc).__name__)
        value = self.read(token, self.sink.read())
        for nap in self.naps(self.rng.uniform(*spec.work)):
            time.sleep(nap)
        if self.checked(lock, token):
            time.sleep(spec.gap)
            self.write(token, value + 1)
        self.phases[self.slot] = WRITTEN
        if inner:
            try:
                lock.release()  # the inner hold: the grant stays
            except fencelock.LockError as exc:  # its loss was signalled by on_lost
                self.record(h.REENTER, token=token, detail=f"inner release: {type(exc).__name__}")

    def write(self, token: int, value: int) -> None:
        self.record(h.WRITE_ATTEMPT, token=token, value=value)
        sent = time.monotonic()
        self.wrote(token, value, sent, lambda: self.sink.write(value, token))

    def release(self, lock: SyncLock) -> None:
        self.record(h.RELEASE, token=self.token)
        try:
            lock.release()
        except (fencelock.LockError, RedisError) as exc:
            self.record(h.RELEASE_FAILED, token=self.token, detail=type(exc).__name__)
        else:
            self.record(h.RELEASED, token=self.token)


class VersionedWorker(Worker):
    """The ``versioned`` kind: no lock. Each round reads the counter with its version
    (``client.versioned(key, redis=resource)``), works, and writes (value read) + 1 only if the
    version is unchanged. Recorded as the lock workers' rounds are, so that the nemesis finds
    it at the same points: the read as a grant (``acquire``, its token the version read), the
    compare-and-set as the write (``write_refused``: another write came first), then
    ``release``. Its promise is no lost update: every accepted write is counted in the final
    value, whoever was paused or killed in the middle."""

    def round(self) -> None:
        spec = self.spec
        value = self.client.versioned(self.key, redis=self.resource)
        asked = time.monotonic()
        try:
            raw, version = value.get()
        except (fencelock.LockError, RedisError) as exc:
            self.record(h.ACQUIRE_FAILED, t0=asked, detail=type(exc).__name__)
            time.sleep(self.backoff())
            return
        self.token = version
        self.granted(version, asked, "read", None)
        try:
            read = self.read(version, raw)
            for nap in self.naps(self.rng.uniform(*spec.work)):
                time.sleep(nap)
            self.phases[self.slot] = CHECKED  # (what a pause "after the check" aims at)
            time.sleep(spec.gap)
            self.record(h.WRITE_ATTEMPT, token=version, value=read + 1)
            sent = time.monotonic()
            try:
                written = value.set(read + 1, version)
            except (fencelock.LockError, RedisError) as exc:
                self.record(h.WRITE_ERROR, token=version, value=read + 1, t0=sent, detail=repr(exc))
            else:
                outcome = h.WRITE_ACCEPTED if written else h.WRITE_REFUSED
                self.record(outcome, token=version, value=read + 1, t0=sent)
            self.phases[self.slot] = WRITTEN
            self.record(h.RELEASE, token=version)
            self.record(h.RELEASED, token=version)
        finally:
            self.phases[self.slot] = IDLE
            self.token = None
        time.sleep(spec.think)


class AsyncWorker(_Worker):
    """The ``async_cancel`` worker: the rounds of ``Worker`` through the asyncio API, in one
    event loop. A round is one ``async with lock:`` block, the lock with ``auto_renew=True,
    on_lost_policy="cancel"``: a lost lease cancels the block at its next await, recorded where
    it lands (``cancelled``), and the block then ends with ``LockLost``. ``release`` is recorded
    when the body ends (the block's exit releases next), ``released``/``release_failed`` (with
    the exception's class) when the ``async with`` has ended.

    On SIGUSR1 its loop blocks for the seconds the nemesis put in its slot of ``blocks``
    (``block_loop``), if it holds its lock."""

    client: fencelock.asyncio.LockClient
    resource: redis.asyncio.Redis
    step = ""  # where the body is ("" outside a block): where a cancellation lands
    cancel_recorded = False

    def __init__(self, *args: Any, blocks: Any) -> None:
        super().__init__(*args)
        self.blocks = blocks

    def block_loop(self) -> None:
        """SIGUSR1, run by the loop as one of its callbacks: while the worker holds its lock
        (its task waits at an await inside ``async with lock:``), a sync call blocks the loop
        for the seconds in the worker's slot of ``blocks``, as a sync database call inside the
        block would; nothing otherwise. The slot is zeroed once decided (the nemesis's answer:
        the phase shows ``BLOCKED`` until the call returns, or not)."""
        seconds, phase = float(self.blocks[self.slot]), self.phases[self.slot]
        if seconds <= 0 or phase not in HOLDING:
            self.blocks[self.slot] = 0.0
            return
        self.record(h.LOOP_BLOCKED, token=self.token, value=round(seconds * 1000), detail=self.step)
        self.phases[self.slot] = BLOCKED
        self.blocks[self.slot] = 0.0
        time.sleep(seconds)  # the sync call: no task of this loop runs meanwhile
        self.record(h.LOOP_RESUMED, token=self.token)
        self.phases[self.slot] = phase

    def on_lost(self, lock: fencelock.asyncio.Lock) -> None:
        task = asyncio.current_task()  # the watchdog's, or this worker's own (check())
        where = task.get_name() if task is not None else threading.current_thread().name
        self.record(h.LOST, token=self.token, detail=where)

    def task_failed(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An error the loop reports (a library task, the watchdog or the pub/sub listener,
        that ended on an exception) is recorded, then reported as usual on stderr."""
        task = context.get("task") or context.get("future")
        name = task.get_name() if isinstance(task, asyncio.Task) else "?"
        exc = context.get("exception")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else context.get("message")
        with contextlib.suppress(Exception):
            self.record(h.THREAD_DIED, detail=f"task {name}: {what}")
        loop.default_exception_handler(context)

    async def loop(self, stopping: Callable[[], bool]) -> None:
        asyncio.get_running_loop().set_exception_handler(self.task_failed)
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, self.block_loop)
        task = asyncio.current_task()
        if task is not None:
            task.set_name(f"chaos-{self.spec.worker}")
        self.client = make_async_client(self.spec.client)
        self.resource = redis.asyncio.Redis(port=self.spec.resource_port, **RESOURCE_OPTIONS)
        self.phases[self.slot] = IDLE  # (started)
        try:
            while not stopping():
                await self.round()
        finally:
            self.record(h.EXIT)
            with contextlib.suppress(Exception):
                await close_async_client(self.client)
            await self.resource.aclose()

    async def round(self) -> None:
        spec = self.spec
        lock = self.client.lock(
            spec.name,
            spec.ttl,
            timeout=spec.acquire_timeout,
            auto_renew=True,
            on_lost=self.on_lost,
            on_lost_policy="cancel",
        )
        asked = time.monotonic()
        self.step = ""
        try:
            async with lock:
                await self.hold(lock, asked)
        except asyncio.CancelledError:
            if not self.step:
                raise  # not the lock's: nothing else cancels this task
            # the lock's cancellation escaped the block instead of becoming LockLost (a broken
            # promise, which the checker reports): withdraw it, and go on with the next round
            self.record(h.RELEASE_FAILED, token=self.token, detail="CancelledError")
            task = asyncio.current_task()
            while task is not None and task.cancelling():
                task.uncancel()
        except (fencelock.LockError, RedisError) as exc:
            if self.step:  # the block's exit: LockLost after a loss
                self.record(h.RELEASE_FAILED, token=self.token, detail=type(exc).__name__)
            elif isinstance(exc, fencelock.LockTimeout):  # not granted within acquire_timeout
                self.record(h.ACQUIRE_FAILED, t0=asked, detail="timeout")
                return
            else:
                self.record(h.ACQUIRE_FAILED, t0=asked, detail=type(exc).__name__)
                await asyncio.sleep(self.backoff())
                return
        else:
            self.record(h.RELEASED, token=self.token)
        finally:
            self.phases[self.slot] = IDLE
            self.token = None
        await asyncio.sleep(spec.think)

    async def hold(self, lock: fencelock.asyncio.Lock, asked: float) -> None:
        returned = time.monotonic()
        token = self.token = lock.token  # no I/O under asyncio: Redlock's write-back is done
        self.step, self.cancel_recorded = "read", False
        self.granted(token, asked, f"acquire() {returned - asked:.3f} s", lease_end(lock))
        try:
            value = self.read(token, await self.resource.get(self.key))
            self.step = "work"
            for nap in self.naps(self.rng.uniform(*self.spec.work)):
                await asyncio.sleep(nap)
            # a loss that check() declares: its cancellation is due at the next await, the
            # release at the block's exit
            if self.checked(lock, token):
                self.step = "gap"
                await asyncio.sleep(self.spec.gap)
                self.step = "write"
                await self.write(token, value + 1)
        except asyncio.CancelledError:
            if not self.cancel_recorded:
                self.record(h.CANCELLED, token=token, detail=self.step)
            raise
        finally:
            self.phases[self.slot] = WRITTEN
            self.step = "exit"
            self.record(h.RELEASE, token=token)

    async def write(self, token: int, value: int) -> None:
        """The fenced write. Shielded from the lock's cancellation: one that lands while the
        write is in flight is recorded at once, but the write's outcome is still waited for and
        recorded (a stale write accepted must not hide behind "unknown"), then the
        cancellation goes on."""
        self.record(h.WRITE_ATTEMPT, token=token, value=value)
        sent = time.monotonic()
        request = asyncio.ensure_future(
            self.client.fenced_set(self.key, value, token, redis=self.resource)
        )
        cancelled: asyncio.CancelledError | None = None
        try:
            await asyncio.shield(request)
        except asyncio.CancelledError as exc:  # this task's: the shielded request goes on
            self.record(h.CANCELLED, token=token, detail="write (in flight)")
            self.cancel_recorded, cancelled = True, exc
            await asyncio.wait([request])
        except Exception:
            pass  # the request's own error: its outcome, read below
        self.wrote(token, value, sent, request.result)
        if cancelled is not None:
            raise cancelled
