"""Waiters through a Cluster that changes under them (issue 33): many names, many waiters in
several processes, holders releasing as they go, while the names' slots move to other masters
and back, a master fails over by hand, and one is killed.

    python -m bench.reshard                  # 100 names, 1,000 waiters, 4 processes, ~3 min
    python -m bench.reshard --server valkey  # Valkey 9: the atomic migration too
    python -m bench.reshard --quick          # 10 names, 40 waiters, 2 processes: the suite's
    python -m bench.reshard --write-docs     # and its section of docs/safety.md

The cluster is three masters with a replica each (``fencelock_tools.servers.topology``, node
timeout 1 s); the fenced resource is a server of its own that nothing touches. The waiters are
split over the processes, half of them sync (a thread per waiter, one ``LockClient`` per
process), half asyncio (a task per waiter, one ``fencelock.asyncio.LockClient``), each name's
waiters spread over every process. The clients hand no grant on within a process
(``max_handoffs=0``): every grant goes through Redis, every wait ends by a release's message.
A waiter loops: ``acquire`` (``auto_renew=True``: a loss is told), read the name's counter on
the resource, hold, ``check()``, write the counter + 1 with ``fenced_set``, release, think.
Every step is recorded in the history format of the chaos suite
(``bench/chaos/history.py``), whose checker (``bench/chaos/checker.py``) counts the double
holders (overlapping beliefs), the stale writes the resource accepted, the token regressions and
the losses, told or not.

The nemesis, meanwhile: every ``move_every`` seconds a batch of the names' slots moves to
another master, and the next round moves that batch back (the classic migration; on Valkey 9
every other pair of rounds the atomic one); at a third of the run the master with the most names
fails over by hand (CLUSTER FAILOVER), at two thirds (not in ``--quick``) the master with the
most names is SIGKILLed, its replica promoted by the cluster, and it rejoins as a replica. Each
is a fault of the history.

What is measured besides the checker's counts: for each grant whose waiter was waiting when the
previous holder released, the time from that release (called) to the grant (returned): all, and
from a holder in another process (the path through Redis and pub/sub; in one process the lock is
handed on locally). A name freed while its master was down (from the SIGKILL to the promotion)
is counted from the promotion instead: that is when it could be granted again. Names freed by
a failed release (the lease ran out instead) are left out, counted apart. And the clients' own
counts: waits ended by a message (``wakeups``) and by a timer (``polls``).

Exit status 1 when a promise broke: a double holder whose loss was not told, a stale write
accepted, a token regression, a loss of these ``auto_renew`` locks never told, or a waiter
whose acquire ran out of time (an hour-long bound: a waiter never woken).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import json
import logging
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.crc import key_slot
from redis.exceptions import RedisError

import fencelock
import fencelock.asyncio
from bench.chaos import checker
from bench.chaos import history as h
from bench.chaos.safety_doc import RESHARD
from bench.chaos.topologies import (
    close_async_client,
    close_client,
)
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer, find_server
from fencelock_tools.servers.topology import Cluster

DOCS: Final = Path(__file__).resolve().parents[1] / "docs" / "safety.md"
ACQUIRE_TIMEOUT: Final = 3600.0  # a waiter never woken shows as an acquire that ran out
FREED_WITHIN: Final = 1.0  # the promise measured: granted within 1 s of the name being free


@dataclass(frozen=True)
class Plan:
    names: int = 100
    waiters: int = 1000
    processes: int = 4  # half sync, half asyncio
    seconds: float = 150.0
    ttl: float = 10.0  # auto_renew: renewed every third of it
    hold: tuple[float, float] = (0.2, 0.8)  # seconds a grant is held
    think: tuple[float, float] = (0.0, 0.5)  # seconds between a release and the next acquire
    move_every: float = 4.0  # seconds between two rounds of slot moves
    batch: int = 10  # slots (of names) moved per round
    kill: bool = True  # SIGKILL a master at two thirds of the run
    seed: int = 33

    @property
    def per_name(self) -> int:
        return self.waiters // self.names


FULL: Final = Plan()
QUICK: Final = Plan(
    names=10, waiters=40, processes=2, seconds=8.0, ttl=60.0, hold=(0.1, 0.3),
    think=(0.0, 0.2), move_every=1.5, batch=4, kill=False,
)  # fmt: skip


def names(plan: Plan) -> list[str]:
    return [f"reshard-{i}" for i in range(plan.names)]


def slot_of(name: str) -> int:
    return key_slot(LockKeys.for_name(name).lock.encode())


def counter_key(name: str) -> str:
    return f"reshard:{{{name}}}:counter"


# -- the worker processes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """What one worker process runs: its waiters (worker id -> name) and where the servers are."""

    index: int
    asyncio: bool
    waiters: dict[str, str]
    plan: Plan
    ports: tuple[int, ...]  # the cluster's nodes (startup nodes)
    resource_port: int
    directory: str
    start: float  # time.monotonic() at which the waiters begin
    stop: float  # ... and after which they begin no new round


def split(plan: Plan) -> list[dict[str, str]]:
    """Each process's waiters: the waiters of every name dealt round the processes."""
    parts: list[dict[str, str]] = [{} for _ in range(plan.processes)]
    n = 0
    for name in names(plan):
        for _ in range(plan.per_name):
            parts[n % plan.processes][f"p{n % plan.processes}-w{n}"] = name
            n += 1
    return parts


