"""Contention benchmarks (issue 5): ``fencelock bench`` and ``python -m bench.compare``.

``fencelock bench --url redis://...`` runs fencelock's side of every workload against a server
you give it, to size your own Redis; ``python -m bench.compare`` runs the same workloads, with
the same code, for fencelock and its peers on servers it starts itself (the peers' adapters and
the plots live in ``bench/``, so the library depends on neither).

The workloads:

* **P1** uncontended acquire+release, sync and asyncio: one client takes and gives back a lock
  nobody else wants, as fast as it can (``acquire(timeout=0)``, ``release()``); cycles/s.
* **P2** ``processes`` (4) spawned processes contend for one name, each holding it ~``hold``
  (1 ms) per grant: throughput; cross-process hand-off latency, p50 and p99, measured as (the
  time the next holder's acquire returned) - (the time the previous holder's release was called)
  on the system-wide monotonic clock (``time.monotonic()`` is CLOCK_MONOTONIC on Linux), from
  per-acquire timestamps every worker records and the parent merges; each worker's share of the
  grants against a fair share (fairness); and a read-modify-write counter in Redis (GET, +1, SET
  while holding the lock) that must end equal to the number of grants (lost updates: 0).
* **P3** ``threads`` (8) threads of one process contend for one name through one client (each
  thread its own lock object), and the same with asyncio tasks on one event loop: throughput,
  and Redis commands per acquisition from the server's ``INFO commandstats`` (the sum of every
  command's calls, which counts the commands a script runs too) and ``total_commands_processed``,
  both without our own ``INFO`` calls. The critical section is an in-process read-modify-write
  (read, yield, write) checked for lost updates.
* **P4** Redlock over several masters (5), uncontended, as P1.
* **P5** ``locks`` (10,000) locks with automatic renewal held by one client for a window that
  opens two renewal periods after the last acquisition (the steady state): the renewal
  requests the server received (``EVAL``/``EVALSHA``/``FCALL`` calls) per renewal period and
  per 100 locks, leases missed (a lock key gone at the end, or a lock the library declared
  lost), and the threads (or asyncio tasks) the client added.
* **P6** Redis memory per held lock: ``MEMORY USAGE`` of each key a held lock has (fencelock:
  the lock key and the fencing counter, which outlives the grant), and the growth of
  ``used_memory`` divided by the number of locks; simple and reentrant locks.

Method: as in ``bench/uncontended.py``, every variant warms up first (connections made, scripts
cached), then each of ``repeat`` repetitions runs every variant (P1, P4) or contender (P2, P3)
once, in an order rotated by the repetition and reversed on every other one, so slow drift does
not favour one of them. Reported: medians over the repetitions, with min and max; nothing is
asserted. Every cycle checks what it got, so a contender that silently stopped locking cannot
look fast. In P2 and P3 the workers re-acquire at once after a release: the hardest case for
fairness.

Keys written: lock names start with ``fencelock-bench-`` (P6: 12-character names ``job...``); P2
also uses ``fencelock-bench:counter``. P2, P5 and P6 delete what they wrote; ``fencelock bench``
also deletes the fencing counters of the names P1-P4 used.

A contender is anything with the small interface below (``SyncLocks``/``AsyncLocks``); fencelock's
own are ``FENCELOCK``, ``FENCELOCK_REENTRANT`` and ``FENCELOCK_RENEWING``.
"""

from __future__ import annotations

import asyncio
import gc
import math
import multiprocessing
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import Any, Final, Protocol, TypeVar

import redis
import redis.asyncio

from fencelock import Lock, LockClient
from fencelock import asyncio as fl_asyncio
from fencelock_tools._lib import LockKeys

TTL: Final = 10.0  # lease of every benchmark lock (P5: RENEW_TTL)
SOCKET_TIMEOUT: Final = 5.0  # what LockClient.from_url uses for one server
# Cycles between two reads of the clock: the loop overhead stays far below one round trip.
BATCH: Final = 100
PREFIX: Final = "fencelock-bench"
COUNTER_KEY: Final = f"{PREFIX}:counter"
READY_TIMEOUT: Final = 60.0  # spawned interpreters import redis; a loaded box can be slow
RENEW_TTL: Final = 3.0
WORKLOADS: Final = ("P1", "P2", "P3", "P4", "P5", "P6")
# The P2 workload's own commands in each grant: the counter's GET and SET (not the lock's)
COUNTER_COMMANDS: Final = 2
SCRIPT_CALLS: Final = ("cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro",
                       "cmdstat_fcall", "cmdstat_fcall_ro")  # fmt: skip

T = TypeVar("T")
Target = str | Sequence[str]  # one server's URL, or several masters (Redlock)
Progress = Callable[[str], None]
SyncCycle = Callable[[], None]
AsyncCycle = Callable[[], Awaitable[None]]


class BenchError(RuntimeError):
    """A cycle did not do what it should (the lock was busy, or the release found no grant)."""


def to_stderr(message: str) -> None:
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)


# -- contenders ------------------------------------------------------------------------------


class SyncLockLike(Protocol):
    def acquire(self, *, timeout: float | None) -> bool:
        """None waits forever, 0 tries once, > 0 waits that long; whether it was acquired."""
        ...

    def release(self) -> None: ...


class SyncLocks(Protocol):
    """A client: one per process, shared by its threads (each takes its own lock object)."""

    def lock(self, name: str, /) -> SyncLockLike: ...

    def close(self) -> None: ...


class AsyncLockLike(Protocol):
    async def acquire(self, *, timeout: float | None) -> bool: ...

    async def release(self) -> None: ...


class AsyncLocks(Protocol):
    def lock(self, name: str, /) -> AsyncLockLike: ...

    async def close(self) -> None: ...


# (target, ttl) -> client. Module-level callables (or partials of them): P2 pickles the sync one
# into spawned processes. The asyncio one is called inside the running event loop.
SyncFactory = Callable[[Target, float], SyncLocks]
AsyncFactory = Callable[[Target, float], AsyncLocks]


@dataclass(frozen=True)
class Contender:
    label: str
    sync: SyncFactory | None = None
    asyncio: AsyncFactory | None = None
    keys: Callable[[str], list[str]] | None = (
        None  # a held lock's keys, its lock key first (P5, P6)
    )
    renew_every: float | None = None  # auto-renewing locks: renewal interval / ttl (P5)
    note: str = ""


