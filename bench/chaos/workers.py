"""The worker process: acquire, read the counter, work, ``check()``, fenced write, release.

One process per worker, so that a nemesis can SIGKILL or SIGSTOP a holder for real. Each worker
records every step to its own JSONL file (``history.Recorder``) with ``time.monotonic()``, and
``on_lost`` records the loss signal from whatever thread it runs on (the watchdog, or ``check()``).

The counter lives on the resource server: the worker reads it, works, and writes (value read) + 1
with ``client.fenced_set(key, value, token, redis=resource)``. The write is fenced, the read is
not: docs/leases.md, "Read-modify-write: fence the read too", and the checker's "lost updates".

Each worker shows the harness where it is through one slot of a shared array (``PHASES``), so a
nemesis can hit a holder at a chosen point: while it works (before ``check()``), or between a
passed ``check()`` and its write. A second array counts its grants.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import redis
from redis.exceptions import RedisError

import fencelock

from . import history as h
from .topologies import ClientSpec, close_client, counter_key, make_client

# The phase of a worker, in its slot of the shared array.
IDLE: Final = 0  # not holding (acquiring, or between rounds)
WORKING: Final = 1  # holding: read the counter, working, check() not yet called
CHECKED: Final = 2  # check() passed, the write not yet sent
WRITTEN: Final = 3  # the write answered, release not yet called

STOP_POLL: Final = 0.02  # seconds between two looks at the stop flag while working

DEFAULT, AUTO_RENEW, REENTRANT = "default", "auto_renew", "reentrant"
LOCK_KINDS: Final = (DEFAULT, AUTO_RENEW, REENTRANT)


@dataclass(frozen=True)
class WorkerSpec:
    worker: str
    name: str
    kind: str  # DEFAULT, AUTO_RENEW or REENTRANT
    ttl: float
    client: ClientSpec
    resource_port: int
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
            self.recorder.record(h.LIBRARY_LOG, name=self.lock_name, detail=record.getMessage())


def run(spec: WorkerSpec, phases: Any, grants: Any, slot: int, stop: Any) -> None:
    """The worker's main (the target of its process). ``phases``/``grants``: shared int arrays;
    ``stop``: a shared int array whose first item the harness sets to ask every worker to stop.
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
    try:
        Worker(spec, recorder, phases, grants, slot, stop).loop(
            lambda: bool(stop[0]) or time.monotonic() > spec.deadline or os.getppid() != parent
        )
    finally:
        phases[slot] = IDLE
        recorder.close()


class Worker:
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
        self.client = make_client(spec.client)
        self.resource = redis.Redis(
            host="127.0.0.1", port=spec.resource_port, socket_timeout=5, socket_connect_timeout=5
        )
        self.key = counter_key(spec.name)

    def record(self, kind: str, **fields: Any) -> None:
        self.rec.record(kind, name=self.spec.name, **fields)

    def on_lost(self, lock: fencelock.Lock) -> None:
        self.record(h.LOST, token=self.token, detail=threading.current_thread().name)

    def loop(self, stopping: Any) -> None:
        try:
            while not stopping():
                self.round()
        finally:
            self.record(h.EXIT)
            with contextlib.suppress(Exception):
                close_client(self.client)
            self.resource.close()

    def round(self) -> None:
        spec = self.spec
        lock = self.client.lock(
            spec.name,
            spec.ttl,
            auto_renew=spec.kind == AUTO_RENEW,
            reentrant=spec.kind == REENTRANT,
            on_lost=self.on_lost,
            on_lost_policy="ignore",
        )
        asked = time.monotonic()
        try:
            granted = lock.acquire(timeout=spec.acquire_timeout)
        except (fencelock.LockError, RedisError) as exc:
            self.record(h.ACQUIRE_FAILED, t0=asked, detail=type(exc).__name__)
            time.sleep(0.05 + self.rng.random() * 0.05)  # the server is down: do not spin
            return
        if not granted:
            self.record(h.ACQUIRE_FAILED, t0=asked, detail="timeout")
            return
        returned = time.monotonic()
        try:
            self.token = lock.token  # Redlock: the write-back happens here
        except fencelock.LockLost:
            self.record(h.ACQUIRE_FAILED, t0=asked, detail="LockLost when the token was read")
            with contextlib.suppress(fencelock.LockError, RedisError):
                lock.release()  # nothing was handed out: this is no grant
            return
        took = f"acquire() {returned - asked:.3f} s, token {time.monotonic() - returned:.3f} s"
        self.record(h.ACQUIRE, token=self.token, t0=asked, detail=took)
        self.grants[self.slot] += 1
        self.phases[self.slot] = WORKING
        try:
            self.hold(lock, self.token)
        finally:
            self.release(lock)
            self.phases[self.slot] = IDLE
            self.token = None
        time.sleep(spec.think)

    def hold(self, lock: fencelock.Lock, token: int) -> None:
        spec = self.spec
        inner = False
        if spec.kind == REENTRANT:
            try:
                inner = lock.acquire(timeout=0)
                self.record(h.REENTER, token=token, detail="" if inner else "refused")
            except fencelock.LockError as exc:
                self.record(h.REENTER, token=token, detail=type(exc).__name__)
        raw = self.resource.get(self.key)
        value = int(raw) if raw is not None else 0
        self.record(h.READ, token=token, value=value)
        self.work(self.rng.uniform(*spec.work))
        try:
            lock.check()
        except fencelock.LockLost:
            self.record(h.CHECK_FAILED, token=token)
        else:
            self.record(h.CHECK_PASSED, token=token)
            self.phases[self.slot] = CHECKED
            time.sleep(spec.gap)
            self.write(token, value + 1)
        self.phases[self.slot] = WRITTEN
        if inner:
            try:
                lock.release()  # the inner hold: the grant stays
            except fencelock.LockError as exc:  # its loss was signalled by on_lost
                self.record(h.REENTER, token=token, detail=f"inner release: {type(exc).__name__}")

    def work(self, seconds: float) -> None:
        """The critical section's work; cut short when the run stops (the round still checks,
        writes and releases)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.stop is not None and self.stop[0]:
                return
            time.sleep(min(left, STOP_POLL))

    def write(self, token: int, value: int) -> None:
        self.record(h.WRITE_ATTEMPT, token=token, value=value)
        sent = time.monotonic()
        try:
            self.client.fenced_set(self.key, value, token, redis=self.resource)
        except fencelock.StaleToken as exc:
            self.record(h.WRITE_REFUSED, token=token, value=value, t0=sent, detail=str(exc.seen))
        except (fencelock.LockError, RedisError) as exc:
            self.record(h.WRITE_ERROR, token=token, value=value, t0=sent, detail=repr(exc))
        else:
            self.record(h.WRITE_ACCEPTED, token=token, value=value, t0=sent)

    def release(self, lock: fencelock.Lock) -> None:
        self.record(h.RELEASE, token=self.token)
        try:
            lock.release()
        except (fencelock.LockError, RedisError) as exc:
            self.record(h.RELEASE_FAILED, token=self.token, detail=type(exc).__name__)
        else:
            self.record(h.RELEASED, token=self.token)
