"""``fencelock demo``: watch fencing tokens stop a paused lock holder from corrupting data.

Several worker processes contend for one lock and, while holding it, do a read-modify-write on a
counter (GET, +1, ``fenced_set`` with the lock's token). Meanwhile a "victim" process takes the
same lock with a short lease, reads the counter, and is frozen with SIGSTOP for twice its lease:
its lease expires, the others carry on with larger tokens, and when it is resumed its stale write
is refused (``StaleToken``) and ``lock.check()`` raises ``LockLost``. The summary then checks the
history the processes recorded for violations (lost updates, accepted stale writes, duplicate
tokens) and reports hand-off latency.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import sys
import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from itertools import accumulate, pairwise
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.queues import Queue
from queue import Empty
from types import FrameType
from typing import Any, TextIO

import redis

from fencelock import LockClient, LockLost, StaleToken

from .servers.embedded import EmbeddedServer, ServerNotFound

WORKER_TTL = 2.0  # long enough that a busy machine never expires a worker's lease
VICTIM_TTL = 1.0
FREEZE = 2 * VICTIM_TTL  # well past the victim's lease, so the others must take over
ACQUIRE_WAIT = 0.25  # bounds how long a worker takes to notice the stop event
THINK = 0.001  # max pause between a release and the next try: lets waiters win hand-offs
READY_TIMEOUT = 30.0  # spawned interpreters import redis; a loaded CI box can be slow
VICTIM_DEADLINE = 15.0  # the whole freeze story must be over this long after it starts
REFRESH_LIVE = 0.2
REFRESH_PLAIN = 1.0
TICK = 0.05
POLL = 0.01  # how often a child looks at a flag it waits for

# Indices of Shared.flags.
START, STOP, VICTIM_GO, VICTIM_HOLDING, VICTIM_RESUME, VICTIM_TOKEN, VICTIM_READ = range(7)


# -- what the processes record and send back ------------------------------------------------


@dataclass(slots=True)
class VictimReport:
    token: int
    read: int  # the counter value it read before the freeze
    written_at: float = 0.0  # monotonic time of its write attempt after the freeze
    refused_seen: int | None = None  # set when its write was refused: the token already seen
    check_error: str | None = None  # the LockLost message from lock.check(), if raised


@dataclass(slots=True)
class WorkerResult:
    slot: int
    # (token, acquired_at, released_at); released_at None: the lease was gone at release
    grants: list[tuple[int, float, float | None]] = field(default_factory=list)
    # accepted fenced writes: (token, value, sent_at, done_at)
    writes: list[tuple[int, int, float, float]] = field(default_factory=list)
    refused: int = 0  # writes refused with StaleToken
    lost: int = 0  # releases that found the lease already gone
    error: str | None = None
    victim: VictimReport | None = None


@dataclass(frozen=True, slots=True)
class Config:
    url: str
    lock_name: str
    counter_key: str
    parent_pid: int
    hard_deadline: float  # monotonic: a worker gives up even if nobody tells it to stop


class Words:
    """64-bit integers in shared memory, without a lock: each word has one writer, and an aligned
    64-bit store is atomic, so a reader sees the old value or the new one."""

    def __init__(self, ctx: SpawnContext, size: int) -> None:
        self._array: Any = ctx.RawArray("q", size)

    def __getitem__(self, index: int) -> int:
        return int(self._array[index])

    def __setitem__(self, index: int, value: int) -> None:
        self._array[index] = value

    def values(self) -> list[int]:
        return list(self._array)


@dataclass(slots=True)
class Shared:
    """What the parent shares with its children (handed over when they are spawned).

    Flags are lock-free words polled every few ms, not multiprocessing Events or locked Values: a
    child frozen by SIGSTOP (or killed) inside ``Event.wait`` or while holding a lock makes the
    parent's next ``Event.set`` or locked read block until it resumes, or forever.
    """

    flags: Words  # indexed by START, STOP, ...; each written by one side only
    ready: Words  # per slot
    counts: Words  # acquisitions per slot
    last_token: Words  # per slot
    results: Queue[WorkerResult]

    @classmethod
    def create(cls, ctx: SpawnContext, slots: int) -> Shared:
        return cls(
            Words(ctx, 7), Words(ctx, slots), Words(ctx, slots), Words(ctx, slots), ctx.Queue()
        )

    def wait(self, flag: int, give_up: Callable[[], bool]) -> bool:
        """Wait until ``flags[flag]`` is set (True) or ``give_up()`` (False)."""
        while not self.flags[flag]:
            if give_up():
                return False
            time.sleep(POLL)
        return True


def _read_counter(server: redis.Redis, key: str) -> int:
    value = server.get(key)
    return int(value) if value is not None else 0


def _process_main(
    body: Callable[[LockClient, redis.Redis, WorkerResult], None],
    slot: int,
    cfg: Config,
    shared: Shared,
) -> None:
    result = WorkerResult(slot)
    client = LockClient.from_url(cfg.url)
    # the counter is read directly (fenced_set writes it)
    server = redis.Redis.from_url(cfg.url, socket_timeout=5, socket_connect_timeout=5)
    try:
        server.ping()
        shared.ready[slot] = 1
        if shared.wait(START, lambda: not _running(cfg, shared)):
            body(client, server, result)
    except Exception as exc:  # reported to the parent, which prints it and fails the demo
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        # Report first: closing the client can take a moment (its pub/sub listener winds down).
        shared.results.put(result)
        client.close()
        server.close()


def _running(cfg: Config, shared: Shared) -> bool:
    # The parent's pid changing means it died without stopping us: do not linger as an orphan.
    return (
        not shared.flags[STOP]
        and os.getppid() == cfg.parent_pid
        and time.monotonic() < cfg.hard_deadline
    )


def worker_main(slot: int, cfg: Config, shared: Shared) -> None:
    def body(client: LockClient, server: redis.Redis, result: WorkerResult) -> None:
        lock = client.lock(cfg.lock_name, ttl=WORKER_TTL, timeout=ACQUIRE_WAIT)
        while _running(cfg, shared):
            if not lock.acquire():
                continue
            acquired_at = time.monotonic()
            token = lock.token
            shared.counts[slot] += 1
            shared.last_token[slot] = token
            try:
                value = _read_counter(server, cfg.counter_key) + 1
                sent_at = time.monotonic()
                try:
                    client.fenced_set(cfg.counter_key, value, token)
                    result.writes.append((token, value, sent_at, time.monotonic()))
                except StaleToken:
                    result.refused += 1
            finally:
                released_at: float | None = time.monotonic()
                try:
                    lock.release()
                except LockLost:
                    result.lost += 1
                    released_at = None
                result.grants.append((token, acquired_at, released_at))
            time.sleep(random.uniform(0, THINK))

    _process_main(body, slot, cfg, shared)


def victim_main(slot: int, cfg: Config, shared: Shared) -> None:
    def body(client: LockClient, server: redis.Redis, result: WorkerResult) -> None:
        if not shared.wait(VICTIM_GO, lambda: not _running(cfg, shared)):
            return
        lock = client.lock(cfg.lock_name, ttl=VICTIM_TTL, timeout=5.0)
        if not lock.acquire():
            raise RuntimeError("the victim could not acquire the lock within 5 s")
        acquired_at = time.monotonic()
        token = lock.token
        read = _read_counter(server, cfg.counter_key)
        report = result.victim = VictimReport(token, read)
        shared.counts[slot] += 1
        shared.last_token[slot] = token
        shared.flags[VICTIM_TOKEN] = token
        shared.flags[VICTIM_READ] = read
        shared.flags[VICTIM_HOLDING] = 1
        # The parent SIGSTOPs us now. Waiting here only makes the demo deterministic: without it
        # the write below could run before the SIGSTOP lands. A real pause (GC, swap, VM
        # migration) strikes at any instruction, with the same outcome.
        if not shared.wait(VICTIM_RESUME, lambda: not _running(cfg, shared)):
            return
        sent_at = report.written_at = time.monotonic()
        try:
            client.fenced_set(cfg.counter_key, read + 1, token)
            result.writes.append((token, read + 1, sent_at, time.monotonic()))
        except StaleToken as exc:
            result.refused += 1
            report.refused_seen = exc.seen
        try:
            lock.check()
        except LockLost as exc:
            report.check_error = str(exc)
        try:
            lock.release()
            result.grants.append((token, acquired_at, time.monotonic()))
        except LockLost:  # expected too: the lease had expired
            result.lost += 1
            result.grants.append((token, acquired_at, None))

    _process_main(body, slot, cfg, shared)


# -- checking the recorded history ----------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted ``values``."""
    if not values:
        return float("nan")
    rank = max(1, -(-len(values) * p // 100))
    return values[int(rank) - 1]


@dataclass(slots=True)
class Analysis:
    acquisitions: list[int]
    handoffs: list[float]  # seconds from a release to the next grant, to another process
    accepted: int
    final_counter: int
    duplicate_tokens: int
    lost_updates: int
    stale_accepted: int

    @property
    def counter_mismatch(self) -> int:
        return int(self.final_counter != self.accepted)

    @property
    def violations(self) -> int:
        return (
            self.duplicate_tokens + self.lost_updates + self.stale_accepted + self.counter_mismatch
        )


def analyse(results: Sequence[WorkerResult], slots: int, final_counter: int) -> Analysis:
    grants = sorted((g[0], r.slot, g[1], g[2]) for r in results for g in r.grants)
    tokens = [g[0] for g in grants]
    duplicate_tokens = len(tokens) - len(set(tokens))

    handoffs: list[float] = []
    for (_, slot, _, released), (_, next_slot, acquired, _) in pairwise(grants):
        # A released grant followed directly (in token order: grant order) by another
        # process's grant is a hand-off. (Tokens are not consecutive across grants: they follow
        # the server's clock.)
        if released is not None and next_slot != slot:
            handoffs.append(acquired - released)
    handoffs.sort()

    writes = sorted(w for r in results for w in r.writes)
    # Every accepted write stored (value read) + 1 under the lock, so in token order the values
    # must run 1, 2, 3, ...; a repeat or a gap is a lost or misplaced update.
    values = [0] + [w[1] for w in writes]
    lost_updates = sum(1 for prev, value in pairwise(values) if value != prev + 1)

    # An accepted write is stale if a write with a larger token had already completed before it
    # was even sent: the resource had seen that token, so fenced_set should have refused it.
    by_done = sorted(writes, key=lambda w: w[3])
    done_at = [w[3] for w in by_done]
    max_token = list(accumulate((w[0] for w in by_done), max))
    stale_accepted = 0
    for token, _, sent_at, _ in writes:
        before = bisect_left(done_at, sent_at)
        if before and max_token[before - 1] > token:
            stale_accepted += 1

    acquisitions = [0] * slots
    for _, slot, _, _ in grants:
        acquisitions[slot] += 1
    return Analysis(
        acquisitions,
        handoffs,
        len(writes),
        final_counter,
        duplicate_tokens,
        lost_updates,
        stale_accepted,
    )


# -- the terminal ---------------------------------------------------------------------------


class Screen:
    """A table redrawn in place on a terminal; on anything else, plain lines once a second."""

    def __init__(self, out: TextIO, t0: float) -> None:
        self.out = out
        self.t0 = t0
        isatty = getattr(out, "isatty", None)
        self.live = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.refresh = REFRESH_LIVE if self.live else REFRESH_PLAIN
        self._drawn = 0
        self._table: list[str] = []

    def _clear(self) -> None:
        if self._drawn:
            # Back to the table's first line, then erase to the end of the screen.
            self.out.write(f"\x1b[{self._drawn}A\r\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        width = shutil.get_terminal_size().columns - 1  # a wrapped line would break the redraw
        for line in self._table:
            self.out.write(line[:width] + "\n")
        self._drawn = len(self._table)

    def event(self, text: str, at: float | None = None) -> None:
        """A line that stays: printed above the live table. ``at``: when it happened (monotonic)."""
        self._clear()
        at = time.monotonic() if at is None else at
        self.out.write(f"[{at - self.t0:6.2f}s] {text}\n")
        if self.live:
            self._draw()
        self.out.flush()

    def update(self, table: list[str], plain: str) -> None:
        if self.live:
            self._clear()
            self._table = table
            self._draw()
        else:
            self.out.write(f"[{time.monotonic() - self.t0:6.2f}s] {plain}\n")
        self.out.flush()

    def done(self) -> None:
        """Leave the last table on screen; only events and the summary follow."""
        self._drawn = 0


# -- the parent -----------------------------------------------------------------------------


class Phase(Enum):
    WARMUP = "waiting"
    ACQUIRING = "acquiring"
    FROZEN = "FROZEN"
    RESUMED = "resumed"
    DONE = "fenced off"
    FAILED = "failed"


class DemoFailed(Exception):
    pass


class Demo:
    def __init__(self, url: str, workers: int, seconds: float, out: TextIO) -> None:
        self.url = url
        self.workers = workers
        self.seconds = seconds
        self.out = out
        self.slots = workers + 1  # the victim is the last slot
        self.names = [f"w{i + 1}" for i in range(workers)] + ["victim"]
        run_id = uuid.uuid4().hex[:8]
        # Fresh names per run: against an existing server (--url) the counter starts at 0.
        self.lock_name = f"fencelock-demo:{run_id}"
        self.counter_key = f"fencelock-demo:{run_id}:counter"
        self.ctx = multiprocessing.get_context("spawn")
        self.shared = Shared.create(self.ctx, self.slots)
        self.procs: list[SpawnProcess] = []
        self.results: dict[int, WorkerResult] = {}
        self.redis = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.phase = Phase.WARMUP
        self.phase_at = 0.0
        self.failure: str | None = None
        self.victim_stopped = False
        self.grants_at_freeze = 0
        self.elapsed = 0.0

    # -- processes --

    def _spawn(self) -> None:
        cfg = Config(
            self.url, self.lock_name, self.counter_key, os.getpid(),
            time.monotonic() + self.seconds + READY_TIMEOUT + VICTIM_DEADLINE + 30,
        )  # fmt: skip
        with _sigint_ignored():
            for slot in range(self.slots):
                target = victim_main if slot == self.workers else worker_main
                proc = self.ctx.Process(
                    target=target,
                    args=(slot, cfg, self.shared),
                    name=f"fencelock-demo-{self.names[slot]}",
                )
                proc.daemon = True
                proc.start()
                self.procs.append(proc)

    def _drain(self, timeout: float) -> None:
        try:
            result = self.shared.results.get(timeout=timeout)
        except Empty:
            return
        self.results[result.slot] = result

    def _check_alive(self) -> None:
        for slot, proc in enumerate(self.procs):
            if slot in self.results:
                if self.results[slot].error and not self.shared.flags[STOP]:
                    raise DemoFailed(f"{self.names[slot]} failed: {self.results[slot].error}")
            elif proc.exitcode is not None:
                self._drain(0.5)  # it may have reported just before exiting
                if slot not in self.results:
                    raise DemoFailed(f"{self.names[slot]} exited with status {proc.exitcode}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while sum(self.shared.ready.values()) < self.slots:
            self._drain(TICK)
            self._check_alive()
            if time.monotonic() > deadline:
                raise DemoFailed(f"workers not ready within {READY_TIMEOUT:.0f} s")

    def _collect(self, timeout: float) -> None:
        """Read every result (before joining: a child blocks at exit until its queue is read)."""
        deadline = time.monotonic() + timeout
        while len(self.results) < len(self.procs) and time.monotonic() < deadline:
            self._drain(TICK)
            if all(p.exitcode is not None for p in self.procs):
                self._drain(0.2)
                break

    def shutdown(self) -> None:
        """Stop every child, however we got here (normal end, failure, Ctrl-C). Idempotent."""
        # A second Ctrl-C must not cut this short: it could leave the victim stopped forever.
        with _sigint_ignored():
            self._shutdown()

    def _shutdown(self) -> None:
        self.shared.flags[STOP] = 1
        if self.victim_stopped:
            # A stopped process cannot act on anything but SIGKILL until it is continued.
            self._signal_victim(signal.SIGCONT)
        self._collect(ACQUIRE_WAIT + 5.0)
        deadline = time.monotonic() + 2.0
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for proc in self.procs:
            proc.close()
        self.procs = []
        self.shared.results.close()
        self.shared.results.join_thread()
        self.redis.close()

    def _signal_victim(self, sig: signal.Signals) -> None:
        pid = self.procs[self.workers].pid if len(self.procs) > self.workers else None
        if pid is not None:
            os.kill(pid, sig)
        self.victim_stopped = sig == signal.SIGSTOP

    # -- the freeze story, one step per tick --

    def _step(self, now: float, elapsed: float, screen: Screen) -> None:
        shared = self.shared
        if self.phase is Phase.WARMUP and elapsed >= min(1.0, self.seconds / 4):
            shared.flags[VICTIM_GO] = 1
            self._enter(Phase.ACQUIRING, now)
        elif self.phase is Phase.ACQUIRING and shared.flags[VICTIM_HOLDING]:
            self._signal_victim(signal.SIGSTOP)
            self._enter(Phase.FROZEN, now)
            self.grants_at_freeze = sum(shared.counts.values()[: self.workers])
            screen.event(
                f"victim (pid {self.procs[self.workers].pid}) holds the lock with token "
                f"{shared.flags[VICTIM_TOKEN]} (ttl {VICTIM_TTL:g} s), "
                f"read counter={shared.flags[VICTIM_READ]}"
            )
            screen.event(f"SIGSTOP victim for {FREEZE:g} s while it holds the lock")
        elif self.phase is Phase.FROZEN and now - self.phase_at >= FREEZE:
            during = sum(shared.counts.values()[: self.workers]) - self.grants_at_freeze
            self._signal_victim(signal.SIGCONT)
            shared.flags[VICTIM_RESUME] = 1
            self._enter(Phase.RESUMED, now)
            screen.event(
                f"SIGCONT victim; meanwhile its lease expired and the others took the lock "
                f"{during} times (tokens up to {max(shared.last_token.values())})"
            )
        elif self.phase is Phase.RESUMED and self.workers in self.results:
            self._report_victim(self.results[self.workers], screen)
        waiting = self.phase in (Phase.ACQUIRING, Phase.FROZEN, Phase.RESUMED)
        if waiting and now - self.phase_at > VICTIM_DEADLINE:
            self.failure = f"the victim got stuck while {self.phase.value}"
            self._enter(Phase.FAILED, now)

    def _enter(self, phase: Phase, now: float) -> None:
        self.phase, self.phase_at = phase, now

    def _report_victim(self, result: WorkerResult, screen: Screen) -> None:
        report = result.victim
        now = time.monotonic()
        if report is None:
            self.failure = f"the victim reported nothing ({result.error})"
            self._enter(Phase.FAILED, now)
            return
        write = f"victim's write counter={report.read + 1} with token {report.token}"
        if report.refused_seen is not None:
            screen.event(
                f"{write} REFUSED: StaleToken (token {report.refused_seen} already seen)",
                at=report.written_at,
            )
        else:
            screen.event(f"{write} was ACCEPTED", at=report.written_at)
        if report.check_error is not None:
            screen.event(f"victim's lock.check() raised LockLost: {report.check_error}")
        else:
            screen.event("victim's lock.check() did NOT raise")
        # Not fenced off is reported by the summary (and fails the demo), not raised: the
        # history is then exactly what the summary's checks should look at.
        self._enter(Phase.DONE, now)

    def _victim_status(self, now: float) -> str:
        if self.phase is Phase.FROZEN:
            frozen = now - self.phase_at
            return f"FROZEN by SIGSTOP {frozen:3.1f}/{FREEZE:g} s (lease {VICTIM_TTL:g} s)"
        if self.phase is Phase.ACQUIRING and self.shared.flags[VICTIM_HOLDING]:
            return "holds the lock"
        return str(self.phase.value)

    def _render(self, now: float, elapsed: float, counter: str) -> tuple[list[str], str]:
        counts = self.shared.counts.values()
        total = sum(counts) or 1
        latest = max(self.shared.last_token.values())
        top = f"t={elapsed:5.1f}s  counter={counter}  latest token={latest}"
        table = [top, f"  {'process':<8} {'acquisitions':>12}  share"]
        for slot, name in enumerate(self.names):
            if slot == self.workers:
                note = self._victim_status(now)
            else:
                note = "#" * round(20 * counts[slot] / total)
            table.append(f"  {name:<8} {counts[slot]:>12}  {note}")
        plain = f"counter={counter} acquisitions " + " ".join(
            f"{name}={count}" for name, count in zip(self.names, counts, strict=True)
        )
        return table, plain

    def _counter(self) -> str:
        try:
            value = self.redis.get(self.counter_key)
        except redis.RedisError:
            return "?"
        return value.decode() if isinstance(value, bytes) else "0"

    def run(self) -> Analysis:
        self.out.write(
            f"fencelock demo: {self.workers} workers + 1 victim on {self.url}, "
            f"lock {self.lock_name!r}, {self.seconds:g} s\n"
        )
        self.out.flush()
        self.redis.ping()  # fail fast on a wrong --url, before starting anything
        self._spawn()
        self._wait_ready()
        self.shared.flags[START] = 1
        t0 = time.monotonic()
        screen = Screen(self.out, t0)
        next_draw = t0
        while True:
            now = time.monotonic()
            elapsed = now - t0
            self._step(now, elapsed, screen)
            if now >= next_draw:
                screen.update(*self._render(now, elapsed, self._counter()))
                next_draw = now + screen.refresh
            if self.phase is Phase.FAILED:
                raise DemoFailed(self.failure or "failed")
            # Keep the workers going until the victim's story is told, even past --seconds.
            if elapsed >= self.seconds and self.phase is Phase.DONE:
                break
            self._drain(TICK)
            self._check_alive()
        self.shared.flags[STOP] = 1
        self.elapsed = time.monotonic() - t0
        self._collect(ACQUIRE_WAIT + 10.0)
        # Drawn once every process has reported, so the table agrees with the summary.
        screen.update(*self._render(time.monotonic(), self.elapsed, self._counter()))
        screen.done()
        missing = [self.names[s] for s in range(self.slots) if s not in self.results]
        errors = [f"{self.names[r.slot]}: {r.error}" for r in self.results.values() if r.error]
        if missing or errors:
            raise DemoFailed("; ".join(errors + [f"{name} reported nothing" for name in missing]))
        final = int(self.redis.get(self.counter_key) or 0)
        return analyse(list(self.results.values()), self.slots, final)

    def summary(self, a: Analysis) -> bool:
        """Print the summary; True when the demo passed."""
        report = self.results[self.workers].victim
        assert report is not None  # the run ends only after the victim reported
        if report.refused_seen is not None:
            refused_line = (
                f"yes (victim's token {report.token}, token {report.refused_seen} already seen)"
            )
        else:
            refused_line = f"NO: the victim's write with token {report.token} was accepted"
        check_line = "raised LockLost" if report.check_error is not None else "did NOT raise"
        total = sum(a.acquisitions)
        refused = sum(r.refused for r in self.results.values())
        lines = [
            "",
            "summary",
            f"  acquisitions: {total} in {self.elapsed:.1f} s ({total / self.elapsed:.0f}/s)",
            "    " + "  ".join(f"{n}={c}" for n, c in zip(self.names, a.acquisitions, strict=True)),
        ]
        if a.handoffs:
            p50, p99 = percentile(a.handoffs, 50) * 1000, percentile(a.handoffs, 99) * 1000
            lines.append(
                f"  hand-off latency (release -> next process's grant, n={len(a.handoffs)}): "
                f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
            )
        else:
            lines.append("  hand-off latency: no hand-offs between processes")
        lines += [
            f"  counter: {a.final_counter}, accepted writes: {a.accepted}, "
            f"refused writes: {refused}",
            f"  stale write refused: {refused_line}",
            f"  lock.check() after the freeze: {check_line}",
            f"  violations: {a.violations} (lost updates {a.lost_updates}, stale writes accepted "
            f"{a.stale_accepted}, duplicate tokens {a.duplicate_tokens}, counter mismatch "
            f"{a.counter_mismatch})",
        ]
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()
        fenced_off = report.refused_seen is not None and report.check_error is not None
        return a.violations == 0 and fenced_off

    def cleanup_keys(self) -> None:
        """Against a server we did not start, leave nothing behind (the lock's own keys too)."""
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)
            with client:
                keys = list(client.scan_iter(match=f"*{self.lock_name}*", count=1000))
                if keys:
                    client.delete(*keys)
        except redis.RedisError:
            pass


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Children started meanwhile inherit SIGINT ignored, through exec too (Python keeps an
    inherited SIG_IGN). A Ctrl-C in the terminal hits the whole process group; the parent alone
    should react, and stop the children in order (their locks released, results reported)."""
    if not _main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _main_thread() -> bool:
    # signal.signal() works only there (main() may be called from a thread, e.g. by a test).
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM takes the Ctrl-C path, so the server and children are still stopped."""
    if not _main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(
    *, workers: int = 4, seconds: float = 5.0, url: str | None = None, out: TextIO | None = None
) -> int:
    """Run the demo; 0 when it showed the stale write refused and found no violations, 69
    (EX_UNAVAILABLE) when no server binary is found to start, else 1. KeyboardInterrupt
    propagates, after the children and the server are stopped."""
    out = out if out is not None else sys.stdout
    if not hasattr(signal, "SIGSTOP"):
        out.write("fencelock demo: needs POSIX signals (SIGSTOP/SIGCONT)\n")
        return 1
    with _sigterm_as_interrupt():
        server: EmbeddedServer | None = None
        try:
            if url is None:
                try:
                    server = EmbeddedServer()
                except ServerNotFound as exc:
                    out.write(f"fencelock demo: {exc}\n")
                    return os.EX_UNAVAILABLE  # 69, as fencelock's other commands
                out.write(f"starting {server.binary} on port {server.port}\n")
                try:
                    server.start()
                except RuntimeError as exc:
                    out.write(f"fencelock demo: {exc}\n")
                    return 1
                url = server.url
            try:
                demo = Demo(url, workers, seconds, out)
            except ValueError as exc:  # an unparsable --url
                out.write(f"fencelock demo: {exc}\n")
                return 1
            try:
                analysis = demo.run()
            except (DemoFailed, redis.RedisError) as exc:
                out.write(f"\nfencelock demo failed: {exc}\n")
                return 1
            finally:
                demo.shutdown()
                if server is None:
                    demo.cleanup_keys()
            return 0 if demo.summary(analysis) else 1
        finally:
            if server is not None:
                server.stop()