def _target(target: Target) -> str | list[str]:
    return target if isinstance(target, str) else list(target)


class FencelockLocks:
    """``fencelock.LockClient`` as a contender; ``client_options`` go to ``LockClient.from_url``
    (``wake="one"``...), ``options`` to ``client.lock``."""

    def __init__(
        self,
        target: Target,
        ttl: float,
        *,
        client_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.client = LockClient.from_url(
            _target(target), socket_timeout=SOCKET_TIMEOUT, **(client_options or {})
        )
        self.ttl = ttl
        self.options = options

    def lock(self, name: str) -> Lock:
        return self.client.lock(name, ttl=self.ttl, **self.options)

    def wait_counts(self) -> dict[str, int]:
        """The client's waits so far, by how they ended (P2 workers report them)."""
        return _wait_counts(self.client.statistics())

    def close(self) -> None:
        self.client.close()


class FencelockAsyncLocks:
    def __init__(
        self,
        target: Target,
        ttl: float,
        *,
        client_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.client = fl_asyncio.LockClient.from_url(
            _target(target), socket_timeout=SOCKET_TIMEOUT, **(client_options or {})
        )
        self.ttl = ttl
        self.options = options

    def lock(self, name: str) -> fl_asyncio.Lock:
        return self.client.lock(name, ttl=self.ttl, **self.options)

    def wait_counts(self) -> dict[str, int]:
        return _wait_counts(self.client.statistics())

    async def close(self) -> None:
        await self.client.close()


def _wait_counts(stats: Any) -> dict[str, int]:
    # wakeups: waits a release message ended; polls: waits their timer ended (the fallback
    # re-try, and the pause a releaser takes to let a woken waiter go first)
    return {"wakeups": int(stats.wakeups), "polls": int(stats.polls)}


def fencelock_keys(name: str) -> list[str]:
    keys = LockKeys.for_name(name)
    return [keys.lock, keys.fence]


FENCELOCK: Final = Contender("fencelock", FencelockLocks, FencelockAsyncLocks, fencelock_keys)
FENCELOCK_REENTRANT: Final = Contender(
    "fencelock reentrant",
    partial(FencelockLocks, reentrant=True),
    partial(FencelockAsyncLocks, reentrant=True),
    fencelock_keys,
)
FENCELOCK_RENEWING: Final = Contender(
    "fencelock",
    partial(FencelockLocks, auto_renew=True),
    partial(FencelockAsyncLocks, auto_renew=True),
    fencelock_keys,
    renew_every=1 / 3,
    note="one watchdog per client renews every lease at ttl/3, up to 100 per script call",
)


class _OnLoop:
    """An asyncio lock driven from sync code, one ``runner.run`` per call (P5, P6: what is
    measured there is the server, not the call overhead)."""

    def __init__(self, runner: asyncio.Runner, lock: AsyncLockLike) -> None:
        self.runner = runner
        self.inner = lock

    def acquire(self, *, timeout: float | None) -> bool:
        return self.runner.run(self.inner.acquire(timeout=timeout))

    def release(self) -> None:
        self.runner.run(self.inner.release())


class _LocksOnLoop:
    def __init__(self, runner: asyncio.Runner, locks: AsyncLocks) -> None:
        self.runner = runner
        self.inner = locks

    def lock(self, name: str) -> _OnLoop:
        return _OnLoop(self.runner, self.inner.lock(name))

    def close(self) -> None:
        self.runner.run(self.inner.close())


def _on_loop(
    runner: asyncio.Runner, factory: AsyncFactory, target: Target, ttl: float
) -> SyncLocks:
    async def make() -> AsyncLocks:
        return factory(target, ttl)

    return _LocksOnLoop(runner, runner.run(make()))


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")


# -- timing loops and the run schedule (shared with bench/_common.py) ------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    rate: float  # cycles per second, wall clock
    cpu_us: float  # this process's CPU time per cycle, microseconds


def time_sync(cycle: SyncCycle, seconds: float) -> Sample:
    """Run ``cycle`` for at least ``seconds``."""
    count = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(BATCH):
            cycle()
        count += BATCH
        now = time.perf_counter()
        if now >= deadline:
            cpu = time.process_time() - cpu_start
            return Sample(count / (now - start), 1e6 * cpu / count)


async def time_async(cycle: AsyncCycle, seconds: float) -> Sample:
    count = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(BATCH):
            await cycle()
        count += BATCH
        now = time.perf_counter()
        if now >= deadline:
            cpu = time.process_time() - cpu_start
            return Sample(count / (now - start), 1e6 * cpu / count)


@dataclass
class Variant:
    name: str
    measure: Callable[[float], Sample]  # run for that many seconds
    round_trips: int | None = None  # per cycle, shown in the table when known
    samples: list[Sample] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [s.rate for s in self.samples]

    @property
    def cpu(self) -> list[float]:
        return [s.cpu_us for s in self.samples]


def order_for(repetition: int, items: Sequence[T]) -> list[T]:
    """Rotated by the repetition number, reversed on odd ones: over the repetitions each item
    runs early and late, before and after each other one."""
    shift = repetition % len(items)
    rotated = [*items[shift:], *items[:shift]]
    return rotated[::-1] if repetition % 2 else rotated


def measure(
    all_variants: list[Variant],
    seconds: float,
    repeat: int,
    warmup: float,
    progress: Progress | None = to_stderr,
) -> None:
    for variant in all_variants:
        variant.measure(warmup)
    for repetition in range(repeat):
        for variant in order_for(repetition, all_variants):
            gc.collect()  # start each run from the same heap state
            variant.samples.append(variant.measure(seconds))
        if progress is not None:
            line = "  ".join(f"{v.name}={v.rates[-1]:,.0f}" for v in all_variants)
            progress(f"  run {repetition + 1}/{repeat}: {line}")


# -- figures ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spread:
    """Median, min and max of one figure over the repetitions."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            return cls(math.nan, math.nan, math.nan)
        return cls(statistics.median(values), min(values), max(values))

    @property
    def noise(self) -> float:
        """(max - min) / median, the run-to-run noise."""
        return (self.high - self.low) / self.median if self.median else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), interpolated between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _commands(info: dict[str, Any]) -> dict[str, int]:
    return {k: int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_")}


@dataclass(frozen=True)
class ServerCounters:
    """Commands the server ran between two ``INFO`` snapshots, without our own ``INFO`` calls."""

    calls: dict[str, int]  # per command (``cmdstat_set``...), from INFO commandstats
    processed: int  # total_commands_processed
    # server CPU time, s: used_cpu_sys + used_cpu_user (every thread of the server, the INFO
    # calls and the server's own timers included; NaN when INFO has no cpu section)
    cpu: float = math.nan

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def script_calls(self) -> int:
        return sum(self.calls.get(k, 0) for k in SCRIPT_CALLS)


def server_delta(before: dict[str, Any], after: dict[str, Any]) -> ServerCounters:
    b, a = _commands(before), _commands(after)
    calls = {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0) and k != "cmdstat_info"}
    infos = a.get("cmdstat_info", 0) - b.get("cmdstat_info", 0)
    processed = int(after["total_commands_processed"]) - int(before["total_commands_processed"])
    return ServerCounters(calls, processed - infos, _cpu(after) - _cpu(before))


def _cpu(info: dict[str, Any]) -> float:
    try:
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    except (KeyError, TypeError, ValueError):
        return math.nan


def server_info(client: redis.Redis) -> dict[str, Any]:
    info: dict[str, Any] = client.info("all")
    return info


def plain_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )


def server_description(url: str) -> str:
    with plain_client(url) as client:
        info = server_info(client)
    if "valkey_version" in info:
        name, version = "valkey", info["valkey_version"]
    else:
        name, version = info.get("server_name", "redis"), info.get("redis_version", "?")
    return f"{name} {version}"


# -- P1, P4: uncontended ---------------------------------------------------------------------


def uncontended_variants(
    contender: Contender,
    target: Target,
    runner: asyncio.Runner,
    stack: ExitStack,
    name: str | None = None,
) -> list[Variant]:
    """ "<label> sync" and "<label> async" acquire+release cycles (for what ``contender`` has),
    connected to ``target``; the clients are closed by ``stack``."""
    name = name or f"{PREFIX}-p1-{slug(contender.label)}"
    found: list[Variant] = []
    if contender.sync is not None:
        locks = contender.sync(target, TTL)
        stack.callback(locks.close)
        lock = locks.lock(name)

        def cycle() -> None:
            if not lock.acquire(timeout=0):
                raise BenchError(f"{contender.label} sync: {name!r} was busy")
            lock.release()

        found.append(Variant(f"{contender.label} sync", partial(time_sync, cycle)))
    if contender.asyncio is not None:
        factory = contender.asyncio

        async def make() -> AsyncLocks:
            return factory(target, TTL)

        alocks = runner.run(make())
        stack.callback(lambda: runner.run(alocks.close()))
        alock = alocks.lock(name)

        async def acycle() -> None:
            if not await alock.acquire(timeout=0):
                raise BenchError(f"{contender.label} async: {name!r} was busy")
            await alock.release()

        found.append(
            Variant(f"{contender.label} async", lambda s: runner.run(time_async(acycle, s)))
        )
    return found


ExtraVariants = Callable[[asyncio.Runner, ExitStack], list[Variant]]


def uncontended(
    target: Target,
    contenders: Sequence[Contender],
    *,
    extra: ExtraVariants | None = None,
    seconds: float,
    repeat: int,
    warmup: float,
    progress: Progress | None = to_stderr,
) -> list[Variant]:
    """P1 (one URL) and P4 (several: Redlock). ``extra`` adds variants of the caller's own (the
    minimal baselines), made on the same event loop."""
    with ExitStack() as stack:
        runner = stack.enter_context(asyncio.Runner())
        variants = [v for c in contenders for v in uncontended_variants(c, target, runner, stack)]
        if extra is not None:
            variants += extra(runner, stack)
        measure(variants, seconds, repeat, warmup, progress)
    return variants


# -- P2: processes ---------------------------------------------------------------------------


@dataclass
class HandoffRun:
    seconds: float
    acquisitions: int  # in the window
    total: int  # every grant, also those that began after the window
    counter: int  # the read-modify-write counter at the end: must equal ``total``
    shares: list[float]  # per worker: its grants in the window / a fair share
    handoffs: list[float]  # s, from one process's release to another's acquire
    same: int  # grants that went back to the process that had just released
    overlaps: int  # a grant that began before the previous one was released: must be 0
    # the server's counters from the start signal until every worker had stopped (so for all
    # ``total`` grants), and the workers' waits by how they ended (``wait_counts``: fencelock)
    server: ServerCounters | None = None
    waits: dict[str, int] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.acquisitions / self.seconds

    @property
    def lost_updates(self) -> int:
        return self.total - self.counter

    def per_grant(self, count: float) -> float:
        return count / self.total if self.total else math.nan

    @property
    def commands_per_acquisition(self) -> float:
        """The lock's commands per grant (INFO commandstats, a script's own commands included),
        without the workload's GET and SET of the counter."""
        if self.server is None:
            return math.nan
        return self.per_grant(self.server.total - COUNTER_COMMANDS * self.total)

    def calls_per_acquisition(self, command: str) -> float:
        """Calls of one command (``evalsha``) per grant; for ``get`` and ``set``, the counter's
        are left out (one each per grant)."""
        if self.server is None:
            return math.nan
        calls = self.server.calls.get(f"cmdstat_{command}", 0)
        if command in ("get", "set"):
            calls -= self.total
        return self.per_grant(calls)

    @property
    def cpu_us_per_acquisition(self) -> float:
        """Server CPU time per grant, microseconds."""
        return math.nan if self.server is None else self.per_grant(1e6 * self.server.cpu)

    def waits_per_acquisition(self, kind: str) -> float:
        """The workers' ``wakeups`` or ``polls`` per grant (NaN: the contender does not count)."""
        return self.per_grant(self.waits[kind]) if kind in self.waits else math.nan