class _Waiter:
    """One waiter's steps that do no I/O (the sync and asyncio loops do the I/O around them)."""

    def __init__(self, part: Part, recorder: h.Recorder, worker: str, name: str) -> None:
        self.part, self.rec, self.worker, self.name = part, recorder, worker, name
        self.rng = random.Random(f"{part.plan.seed}-{worker}")
        self.token: int | None = None

    def record(self, kind: str, **fields: Any) -> None:
        self.rec.record(kind, worker=self.worker, name=self.name, **fields)

    def on_lost(self, lock: object) -> None:
        self.record(h.LOST, token=self.token, detail=threading.current_thread().name)

    def checked(self, lock: fencelock.Lock | fencelock.asyncio.Lock) -> bool:
        try:
            lock.check()
        except fencelock.LockLost:
            self.record(h.CHECK_FAILED, token=self.token)
            return False
        self.record(h.CHECK_PASSED, token=self.token)
        return True

    def release_failed(self, exc: BaseException) -> None:
        """(The class alone in the event: the checker reads it; the message beside it.)"""
        self.record(h.RELEASE_FAILED, token=self.token, detail=type(exc).__name__)
        self.record(h.LIBRARY_LOG, token=self.token, detail=f"release: {exc}")

    def failed(self, asked: float, exc: BaseException) -> float:
        """An acquire that raised: recorded; the pause before the next one (a server down)."""
        self.record(h.ACQUIRE_FAILED, t0=asked, detail=f"{type(exc).__name__}: {exc}")
        return 0.05 + self.rng.random() * 0.05


def _sync_waiter(
    part: Part, rec: h.Recorder, worker: str, name: str, client: fencelock.LockClient
) -> None:
    w = _Waiter(part, rec, worker, name)
    plan = part.plan
    resource = redis.Redis(port=part.resource_port, socket_timeout=5, socket_connect_timeout=5)
    lock = client.lock(name, ttl=plan.ttl, auto_renew=True, on_lost=w.on_lost)
    time.sleep(max(0.0, part.start - time.monotonic()) + w.rng.uniform(*plan.think))
    try:
        while time.monotonic() < part.stop:
            asked = time.monotonic()
            try:
                granted = lock.acquire(timeout=ACQUIRE_TIMEOUT)
            except fencelock.LockError as exc:
                time.sleep(w.failed(asked, exc))
                continue
            if not granted:
                w.record(h.ACQUIRE_FAILED, t0=asked, detail="timeout")
                continue
            w.token = lock.token
            w.record(h.ACQUIRE, token=w.token, t0=asked)
            try:
                raw = resource.get(counter_key(name))
                value = int(raw) if raw is not None else 0
                w.record(h.READ, token=w.token, value=value)
                time.sleep(w.rng.uniform(*plan.hold))
                if w.checked(lock):
                    w.record(h.WRITE_ATTEMPT, token=w.token, value=value + 1)
                    sent = time.monotonic()
                    try:
                        client.fenced_set(counter_key(name), value + 1, w.token, redis=resource)
                    except fencelock.StaleToken as exc:
                        w.record(h.WRITE_REFUSED, token=w.token, t0=sent, detail=str(exc.seen))
                    except (fencelock.LockError, RedisError) as exc:
                        w.record(h.WRITE_ERROR, token=w.token, t0=sent, detail=repr(exc))
                    else:
                        w.record(h.WRITE_ACCEPTED, token=w.token, value=value + 1, t0=sent)
            finally:
                w.record(h.RELEASE, token=w.token)
                try:
                    lock.release()
                except (fencelock.LockError, RedisError) as exc:
                    w.release_failed(exc)
                else:
                    w.record(h.RELEASED, token=w.token)
                w.token = None
            time.sleep(w.rng.uniform(*plan.think))
    finally:
        w.record(h.EXIT)
        resource.close()


async def _async_waiter(
    part: Part,
    rec: h.Recorder,
    worker: str,
    name: str,
    client: fencelock.asyncio.LockClient,
    resource: redis.asyncio.Redis,
) -> None:
    w = _Waiter(part, rec, worker, name)
    plan = part.plan
    lock = client.lock(name, ttl=plan.ttl, auto_renew=True, on_lost=w.on_lost)
    await asyncio.sleep(max(0.0, part.start - time.monotonic()) + w.rng.uniform(*plan.think))
    try:
        while time.monotonic() < part.stop:
            asked = time.monotonic()
            try:
                granted = await lock.acquire(timeout=ACQUIRE_TIMEOUT)
            except fencelock.LockError as exc:
                await asyncio.sleep(w.failed(asked, exc))
                continue
            if not granted:
                w.record(h.ACQUIRE_FAILED, t0=asked, detail="timeout")
                continue
            w.token = lock.token
            w.record(h.ACQUIRE, token=w.token, t0=asked)
            try:
                raw = await resource.get(counter_key(name))
                value = int(raw) if raw is not None else 0
                w.record(h.READ, token=w.token, value=value)
                await asyncio.sleep(w.rng.uniform(*plan.hold))
                if w.checked(lock):
                    w.record(h.WRITE_ATTEMPT, token=w.token, value=value + 1)
                    sent = time.monotonic()
                    try:
                        await client.fenced_set(
                            counter_key(name), value + 1, w.token, redis=resource
                        )
                    except fencelock.StaleToken as exc:
                        w.record(h.WRITE_REFUSED, token=w.token, t0=sent, detail=str(exc.seen))
                    except (fencelock.LockError, RedisError) as exc:
                        w.record(h.WRITE_ERROR, token=w.token, t0=sent, detail=repr(exc))
                    else:
                        w.record(h.WRITE_ACCEPTED, token=w.token, value=value + 1, t0=sent)
            finally:
                w.record(h.RELEASE, token=w.token)
                try:
                    await lock.release()
                except (fencelock.LockError, RedisError) as exc:
                    w.release_failed(exc)
                else:
                    w.record(h.RELEASED, token=w.token)
                w.token = None
            await asyncio.sleep(w.rng.uniform(*plan.think))
    finally:
        w.record(h.EXIT)


def work(part: Part) -> None:
    """A worker process: its waiters until ``part.stop``, then its client's counts."""
    rec = h.Recorder(Path(part.directory) / f"p{part.index}.jsonl", f"p{part.index}")
    library = logging.getLogger("fencelock")
    library.addHandler(_LibraryLog(rec))
    library.propagate = False  # into the history, not onto the harness's stderr
    try:
        counts = asyncio.run(_work_async(part, rec)) if part.asyncio else _work_sync(part, rec)
        stats = Path(part.directory) / f"p{part.index}.stats.json"
        stats.write_text(json.dumps({"asyncio": part.asyncio, **counts}))
    finally:
        rec.close()


class _LibraryLog(logging.Handler):
    """fencelock's warnings (a loss and why, a listener's trouble) go into the history."""

    def __init__(self, recorder: h.Recorder) -> None:
        super().__init__(logging.WARNING)
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.recorder.record(h.LIBRARY_LOG, detail=record.getMessage())