@dataclass
class HandoffResult:
    label: str
    processes: int
    hold: float
    runs: list[HandoffRun] = field(default_factory=list)
    error: str | None = None
    note: str = ""

    @property
    def throughput(self) -> Spread:
        return Spread.of([r.throughput for r in self.runs])

    @property
    def p50(self) -> Spread:
        return Spread.of([percentile(r.handoffs, 50) for r in self.runs if r.handoffs])

    @property
    def p99(self) -> Spread:
        return Spread.of([percentile(r.handoffs, 99) for r in self.runs if r.handoffs])

    @property
    def min_share(self) -> Spread:
        return Spread.of([min(r.shares) for r in self.runs])

    @property
    def lost_updates(self) -> int:
        return sum(r.lost_updates for r in self.runs)

    @property
    def overlaps(self) -> int:
        return sum(r.overlaps for r in self.runs)

    @property
    def handoffs(self) -> int:
        return sum(len(r.handoffs) for r in self.runs)

    @property
    def same_share(self) -> float:
        """The fraction of grants that went back to the process that had just released."""
        grants = sum(len(r.handoffs) + r.same for r in self.runs)
        return sum(r.same for r in self.runs) / grants if grants else math.nan

    @property
    def commands(self) -> Spread:
        """The lock's commands per acquisition (``HandoffRun.commands_per_acquisition``)."""
        return Spread.of(_known([r.commands_per_acquisition for r in self.runs]))

    def calls(self, command: str) -> Spread:
        return Spread.of(_known([r.calls_per_acquisition(command) for r in self.runs]))

    @property
    def server_cpu(self) -> Spread:
        """Server CPU microseconds per acquisition."""
        return Spread.of(_known([r.cpu_us_per_acquisition for r in self.runs]))

    def waits(self, kind: str) -> Spread:
        return Spread.of(_known([r.waits_per_acquisition(kind) for r in self.runs]))

    def per_command(self) -> dict[str, float]:
        """Median calls per acquisition of each command the server ran (the counter's GET and
        SET left out)."""
        names = {k.removeprefix("cmdstat_") for r in self.runs if r.server for k in r.server.calls}
        found = {k: self.calls(k).median for k in sorted(names)}
        return {k: v for k, v in found.items() if v > 0}