# Every grant goes through Redis (no hand-on to a waiter of the same process): every waiter's
# wake-up is a message, the path a moving cluster can break.
CLIENT_OPTIONS: Final[dict[str, Any]] = {"max_handoffs": 0, "socket_timeout": 5.0}


def _cluster(ports: Sequence[int]) -> redis.cluster.RedisCluster:
    nodes = [redis.cluster.ClusterNode("127.0.0.1", port) for port in ports]  # type: ignore[no-untyped-call]
    return redis.cluster.RedisCluster(
        startup_nodes=nodes, socket_timeout=5, socket_connect_timeout=5
    )


def _work_sync(part: Part, rec: h.Recorder) -> dict[str, int]:
    client = fencelock.LockClient(_cluster(part.ports), **CLIENT_OPTIONS)
    try:
        threads = [
            threading.Thread(target=_sync_waiter, args=(part, rec, worker, name, client))
            for worker, name in part.waiters.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return asdict(client.statistics())
    finally:
        close_client(client)


async def _work_async(part: Part, rec: h.Recorder) -> dict[str, int]:
    nodes = [redis.asyncio.cluster.ClusterNode("127.0.0.1", port) for port in part.ports]
    cluster = redis.asyncio.cluster.RedisCluster(
        startup_nodes=nodes, socket_timeout=5, socket_connect_timeout=5
    )
    client = fencelock.asyncio.LockClient(cluster, **CLIENT_OPTIONS)
    resource = redis.asyncio.Redis(
        port=part.resource_port, socket_timeout=5, socket_connect_timeout=5
    )
    try:
        await asyncio.gather(
            *(
                _async_waiter(part, rec, worker, name, client, resource)
                for worker, name in part.waiters.items()
            )
        )
        return asdict(client.statistics())
    finally:
        await close_async_client(client)
        await resource.aclose()


# -- the nemesis ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A change of the cluster that holds up the names of some slots for a while."""

    what: str  # MOVE (a slot migrating), FAILOVER (by hand), KILL (a master SIGKILLed)
    start: float
    end: float  # a move: its last SETSLOT (classic) or every node naming the new owner (atomic);
    #   a failover: every node naming the new master; a kill: the same (the promotion)
    slots: frozenset[int]


MOVE, FAILOVER, KILL = "slot moving", "manual failover", "master killed"


class Nemesis:
    """The cluster's changes, each recorded as a fault on the servers (one per slot moved)."""

    def __init__(self, cluster: Cluster, recorder: h.Recorder, plan: Plan) -> None:
        self.cluster, self.rec, self.plan = cluster, recorder, plan
        self.rng = random.Random(plan.seed)
        self.faults = 0
        self.atomic = cluster.migrates_atomically
        self.moved: dict[int, Any] = {}  # slot -> the master it came from (to move it back)
        self.rounds = 0
        self.changes: list[Change] = []

    @contextlib.contextmanager
    def fault(self, what: str, slots: Iterable[int], detail: str) -> Iterator[None]:
        self.faults += 1
        self.rec.record(h.FAULT_START, value=self.faults, detail=detail, scope=h.SERVER)
        start = time.monotonic()
        try:
            yield
        finally:
            self.changes.append(Change(what, start, time.monotonic(), frozenset(slots)))
            self.rec.record(h.FAULT_END, value=self.faults)

    def move_round(self, slots: Sequence[int]) -> None:
        """Move a batch of the names' slots away, or (every other round) the last batch back."""
        self.rounds += 1
        atomic = self.atomic and (self.rounds // 2) % 2 == 1
        if self.moved:
            batch, self.moved = self.moved, {}
            for slot, home in batch.items():
                self.move(slot, home, atomic)
            return
        masters = self.cluster.running_masters()
        for slot in self.rng.sample(list(slots), min(self.plan.batch, len(slots))):
            home = self.cluster.master_for_slot(slot)
            self.move(slot, self.rng.choice([m for m in masters if m is not home]), atomic)
            self.moved[slot] = home

    def move(self, slot: int, target: Any, atomic: bool) -> None:
        cluster = self.cluster
        how = "atomically" if atomic else "(SETSLOT, MIGRATE)"
        with self.fault(MOVE, [slot], f"move slot {slot} to {target.port} {how}"):
            if atomic:
                cluster.move_slot(slot, target, atomic=True)
            else:
                cluster.start_migration(slot, target)
                cluster.migrate_keys(slot, target)
                cluster.finish_migration(slot, target, wait=False)
        cluster.wait_owner(slot, target)

    def served_by(self, slots: Sequence[int]) -> tuple[Any, frozenset[int]]:
        """The master that serves the most of ``slots``, and those it serves."""
        owners = {slot: self.cluster.master_for_slot(slot) for slot in slots}
        counts = Counter(owner.port for owner in owners.values())
        port = counts.most_common(1)[0][0]
        return self.cluster.node_at(port), frozenset(s for s, o in owners.items() if o.port == port)

    def failover(self, slots: Sequence[int]) -> None:
        master, served = self.served_by(slots)
        (replica,) = self.cluster.replicas_now(master)
        with self.fault(FAILOVER, served, f"CLUSTER FAILOVER: {replica.port} for {master.port}"):
            self.cluster.failover(replica)

    def kill(self, slots: Sequence[int]) -> None:
        master, served = self.served_by(slots)
        with self.fault(KILL, served, f"SIGKILL master {master.port}; its replica promoted"):
            self.cluster.kill_master(master)
        self.cluster.rejoin(master)  # (as a replica: for the moves that follow)


# -- the run -------------------------------------------------------------------------------------


@dataclass
class Result:
    plan: Plan
    server: str
    seconds: float
    report: checker.Report
    latencies: dict[str, list[float]]  # by what the name's slot went through (wake_latencies)
    freed_by_lease: int  # grants after a release that failed: the name freed by its lease
    acquire_failures: dict[str, int]  # why (timeout, an error's class) -> how many
    stats: dict[str, dict[str, int]]  # per process: the client's counts
    faults: list[str] = field(default_factory=list)
    load: float = 0.0  # the machine's load average (1 min) at the end of the run

    @property
    def double_holders(self) -> list[checker.Overlap]:
        return [o for r in self.report.names.values() for o in r.overlaps]

    @property
    def untold_double_holders(self) -> list[checker.Overlap]:
        """Overlaps neither of whose holders was told of a loss (the one whose grant was lost
        may have been granted first or second)."""
        told = {
            id(loss.grant)
            for r in self.report.names.values()
            for loss in r.losses
            if loss.signalled != checker.NEVER
        }
        return [o for o in self.double_holders if not {id(o.earlier), id(o.later)} & told]

    def count(self, attribute: str) -> int:
        return sum(len(getattr(r, attribute)) for r in self.report.names.values())

    def broken(self) -> list[str]:
        """The promises this run broke."""
        found = []
        if self.untold_double_holders:
            found.append(f"{len(self.untold_double_holders)} double holders never told")
        for attribute, what in (
            ("stale_accepted", "stale writes accepted"),
            ("token_regressions", "token regressions"),
            ("orphaned", "orphaned locks"),
        ):
            if self.count(attribute):
                found.append(f"{self.count(attribute)} {what}")
        untold = sum(
            1
            for r in self.report.names.values()
            for loss in r.losses
            if loss.signalled == checker.NEVER
        )
        if untold:
            found.append(f"{untold} losses never told")
        if self.acquire_failures.get("timeout"):
            found.append(f"{self.acquire_failures['timeout']} acquires ran out of time")
        return found


def run(plan: Plan, binary: str, *, directory: Path | None = None) -> Result:
    """Start the cluster, the resource and the workers, change the cluster under them, check."""
    started = time.monotonic()
    own = directory is None
    where = Path(tempfile.mkdtemp(prefix="fencelock-reshard-")) if own else directory
    assert where is not None
    ctx = multiprocessing.get_context("forkserver")
    with Cluster(binary, node_timeout_ms=1000) as cluster, EmbeddedServer(binary) as resource:
        rec = h.Recorder(where / "harness.jsonl", h.NEMESIS)
        for name in names(plan):
            rec.record(h.CONFIG, name=name, value=int(plan.ttl * 1000), detail=h.AUTO_RENEW)
        ports = tuple(n.port for n in cluster.nodes)
        begin = time.monotonic() + 3.0 + 0.5 * plan.processes  # (the processes start meanwhile)
        stop = begin + plan.seconds
        parts = [
            Part(i, i % 2 == 1, waiters, plan, ports, resource.port, str(where), begin, stop)
            for i, waiters in enumerate(split(plan))
        ]
        processes = [ctx.Process(target=work, args=(part,), daemon=True) for part in parts]
        for process in processes:
            process.start()
        nemesis = Nemesis(cluster, rec, plan)
        slots = sorted({slot_of(name) for name in names(plan)})
        try:
            time.sleep(max(0.0, begin - time.monotonic()))
            changes = [(begin + plan.seconds / 3, nemesis.failover)]
            if plan.kill:
                changes.append((begin + 2 * plan.seconds / 3, nemesis.kill))
            next_move = begin + plan.move_every / 2
            # every change is made, at its time or (the moves being slow) as soon as it can
            while changes or time.monotonic() < stop - plan.move_every / 2:
                due = bool(changes) and time.monotonic() >= changes[0][0]
                if due and not nemesis.moved:
                    changes.pop(0)[1](slots)
                elif due or time.monotonic() >= next_move:  # (a batch away goes home first)
                    nemesis.move_round(slots)
                    next_move = time.monotonic() + plan.move_every
                else:
                    time.sleep(0.05)
            if nemesis.moved:  # the last batch goes home
                nemesis.move_round(slots)
            for process in processes:
                process.join(timeout=plan.seconds + 120)
        finally:
            for process in processes:
                if process.is_alive():
                    process.kill()
        _final(cluster, resource, rec, plan)
        rec.close()
    events = h.read_dir(where)
    report = checker.check(events)
    stats = {
        path.name.split(".")[0]: json.loads(path.read_text())
        for path in sorted(where.glob("*.stats.json"))
    }
    result = Result(
        plan,
        Path(binary).name,
        time.monotonic() - started,
        report,
        *wake_latencies(report.grants, nemesis.changes),
        acquire_failures(events),
        stats,
        [e.detail for e in events if e.kind == h.FAULT_START],
        os.getloadavg()[0],
    )
    if own:
        shutil.rmtree(where, ignore_errors=True)
    return result


def _final(cluster: Cluster, resource: EmbeddedServer, rec: h.Recorder, plan: Plan) -> None:
    """The counters' final values, and a fresh client's acquire of every name (orphans)."""
    with resource.client() as probe:
        for name in names(plan):
            raw = probe.get(counter_key(name))
            rec.record(h.FINAL_VALUE, name=name, value=int(raw) if raw is not None else 0)
    client = fencelock.LockClient(_cluster([n.port for n in cluster.running_masters()]))
    try:
        for name in names(plan):
            lock = client.lock(name, ttl=plan.ttl)
            asked = time.monotonic()
            try:
                if lock.acquire(timeout=1.5 * plan.ttl + 1):
                    waited = int(1000 * (time.monotonic() - asked))
                    rec.record(h.FINAL_ACQUIRE, name=name, value=waited)
                    lock.release()
                else:
                    rec.record(h.FINAL_ACQUIRE, name=name, value=-1)
            except fencelock.LockError as exc:
                rec.record(h.FINAL_ACQUIRE, name=name, value=-2, detail=repr(exc))
    finally:
        close_client(client)


# -- what the history says -----------------------------------------------------------------------


STEADY: Final = "its slot steady"


def wake_latencies(
    grants: Sequence[checker.Grant], changes: Sequence[Change]
) -> tuple[dict[str, list[float]], int]:
    """Per grant whose waiter waited for a release: seconds from the release (called) to the
    grant (returned), by what the name's slot went through as the release came: nothing
    (``STEADY``), or a change (``changes``). A name freed while its master was down (``KILL``)
    is counted from when its slots were served again: their first grant after the kill (the
    promotion, as the clients saw it). Also how many grants followed a release that failed (the
    name freed by its lease instead): left out."""
    found: dict[str, list[float]] = {STEADY: [], MOVE: [], FAILOVER: [], KILL: []}
    by_lease = 0
    back = {
        change: min(
            (g.start for g in grants if g.start > change.start and slot_of(g.name) in change.slots),
            default=change.end,
        )
        for change in changes
        if change.what == KILL
    }
    for held in checker.by_name(grants).values():
        ordered = sorted(held, key=lambda g: g.start)
        for before, after in itertools.pairwise(ordered):
            if before.ended_by != "release" or after.requested >= before.hold_end:
                continue  # it did not wait for this release
            if not before.released:
                by_lease += 1
                continue
            freed, slot = before.hold_end, slot_of(before.name)
            during = [c for c in changes if c.start <= freed <= c.end and slot in c.slots]
            served = [back[c] for c in during if c in back]
            found[during[0].what if during else STEADY].append(after.start - max([freed, *served]))
    return found, by_lease


def acquire_failures(events: Sequence[h.Event]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for event in events:
        if event.kind == h.ACQUIRE_FAILED:
            counts[event.detail.split(":")[0]] += 1  # (the error's class, or "timeout")
    return dict(counts)


def _quantiles(values: Sequence[float]) -> str:
    if not values:
        return "- | - | - | -"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    over = sum(1 for v in ordered if v > FREED_WITHIN)
    return (
        f"{1000 * statistics.median(ordered):.0f} ms | {1000 * p99:.0f} ms | "
        f"{1000 * ordered[-1]:.0f} ms | {over}"
    )


def markdown(results: Sequence[Result]) -> str:
    lines = [
        "| server | waiters (processes) | grants | double holders (told) | stale writes "
        "accepted | token regressions | losses told / happened | acquires failed | wakeups "
        "/ polls |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        losses = [loss for n in r.report.names.values() for loss in n.losses]
        told = sum(1 for loss in losses if loss.signalled != checker.NEVER)
        stats = r.stats.values()
        failed = ", ".join(f"{n} {why}" for why, n in sorted(r.acquire_failures.items())) or "0"
        double = len(r.double_holders)
        lines.append(
            f"| {r.server} | {r.plan.waiters} ({r.plan.processes}) | {len(r.report.grants)} | "
            f"{double} ({double - len(r.untold_double_holders)}) | {r.count('stale_accepted')} | "
            f"{r.count('token_regressions')} | {told} / {len(losses)} | {failed} | "
            f"{sum(s['wakeups'] for s in stats)} / {sum(s['polls'] for s in stats)} |"
        )
    lines += [
        "",
        "| server | the name's slot as it was freed | grants | median | p99 | max | over 1 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for what, values in r.latencies.items():
            lines.append(f"| {r.server} | {what} | {len(values)} | {_quantiles(values)} |")
    return "\n".join(lines)


def section(results: Sequence[Result], command: str) -> str:
    """docs/safety.md's section of this benchmark (between the RESHARD markers)."""
    plan = results[0].plan
    by_lease = ", ".join(f"{r.freed_by_lease} ({r.server})" for r in results)
    load = ", ".join(f"{r.load:.0f} ({r.server})" for r in results)
    steady = "; ".join(
        f"{r.server}: {_share(r.latencies[STEADY])} of {len(r.latencies[STEADY]):,}"
        for r in results
    )
    begin, end = RESHARD

    def wrapped(text: str) -> str:
        return textwrap.fill(text, 96, break_on_hyphens=False, break_long_words=False)

    return "\n".join(
        [
            begin,
            "## A Cluster that changes under the waiters",
            "",
            wrapped(
                f"`python -m bench.reshard` ({datetime.date.today().isoformat()}, "
                f"{platform.machine()}, {multiprocessing.cpu_count()} vCPUs shared with other "
                f"work: a load average of {load} at the end of the runs): {plan.names} names, "
                f"{plan.waiters:,} waiters in {plan.processes} processes (half sync, a thread "
                "each; half asyncio, a task each), each name's waiters in every process, "
                f"holders releasing as they go ({plan.hold[0]:g}-{plan.hold[1]:g} s held, ttl "
                f"{plan.ttl:g} s renewed), {plan.seconds:g} s a run, on a Cluster of three "
                "masters with a replica each (node timeout 1 s). The clients hand nothing on "
                "within a process (`max_handoffs=0`): every grant goes through Redis, every "
                f"wait ends with a release's message. Meanwhile the slots of {plan.batch} names "
                f"move to another master every {plan.move_every:g} s and back the next round "
                "(the classic migration; on Valkey 9 the atomic one every other pair of "
                "rounds), the master with the most names fails over by hand (CLUSTER FAILOVER) "
                "at a third of the run, and the master with the most names is SIGKILLed at two "
                "thirds (the cluster promotes its replica, then it rejoins). The checker is the "
                f"chaos suite's. Reproduce: `{command}`."
            ),
            "",
            markdown(results),
            "",
            wrapped(
                'A double holder is two waiters whose beliefs overlapped; "told": the one '
                "whose grant was lost was told (`on_lost`, a failing `check()` or release), as "
                "a failover without WAIT can lose a grant. The wait after a release: from a "
                "release (called) to the grant (returned) of a waiter that was waiting for it, "
                "by what the name's slot went through as the release came: nothing, its "
                "migration (a classic migration answers a lock's scripts TRYAGAIN until it "
                "ends: [modes.md](modes.md#redis-cluster)), the manual failover, or its master "
                "killed, counted then from its promotion (the first grant in its slots after "
                "the kill; a release the dead master had not passed on to its replica is lost "
                "with it, and the name is held until that lease ends). Grants after a release "
                f"that failed (the name freed by its lease instead) are left out: {by_lease}. "
                "Wakeups / polls: the clients' waits ended by a message (or by their slot's "
                "move) and by a timer (the fallback: the end of the holder's lease); the "
                "acquire's bound is an hour, so a waiter never woken would show as an acquire "
                "failed by timeout. Granted within 1 s of the release, its slot steady: "
                f"{steady}."
            ),
            end,
        ]
    )


def _share(values: Sequence[float]) -> str:
    within = sum(1 for v in values if v <= FREED_WITHIN)
    return f"{100 * within / len(values):.2f} %" if values else "-"


def write_docs(text: str) -> None:
    """Put ``text`` (the RESHARD section) in docs/safety.md, in place of the old one or before
    "## Scenarios"."""
    page = DOCS.read_text(encoding="utf-8")
    begin, end = RESHARD
    if begin in page:
        head, rest = page.split(begin, 1)
        page = head + text + rest.split(end, 1)[1]
    else:
        head, tail = page.split("## Scenarios\n", 1)
        page = f"{head}{text}\n\n## Scenarios\n{tail}"
    DOCS.write_text(page, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reshard", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the suite's bounded run")
    parser.add_argument(
        "--server", choices=("redis", "valkey"), action="append", help="repeatable (default: both)"
    )
    parser.add_argument("--seconds", type=float, help="length of a run")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--keep", type=Path, help="keep the JSONL histories in this directory")
    parser.add_argument("--write-docs", action="store_true", help=f"write its section of {DOCS}")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.seconds:
        plan = replace(plan, seconds=args.seconds)
    results = []
    for kind in args.server or ["redis", "valkey"]:
        kept = None
        if args.keep:
            kept = args.keep / kind
            kept.mkdir(parents=True, exist_ok=True)
        result = run(plan, find_server(kind), directory=kept)
        print(f"{kind}: {len(result.report.grants)} grants in {result.seconds:.0f} s; "
              f"broken: {result.broken() or 'none'}", file=sys.stderr)  # fmt: skip
        results.append(result)
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps([_figures(r) for r in results], indent=1))
    if args.write_docs:
        servers = "".join(f" --server {kind}" for kind in args.server or ())
        write_docs(section(results, f"python -m bench.reshard{servers} --write-docs"))
    return 1 if any(r.broken() for r in results) else 0


def _figures(result: Result) -> dict[str, Any]:
    return {
        "plan": asdict(result.plan),
        "server": result.server,
        "seconds": result.seconds,
        "grants": len(result.report.grants),
        "double_holders": len(result.double_holders),
        "untold_double_holders": len(result.untold_double_holders),
        "stale_accepted": result.count("stale_accepted"),
        "token_regressions": result.count("token_regressions"),
        "latencies": result.latencies,
        "freed_by_lease": result.freed_by_lease,
        "acquire_failures": result.acquire_failures,
        "stats": result.stats,
        "faults": result.faults,
        "broken": result.broken(),
        "load": result.load,
    }


if __name__ == "__main__":
    sys.exit(main())