def _known(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _handoff_worker(
    factory: SyncFactory,
    url: str,
    name: str,
    hold: float,
    ready: Any,  # multiprocessing Barrier
    go: Any,  # multiprocessing Event
    window: Any,  # multiprocessing Array("d", 2): start, end (monotonic)
    out: Any,  # multiprocessing Queue
    index: int,
) -> None:
    """One P2 process: warm up, wait for the start, then acquire, GET/+1/SET the counter, hold
    until ``hold`` after the grant, release; until the window ends. Sends back its
    (acquired_at, release_called_at) pairs, and its waits in the window by how they ended when
    the contender counts them (``wait_counts()``)."""
    records: list[tuple[float, float]] = []
    waits: dict[str, int] = {}
    try:
        with ExitStack() as stack:
            locks = factory(url, TTL)
            stack.callback(locks.close)
            plain = stack.enter_context(plain_client(url))
            lock = locks.lock(name)
            wait_counts: Callable[[], dict[str, int]] | None = getattr(locks, "wait_counts", None)
            plain.ping()
            if not lock.acquire(timeout=READY_TIMEOUT):  # warm-up: connections made, scripts cached
                raise BenchError(f"{name!r} not acquired in {READY_TIMEOUT:g} s at warm-up")
            lock.release()
            ready.wait(READY_TIMEOUT)
            if not go.wait(READY_TIMEOUT):
                raise BenchError("no start signal")
            end = window[1]
            waits0 = wait_counts() if wait_counts is not None else {}
            while (left := end - time.monotonic()) > 0:
                if not lock.acquire(timeout=left):
                    break
                acquired = time.monotonic()
                value = int(plain.get(COUNTER_KEY) or 0)
                plain.set(COUNTER_KEY, value + 1)
                rest = acquired + hold - time.monotonic()
                if rest > 0:
                    time.sleep(rest)
                released = time.monotonic()
                lock.release()
                records.append((acquired, released))
            if wait_counts is not None:
                waits = {k: v - waits0.get(k, 0) for k, v in wait_counts().items()}
        out.put((index, records, None, waits))
    except BaseException as exc:
        ready.abort()  # the others (and the parent) stop waiting for this one
        out.put((index, records, f"{type(exc).__name__}: {exc}", waits))


def merge_handoffs(
    per_worker: Sequence[Sequence[tuple[float, float]]], start: float, end: float, counter: int
) -> HandoffRun:
    grants = sorted((acq, rel, w) for w, records in enumerate(per_worker) for acq, rel in records)
    seconds = end - start
    in_window = [g for g in grants if start <= g[0] < end]
    counts = [0] * len(per_worker)
    for _, _, w in in_window:
        counts[w] += 1
    fair = len(in_window) / len(per_worker)
    handoffs: list[float] = []
    same = overlaps = 0
    for (_, released, before), (acquired, _, after) in pairwise(grants):
        if acquired < released:
            overlaps += 1
        if before == after:
            same += 1
        else:
            handoffs.append(acquired - released)
    return HandoffRun(
        seconds=seconds,
        acquisitions=len(in_window),
        total=len(grants),
        counter=counter,
        shares=[c / fair if fair else 0.0 for c in counts],
        handoffs=handoffs,
        same=same,
        overlaps=overlaps,
    )


def handoff_run(
    factory: SyncFactory, url: str, name: str, processes: int, hold: float, seconds: float
) -> HandoffRun:
    """One P2 run: ``processes`` spawned workers contend for ``name`` for ``seconds``."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(processes + 1)
    go = ctx.Event()
    window = ctx.Array("d", 2)
    out = ctx.Queue()
    workers = [
        ctx.Process(
            target=_handoff_worker,
            args=(factory, url, name, hold, ready, go, window, out, i),
            daemon=True,
        )
        for i in range(processes)
    ]
    with plain_client(url) as plain:
        try:
            for worker in workers:
                worker.start()
            try:
                ready.wait(READY_TIMEOUT)
            except threading.BrokenBarrierError:
                errors = [out.get(timeout=READY_TIMEOUT)[2] for _ in workers]
                raise BenchError("; ".join(sorted({e for e in errors if e}))) from None
            plain.delete(COUNTER_KEY)
            info0 = server_info(plain)
            start = time.monotonic()
            window[0], window[1] = start, start + seconds
            go.set()
            results = sorted(
                (out.get(timeout=seconds + READY_TIMEOUT) for _ in workers), key=lambda r: r[0]
            )
            # every worker has closed its client: each of its grants' commands is counted
            server = server_delta(info0, server_info(plain))
            errors = [error for _, _, error, _ in results if error]
            if errors:
                raise BenchError("; ".join(sorted(set(errors))))
            counter = int(plain.get(COUNTER_KEY) or 0)
        finally:
            for worker in workers:
                worker.join(READY_TIMEOUT)
                if worker.is_alive():
                    worker.kill()
                    worker.join()
            plain.delete(COUNTER_KEY)
    run = merge_handoffs([records for _, records, _, _ in results], start, start + seconds, counter)
    run.server = server
    for _, _, _, waits in results:
        for kind, count in waits.items():
            run.waits[kind] = run.waits.get(kind, 0) + count
    return run


def handoffs(
    url: str,
    contenders: Sequence[Contender],
    *,
    processes: int = 4,
    hold: float = 0.001,
    seconds: float,
    repeat: int,
    progress: Progress | None = to_stderr,
) -> list[HandoffResult]:
    """P2. A contender whose run fails is reported with its error, the others carry on."""
    results = {
        c.label: HandoffResult(c.label, processes, hold, note=c.note)
        for c in contenders
        if c.sync is not None
    }
    todo = [c for c in contenders if c.sync is not None]
    for repetition in range(repeat):
        for contender in order_for(repetition, todo):
            result = results[contender.label]
            if result.error is not None:
                continue
            assert contender.sync is not None
            name = f"{PREFIX}-p2-{slug(contender.label)}"
            try:
                result.runs.append(handoff_run(contender.sync, url, name, processes, hold, seconds))
            except Exception as exc:
                result.error = f"{type(exc).__name__}: {exc}"
            if progress is not None:
                progress(
                    f"  P2 run {repetition + 1}/{repeat}: {result.label}:"
                    f" {describe_handoff(result)}"
                )
    return list(results.values())


# -- P3: threads and tasks -------------------------------------------------------------------


@dataclass
class LocalRun:
    seconds: float
    acquisitions: int
    shares: list[float]
    lost_updates: int
    server: ServerCounters

    @property
    def throughput(self) -> float:
        return self.acquisitions / self.seconds

    @property
    def commands_per_acquisition(self) -> float:
        return self.server.total / self.acquisitions if self.acquisitions else math.nan

    @property
    def processed_per_acquisition(self) -> float:
        return self.server.processed / self.acquisitions if self.acquisitions else math.nan


@dataclass
class LocalResult:
    label: str
    mode: str  # "threads" or "tasks"
    workers: int
    runs: list[LocalRun] = field(default_factory=list)
    error: str | None = None
    note: str = ""

    @property
    def throughput(self) -> Spread:
        return Spread.of([r.throughput for r in self.runs])

    @property
    def commands(self) -> Spread:
        return Spread.of([r.commands_per_acquisition for r in self.runs])

    @property
    def processed(self) -> Spread:
        return Spread.of([r.processed_per_acquisition for r in self.runs])

    @property
    def min_share(self) -> Spread:
        return Spread.of([min(r.shares) for r in self.runs])

    @property
    def lost_updates(self) -> int:
        return sum(r.lost_updates for r in self.runs)

    def per_command(self) -> dict[str, float]:
        """Median calls per acquisition of each command (``evalsha``: 1.02, ...)."""
        names = {k for r in self.runs for k in r.server.calls}
        return {
            k.removeprefix("cmdstat_"): statistics.median(
                r.server.calls.get(k, 0) / r.acquisitions if r.acquisitions else math.nan
                for r in self.runs
            )
            for k in sorted(names)
        }


def _local_run(
    counts: list[int],
    url: str,
    begin: float,
    end: float,
    sleep: Callable[[float], None],
) -> LocalRun:
    """Snapshot the counts and the server's counters at ``begin`` and ``end`` (monotonic)."""
    with plain_client(url) as plain:
        sleep(begin - time.monotonic())
        counts0, info0 = list(counts), server_info(plain)
        sleep(end - time.monotonic())
        counts1, info1 = list(counts), server_info(plain)
    done = [b - a for a, b in zip(counts0, counts1, strict=True)]
    fair = sum(done) / len(done)
    return LocalRun(
        seconds=end - begin,
        acquisitions=sum(done),
        shares=[d / fair if fair else 0.0 for d in done],
        lost_updates=0,
        server=server_delta(info0, info1),
    )


def threads_run(
    factory: SyncFactory, url: str, name: str, workers: int, seconds: float, warmup: float
) -> LocalRun:
    """One P3 run: ``workers`` threads, one client, one lock object each."""
    counts = [0] * workers
    shared = [0]
    errors: list[str] = []
    start = time.monotonic()
    begin, end = start + warmup, start + warmup + seconds
    locks = factory(url, TTL)
    try:

        def work(index: int) -> None:
            lock = locks.lock(name)
            try:
                while (left := end - time.monotonic()) > 0:
                    if not lock.acquire(timeout=left):
                        break
                    value = shared[0]  # read, let the others run, write: a lost update shows
                    time.sleep(0)
                    shared[0] = value + 1
                    counts[index] += 1
                    lock.release()
            except BaseException as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
        for thread in threads:
            thread.start()
        try:
            run = _local_run(counts, url, begin, end, lambda s: time.sleep(max(s, 0)))
        finally:
            for thread in threads:
                thread.join(READY_TIMEOUT)
    finally:
        locks.close()
    if errors:
        raise BenchError("; ".join(sorted(set(errors))))
    run.lost_updates = sum(counts) - shared[0]
    return run


def tasks_run(
    factory: AsyncFactory, url: str, name: str, workers: int, seconds: float, warmup: float
) -> LocalRun:
    """One P3 run with asyncio: ``workers`` tasks on one event loop, one client."""

    async def main() -> LocalRun:
        counts = [0] * workers
        shared = [0]
        start = time.monotonic()
        begin, end = start + warmup, start + warmup + seconds
        locks = factory(url, TTL)
        try:

            async def work(index: int) -> None:
                lock = locks.lock(name)
                while (left := end - time.monotonic()) > 0:
                    if not await lock.acquire(timeout=left):
                        break
                    value = shared[0]
                    await asyncio.sleep(0)
                    shared[0] = value + 1
                    counts[index] += 1
                    await lock.release()

            async def snapshots() -> LocalRun:
                plain = redis.asyncio.Redis.from_url(
                    url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
                )
                try:
                    await asyncio.sleep(max(begin - time.monotonic(), 0))
                    counts0, info0 = list(counts), await plain.info("all")
                    await asyncio.sleep(max(end - time.monotonic(), 0))
                    counts1, info1 = list(counts), await plain.info("all")
                finally:
                    await plain.aclose()
                done = [b - a for a, b in zip(counts0, counts1, strict=True)]
                fair = sum(done) / len(done)
                return LocalRun(
                    seconds=end - begin,
                    acquisitions=sum(done),
                    shares=[d / fair if fair else 0.0 for d in done],
                    lost_updates=0,
                    server=server_delta(info0, info1),
                )

            tasks = [asyncio.ensure_future(work(i)) for i in range(workers)]
            run = await snapshots()
            for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise BenchError(f"{type(outcome).__name__}: {outcome}") from outcome
            run.lost_updates = sum(counts) - shared[0]
            return run
        finally:
            await locks.close()

    return asyncio.run(main())


def local_contention(
    url: str,
    contenders: Sequence[Contender],
    *,
    workers: int = 8,
    seconds: float,
    repeat: int,
    warmup: float,
    progress: Progress | None = to_stderr,
) -> list[LocalResult]:
    """P3: for each contender, its threads (sync) and its tasks (asyncio)."""
    jobs: list[tuple[Contender, str]] = [
        (c, mode)
        for c in contenders
        for mode, factory in (("threads", c.sync), ("tasks", c.asyncio))
        if factory is not None
    ]
    results = {
        (c.label, mode): LocalResult(c.label, mode, workers, note=c.note) for c, mode in jobs
    }
    for repetition in range(repeat):
        for contender, mode in order_for(repetition, jobs):
            result = results[contender.label, mode]
            if result.error is not None:
                continue
            name = f"{PREFIX}-p3-{slug(contender.label)}-{mode}"
            gc.collect()
            try:
                if mode == "threads":
                    assert contender.sync is not None
                    run = threads_run(contender.sync, url, name, workers, seconds, warmup)
                else:
                    assert contender.asyncio is not None
                    run = tasks_run(contender.asyncio, url, name, workers, seconds, warmup)
                result.runs.append(run)
            except Exception as exc:
                result.error = f"{type(exc).__name__}: {exc}"
            if progress is not None:
                progress(
                    f"  P3 run {repetition + 1}/{repeat}: {result.label} {mode}:"
                    f" {describe_local(result)}"
                )
    return list(results.values())


# -- P5: many auto-renewed locks -------------------------------------------------------------


@dataclass
class RenewalResult:
    label: str
    locks: int
    ttl: float
    period: float  # the contender's renewal interval, s
    window: float = 0.0
    acquired_in: float = 0.0
    requests: int = 0  # script calls (EVAL/EVALSHA/FCALL) the server got in the window
    commands: int = 0  # every command it ran in the window (scripts' own commands included)
    missed: int = 0  # lock keys gone at the end, or locks the library declared lost
    threads: int = 0  # threads the client added
    tasks: int = 0  # asyncio tasks it added
    # fencelock: the watchdog's own counts (script calls, leases renewed, leases lost)
    internal: tuple[int, int, int] | None = None
    background_errors: int = 0  # exceptions that ended a thread, or that no task retrieved
    first_error: str | None = None
    error: str | None = None
    note: str = ""

    @property
    def periods(self) -> float:
        return self.window / self.period if self.period else math.nan

    @property
    def per_period(self) -> float:
        return self.requests / self.periods if self.periods else math.nan

    @property
    def per_100_locks(self) -> float:
        return 100 * self.per_period / self.locks if self.locks else math.nan


def _count_missing(plain: redis.Redis, keys: Sequence[str]) -> int:
    missing = 0
    for start in range(0, len(keys), 1000):
        with plain.pipeline(transaction=False) as pipe:
            for key in keys[start : start + 1000]:
                pipe.exists(key)
            missing += sum(1 for found in pipe.execute() if not found)
    return missing


# P5: renewal periods waited after the last acquisition, before the window opens
SETTLE_PERIODS = 2


def renewal(
    url: str,
    contender: Contender,
    *,
    locks: int = 10_000,
    ttl: float = RENEW_TTL,
    seconds: float = 10.0,
    progress: Progress | None = to_stderr,
) -> RenewalResult:
    """P5: hold ``locks`` auto-renewed locks on one client for ``seconds``; count what reaches
    the server. Sync contenders run here; asyncio ones on an event loop that runs during the
    window (their renewals are tasks)."""
    assert contender.renew_every is not None, f"{contender.label} does not renew"
    result = RenewalResult(contender.label, locks, ttl, ttl * contender.renew_every)
    result.note = contender.note
    # a whole number of renewal periods: each lock renews as often whatever its phase
    seconds = result.period * max(1, round(seconds / result.period))
    errors: list[str] = []

    def thread_died(hook: threading.ExceptHookArgs) -> None:
        errors.append(f"{hook.exc_type.__name__}: {hook.exc_value}")

    def task_failed(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        errors.append(str(context.get("exception") or context.get("message")))

    previous_hook = threading.excepthook
    threading.excepthook = thread_died
    names = [f"{PREFIX}-p5-{slug(contender.label)}-{i}" for i in range(locks)]
    keys = contender.keys or (lambda n: [n])
    with ExitStack() as stack:
        plain = stack.enter_context(plain_client(url))
        runner = stack.enter_context(asyncio.Runner())
        stack.callback(setattr, threading, "excepthook", previous_hook)
        runner.get_loop().set_exception_handler(task_failed)

        async def task_count() -> int:
            return len(asyncio.all_tasks()) - 1

        if contender.sync is not None:
            client = contender.sync(url, ttl)
            sleep: Callable[[float], None] = time.sleep
        elif contender.asyncio is not None:
            client = _on_loop(runner, contender.asyncio, url, ttl)

            def sleep(seconds: float) -> None:
                runner.run(asyncio.sleep(seconds))
        else:
            raise BenchError(f"{contender.label}: no client")
        stack.callback(client.close)
        threads0, tasks0 = threading.active_count(), runner.run(task_count())
        held: list[SyncLockLike] = []
        try:
            started = time.monotonic()
            for name in names:
                lock = client.lock(name)
                if not lock.acquire(timeout=0):
                    raise BenchError(f"{name!r} was busy")
                held.append(lock)
            result.acquired_in = time.monotonic() - started
            if progress is not None:
                progress(f"  P5 {contender.label}: {locks} locks held, watching {seconds:g} s")
            # Settle first: the leases were taken one after another, and their renewals fall
            # into shared batches over the first periods. The window counts the steady state.
            sleep(SETTLE_PERIODS * result.period)
            stats = _watchdog_stats(client)
            internal0 = _internal(stats)
            info0, t0 = server_info(plain), time.monotonic()
            sleep(seconds)
            info1, t1 = server_info(plain), time.monotonic()
            delta = server_delta(info0, info1)
            result.window = t1 - t0
            result.requests, result.commands = delta.script_calls, delta.processed
            result.threads = threading.active_count() - threads0
            result.tasks = runner.run(task_count()) - tasks0
            internal1 = _internal(stats)
            if internal0 is not None and internal1 is not None:
                result.internal = (
                    internal1[0] - internal0[0],
                    internal1[1] - internal0[1],
                    internal1[2] - internal0[2],
                )
            declared = sum(1 for lock in held if getattr(_inner(lock), "lost", False))
            gone = _count_missing(plain, [keys(name)[0] for name in names])
            result.missed = max(declared, gone)
            result.background_errors = len(errors)
            result.first_error = errors[0] if errors else None
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            for lock in held:
                with suppress(Exception):  # a lost lease: counted above
                    lock.release()
            _delete(plain, [k for name in names for k in keys(name)])
    return result


def _inner(lock: SyncLockLike) -> object:
    return lock.inner if isinstance(lock, _OnLoop) else lock


def _watchdog_stats(client: SyncLocks) -> Any:
    """fencelock's own count of renew script calls, when the client is fencelock's (a
    cross-check of the server's count; private, so looked up defensively)."""
    inner = client.inner if isinstance(client, _LocksOnLoop) else client
    if isinstance(inner, FencelockLocks | FencelockAsyncLocks):
        return getattr(getattr(inner.client, "_watchdog", None), "stats", None)
    return None


def _internal(stats: Any) -> tuple[int, int, int] | None:
    try:
        return int(stats.calls), int(stats.renewed), int(stats.lost)
    except (AttributeError, TypeError, ValueError):
        return None


def _delete(plain: redis.Redis, keys: Sequence[str]) -> None:
    for start in range(0, len(keys), 1000):
        plain.delete(*keys[start : start + 1000])


# -- P6: memory ------------------------------------------------------------------------------


@dataclass
class MemoryResult:
    label: str
    locks: int
    per_key: dict[str, float] = field(default_factory=dict)  # key pattern -> bytes per lock
    used_memory: float = math.nan  # growth of INFO used_memory per lock
    left_behind: dict[str, float] = field(default_factory=dict)  # after release: key -> share
    error: str | None = None
    note: str = ""

    @property
    def lock_key(self) -> float:
        """``MEMORY USAGE`` of the lock's first key (its lock key) per lock."""
        return next(iter(self.per_key.values()), math.nan)

    @property
    def total(self) -> float:
        return sum(self.per_key.values()) if self.per_key else math.nan


def memory(
    url: str, contender: Contender, *, locks: int = 1000, progress: Progress | None = to_stderr
) -> MemoryResult:
    """P6: hold ``locks`` locks of ``contender`` at once; the memory they take in Redis."""
    result = MemoryResult(contender.label, locks, note=contender.note)
    if contender.keys is None:
        result.error = "no key naming known"
        return result
    keys = contender.keys
    marker = secrets.token_hex(2)
    names = [f"job{marker}{i:05d}" for i in range(locks)]  # 12 characters, like "nightly-job1"
    with ExitStack() as stack:
        plain = stack.enter_context(plain_client(url))
        runner = stack.enter_context(asyncio.Runner())
        if contender.sync is not None:
            client = contender.sync(url, TTL)
        elif contender.asyncio is not None:
            client = _on_loop(runner, contender.asyncio, url, TTL)
        else:
            raise BenchError(f"{contender.label}: no client")
        stack.callback(client.close)
        held: list[SyncLockLike] = []
        try:
            warm = client.lock(f"{PREFIX}-p6-{marker}")  # connections, scripts
            if not warm.acquire(timeout=0):
                raise BenchError("warm-up lock busy")
            warm.release()
            _delete(plain, keys(f"{PREFIX}-p6-{marker}"))
            gc.collect()
            before = int(server_info(plain)["used_memory"])
            for name in names:
                lock = client.lock(name)
                if not lock.acquire(timeout=0):
                    raise BenchError(f"{name!r} was busy")
                held.append(lock)
            after = int(server_info(plain)["used_memory"])
            result.used_memory = (after - before) / locks
            sizes: dict[str, list[int]] = {}
            for name in names:
                with plain.pipeline(transaction=False) as pipe:
                    own = keys(name)
                    for key in own:
                        pipe.memory_usage(key, samples=0)
                    for key, size in zip(own, pipe.execute(), strict=True):
                        if size is not None:
                            sizes.setdefault(key.replace(name, "NAME"), []).append(int(size))
            result.per_key = {pattern: sum(v) / locks for pattern, v in sizes.items()}
            for lock in held:
                lock.release()
            held.clear()
            for i, key in enumerate(keys(names[0])):
                there = len(names) - _count_missing(plain, [keys(n)[i] for n in names])
                if there:
                    result.left_behind[key.replace(names[0], "NAME")] = there / locks
            if progress is not None:
                progress(f"  P6 {contender.label}: {result.total:.0f} B per lock")
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            for lock in held:
                with suppress(Exception):
                    lock.release()
            _delete(plain, [k for name in names for k in keys(name)])
    return result


# -- describing results (the CLI's table; bench.compare makes Markdown of the same objects) ----


def rate(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{1e3 * seconds:.2f} ms"


def spread_text(s: Spread, fmt: Callable[[float], str] = rate) -> str:
    return f"{fmt(s.median)} ({fmt(s.low)}-{fmt(s.high)})"


def describe_variant(v: Variant) -> str:
    s = Spread.of(v.rates)
    return f"{spread_text(s)} acquire+release/s, noise {100 * s.noise:.0f}%"


def describe_handoff(r: HandoffResult) -> str:
    if r.error:
        return f"failed: {r.error}"
    if not r.runs:
        return "no runs"
    return (
        f"{spread_text(r.throughput)} acquisitions/s; hand-off p50 {ms(r.p50.median)},"
        f" p99 {ms(r.p99.median)} ({r.handoffs} hand-offs, {100 * r.same_share:.0f}% re-taken"
        f" by the releaser); min share {r.min_share.median:.2f}; lost updates {r.lost_updates}"
    )


def describe_local(r: LocalResult) -> str:
    if r.error:
        return f"failed: {r.error}"
    if not r.runs:
        return "no runs"
    return (
        f"{spread_text(r.throughput)} acquisitions/s; {r.commands.median:.2f} commands"
        f" (commandstats; {r.processed.median:.2f} total_commands_processed) per acquisition;"
        f" min share {r.min_share.median:.2f}; lost updates {r.lost_updates}"
    )


def describe_renewal(r: RenewalResult) -> str:
    if r.error:
        return f"failed: {r.error}"
    return (
        f"{r.locks:,} locks, ttl {r.ttl:g} s: {r.per_period:,.1f} renewal calls per period"
        f" of {r.period:g} s ({r.per_100_locks:.2f} per 100 locks); missed {r.missed};"
        f" +{r.threads} threads, +{r.tasks} tasks"
        + (
            f"; {r.background_errors} errors in the background, first: {r.first_error}"
            if r.background_errors
            else ""
        )
    )


def describe_memory(r: MemoryResult) -> str:
    if r.error:
        return f"failed: {r.error}"
    parts = ", ".join(f"{k} {v:.0f} B" for k, v in r.per_key.items())
    left = ", ".join(f"{k} ({100 * v:.0f}%)" for k, v in r.left_behind.items()) or "nothing"
    return (
        f"{r.total:.0f} B per held lock ({parts}); used_memory +{r.used_memory:.0f} B per lock;"
        f" left after release: {left}"
    )


# -- fencelock bench -------------------------------------------------------------------------


@dataclass
class Options:
    url: str
    redlock: list[str] = field(default_factory=list)
    workloads: Sequence[str] = WORKLOADS
    seconds: float = 1.0
    repeat: int = 3
    warmup: float = 0.3
    processes: int = 4
    threads: int = 8
    hold: float = 0.001
    locks: int = 10_000
    renew_ttl: float = RENEW_TTL
    renew_seconds: float = 10.0
    memory_locks: int = 1000
    node_timeout: float | None = None  # P4's (None: the library's default)


def run_fencelock(options: Options, out: Callable[[str], None] = print) -> int:
    """``fencelock bench``: fencelock's side of every workload against ``options.url``; one
    table line per result. Returns the exit status (0)."""
    o = options
    out(f"server:  {server_description(o.url)} at {o.url}")
    out(
        f"runs:    {o.repeat} x {o.seconds:g} s per variant after {o.warmup:g} s of warm-up;"
        " medians (min-max)"
    )
    width = 38
    out(f"\n{'':<4}{'workload':<{width}}result")

    def line(workload: str, what: str, text: str) -> None:
        out(f"{workload:<4}{what:<{width}}{text}")

    if "P1" in o.workloads:
        for v in uncontended(o.url, [FENCELOCK], seconds=o.seconds, repeat=o.repeat,
                             warmup=o.warmup):  # fmt: skip
            mode = "sync" if v.name.endswith(" sync") else "asyncio"
            line("P1", f"uncontended, {mode}", describe_variant(v))
    if "P2" in o.workloads:
        (r2,) = handoffs(o.url, [FENCELOCK], processes=o.processes, hold=o.hold,
                         seconds=o.seconds, repeat=o.repeat)  # fmt: skip
        line("P2", f"{o.processes} processes, 1 name, hold {1e3 * o.hold:g} ms",
             describe_handoff(r2))  # fmt: skip
    if "P3" in o.workloads:
        for r3 in local_contention(o.url, [FENCELOCK], workers=o.threads, seconds=o.seconds,
                                   repeat=o.repeat, warmup=o.warmup):  # fmt: skip
            what = "threads" if r3.mode == "threads" else "asyncio tasks"
            line("P3", f"{o.threads} {what}, 1 process, 1 name", describe_local(r3))
    if "P4" in o.workloads:
        if o.redlock:
            redlock = FENCELOCK
            if o.node_timeout is not None:
                given = {"node_timeout": o.node_timeout}
                redlock = Contender(
                    "fencelock",
                    partial(FencelockLocks, client_options=given),
                    partial(FencelockAsyncLocks, client_options=given),
                    fencelock_keys,
                )
            for v in uncontended(o.redlock, [redlock], seconds=o.seconds, repeat=o.repeat,
                                 warmup=o.warmup):  # fmt: skip
                mode = "sync" if v.name.endswith(" sync") else "asyncio"
                line("P4", f"Redlock over {len(o.redlock)} masters, {mode}", describe_variant(v))
        else:
            line("P4", "Redlock, uncontended", "skipped: give --redlock URL for each master")
    if "P5" in o.workloads:
        r5 = renewal(o.url, FENCELOCK_RENEWING, locks=o.locks, ttl=o.renew_ttl,
                     seconds=o.renew_seconds)  # fmt: skip
        line("P5", f"{o.locks:,} auto-renewed locks, 1 client", describe_renewal(r5))
    if "P6" in o.workloads:
        for contender in (FENCELOCK, FENCELOCK_REENTRANT):
            r6 = memory(o.url, contender, locks=o.memory_locks)
            kind = "reentrant" if contender is FENCELOCK_REENTRANT else "simple"
            line("P6", f"memory per held lock, {kind}", describe_memory(r6))
    _cleanup(o)
    return 0


def _cleanup(o: Options) -> None:
    """Delete the fencing counters of the names the workloads used."""
    names = [f"{PREFIX}-p1-fencelock", f"{PREFIX}-p2-fencelock"]
    names += [f"{PREFIX}-p3-fencelock-{mode}" for mode in ("threads", "tasks")]
    with plain_client(o.url) as plain:
        plain.delete(*[LockKeys.for_name(n).fence for n in names])
    for url in o.redlock:
        with plain_client(url) as plain:
            plain.delete(LockKeys.for_name(f"{PREFIX}-p1-fencelock").fence)
