"""One scenario run: start its servers and workers, let the nemesis strike, stop everything,
probe what is left, and check the merged history.

Workers are processes from a ``forkserver`` context: a fork of a small server process that has
already imported fencelock, so a worker starts in milliseconds rather than the second a fresh
interpreter costs on two vCPUs, and is still a process of its own that SIGKILL and SIGSTOP hit
for real. Every process started here is stopped by PID on every path (``Run.close``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import redis

from fencelock_tools.servers.topology import probe

from . import checker, workers
from . import history as h
from .sinks import Sinks, SinkSpec, open_sink
from .topologies import (
    Resource,
    Topology,
    Unavailable,
    close_client,
    make_client,
    make_topology,
)

if TYPE_CHECKING:
    from .scenarios import Mode, Scenario

MAX_SLOTS: Final = 256  # worker slots in the shared arrays (replacements take new ones)
SAFETY_MARGIN: Final = 120.0  # a worker stops by itself this long after its run should end
# a worker asks again after this (an acquire that returns False is recorded): waiters re-ask
# often enough to measure recovery, and see the end of a run soon
ACQUIRE_TIMEOUT: Final = 1.0
# the longest the harness waits for its workers to have made their clients
WORKERS_START: Final = 60.0

_context: multiprocessing.context.ForkServerContext | None = None
_context_lock = threading.Lock()


def context() -> multiprocessing.context.ForkServerContext:
    """The forkserver context, with the worker module (and so fencelock) preloaded."""
    global _context
    with _context_lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["bench.chaos.workers"])
            _context = ctx
        return _context


@dataclass
class WorkerHandle:
    id: str
    name: str
    kind: str
    slot: int
    process: BaseProcess

    @property
    def pid(self) -> int:
        pid = self.process.pid
        assert pid is not None, "not started"
        return pid


@dataclass
class Result:
    """What one scenario run produced."""

    scenario: Scenario
    report: checker.Report
    faults: int  # faults injected
    seconds: float  # wall time of the run, setup and teardown included
    directory: Path  # the JSONL histories
    errors: list[str] = field(default_factory=list)  # nemesis or harness failures
    skipped: str = ""  # why the scenario did not run (then report is empty)


class FaultMark:
    """One fault being injected: ``heal()`` records its end (once)."""

    def __init__(self, run: Run, fault_id: int) -> None:
        self.run = run
        self.id = fault_id
        self.healed = False

    def heal(self) -> None:
        if not self.healed:
            self.healed = True
            self.run.record(h.FAULT_END, value=self.id)


class Run:
    """The context a nemesis acts in: the topology, the workers and the nemesis's recorder."""

    def __init__(
        self,
        scenario: Scenario,
        mode: Mode,
        topology: Topology,
        resource: Resource,
        directory: Path,
        sink: SinkSpec,
    ) -> None:
        self.scenario = scenario
        self.sink = sink
        self.mode = mode
        self.topology = topology
        self.resource = resource
        self.directory = directory
        self.ttl = scenario.ttl
        self.names: list[str] = [scenario.lock_name(kind) for kind in scenario.kinds]
        self.kind_of = dict(zip(self.names, scenario.kinds, strict=True))
        self.log = h.Recorder(directory / "harness.jsonl", h.NEMESIS)
        self.ctx = context()
        self.phases: Any = self.ctx.RawArray("i", MAX_SLOTS)
        self.grants: Any = self.ctx.RawArray("i", MAX_SLOTS)
        self.stop_flag: Any = self.ctx.RawArray("i", 1)  # see workers.run: no lock to leave
        self.loop_blocks: Any = self.ctx.RawArray("d", MAX_SLOTS)  # see nemesis.block_loops
        self.handles: list[WorkerHandle] = []
        self.spawned: dict[str, int] = {}
        self.fault_ids = 0
        self.hard_deadline = time.monotonic() + mode.budget(scenario) + SAFETY_MARGIN
        self.client_spec = topology.client_spec(**scenario.client)

    # -- recording -------------------------------------------------------------------------------

    def record(self, kind: str, **fields: Any) -> h.Event:
        return self.log.record(kind, **fields)

    @contextmanager
    def fault(self, detail: str, scope: str, name: str = "") -> Iterator[FaultMark]:
        """Record a fault: ``fault_start`` now, ``fault_end`` when the nemesis starts to undo
        it (``mark.heal()``), at the latest when the block ends."""
        self.fault_ids += 1
        mark = FaultMark(self, self.fault_ids)
        self.record(h.FAULT_START, value=mark.id, detail=detail, scope=scope, name=name)
        try:
            yield mark
        finally:
            mark.heal()

    # -- time ------------------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, self.hard_deadline - time.monotonic())))

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    # -- workers ---------------------------------------------------------------------------------

    def workers_of(self, name: str) -> list[WorkerHandle]:
        return [w for w in self.handles if w.name == name and w.process.is_alive()]

    def phase(self, worker: WorkerHandle) -> int:
        return int(self.phases[worker.slot])

    def grant_count(self, worker: WorkerHandle) -> int:
        return int(self.grants[worker.slot])

    def wait_holder(
        self, name: str, phases: tuple[int, ...] | Any, timeout: float
    ) -> WorkerHandle | None:
        found: list[WorkerHandle] = []

        def holding() -> bool:
            found[:] = [w for w in self.workers_of(name) if self.phase(w) in phases]
            return bool(found)

        return found[0] if self.wait_for(holding, timeout) else None

    def spawn(self, name: str, kind: str) -> WorkerHandle:
        slot = len(self.handles)
        if slot >= MAX_SLOTS:
            raise RuntimeError("too many workers for the shared arrays")
        n = self.spawned.get(name, 0)
        self.spawned[name] = n + 1
        worker_id = f"{kind}-{n}"
        scenario = self.scenario
        ttl = scenario.ttl
        low, high = scenario.renewed_work if kind in h.RENEWED_KINDS else scenario.work
        spec = workers.WorkerSpec(
            worker=worker_id,
            name=name,
            kind=kind,
            ttl=ttl,
            client=self.client_spec,
            resource_port=self.resource.server.port,
            sink=self.sink,
            history=str(self.directory / f"{worker_id}.jsonl"),
            work=(low * ttl, high * ttl),
            gap=scenario.gap,
            think=scenario.think,
            acquire_timeout=ACQUIRE_TIMEOUT,
            deadline=self.hard_deadline,
            seed=zlib.crc32(f"{scenario.name}/{worker_id}".encode()),
        )
        process = self.ctx.Process(
            target=workers.run,
            args=(spec, self.phases, self.grants, slot, self.stop_flag, self.loop_blocks),
            name=f"chaos-{worker_id}",
            daemon=True,
        )
        handle = WorkerHandle(worker_id, name, kind, slot, process)
        self.handles.append(handle)
        self.phases[slot] = workers.STARTING
        process.start()
        return handle

    def respawn(self, worker: WorkerHandle) -> WorkerHandle:
        return self.spawn(worker.name, worker.kind)

    def reap(self, worker: WorkerHandle, timeout: float = 5.0) -> None:
        worker.process.join(timeout)

    def start_workers(self) -> None:
        """Start every worker, and wait until each has made its client (at most
        ``WORKERS_START``): on a loaded machine that takes seconds (once 20 s), and a schedule
        begun meanwhile would fault workers that do not run yet, and leave them no time."""
        for name in self.names:
            for _ in range(self.mode.workers_per_kind):
                self.spawn(name, self.kind_of[name])

        def started() -> bool:
            return all(self.phase(w) != workers.STARTING for w in self.handles)

        self.wait_for(started, WORKERS_START)

    def stop_workers(self) -> None:
        """Ask every worker to stop after its round; SIGKILL (recorded) whoever is late."""
        self.stop_flag[0] = 1
        for w in self.handles:  # a paused worker cannot stop
            if w.process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.pid, signal.SIGCONT)
        # a round in progress: its acquire ends within ACQUIRE_TIMEOUT (plus the library's own
        # retries), its work is cut short, then a check, a write and a release
        deadline = time.monotonic() + ACQUIRE_TIMEOUT + self.scenario.gap + 10.0
        for w in self.handles:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5)
                self.record(h.KILLED, worker=w.id, name=w.name, detail="did not stop in time")

    def close(self) -> None:
        """Kill every worker still alive (by PID), close the recorder."""
        self.stop_flag[0] = 1
        for w in self.handles:
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5)
        self.log.close()

    # -- the end ---------------------------------------------------------------------------------

    def probe_final_state(self) -> None:
        """Counter values, lock keys left, and whether a fresh client gets each lock in time."""
        for name in self.names:
            sink = open_sink(self.sink, name)
            try:
                self.record(h.FINAL_VALUE, name=name, value=sink.read() or 0)
            finally:
                sink.close()
        for name in self.names:
            for keys in workers.lock_keys(self.kind_of[name], name):
                for node, pttl in self.topology.key_pttls(keys.lock):
                    self.record(h.FINAL_KEY, name=name, value=pttl, detail=node)
        client = make_client(self.client_spec)
        try:
            for name in self.names:
                if self.kind_of[name] != workers.VERSIONED:  # (no lock to take)
                    self._final_acquire(client, name)
        finally:
            close_client(client)

    def _final_acquire(self, client: Any, name: str) -> None:
        bound = self.ttl * 1.5 + 1.0
        lock = workers.new_lock(client, self.kind_of[name], name, self.ttl)
        start = time.monotonic()
        try:
            got = lock.acquire(timeout=bound)
        except Exception as exc:  # reported, not raised: the history says what happened
            self.record(h.FINAL_ACQUIRE, name=name, value=-2, detail=repr(exc))
            return
        waited = time.monotonic() - start
        if got:
            self.record(h.FINAL_ACQUIRE, name=name, value=round(waited * 1000))
            with contextlib.suppress(Exception):
                lock.release()
        else:
            self.record(h.FINAL_ACQUIRE, name=name, value=-1, detail=f"not within {bound:g} s")


def server_version(client: redis.Redis) -> str:
    info = client.info("server")
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']}"
    return f"redis {info['redis_version']}"


class Lab:
    """What the runs of one session share: the server binary, the resource server, and the
    topologies of scenarios marked ``shared_topology`` (a cluster costs seconds to build)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.resource = Resource(binary)
        self.sinks = Sinks("")  # (its resource URL, once the resource has started)
        self.directory = Path(tempfile.mkdtemp(prefix="chaos-lab-"))
        self._shared: dict[tuple[str, str], Topology] = {}

    def start(self) -> Lab:
        self.resource.start()
        self.sinks = Sinks(self.resource.url)
        return self

    def version(self) -> str:
        with contextlib.closing(self.resource.client()) as client:
            return server_version(client)

    def topology(self, scenario: Scenario, directory: Path) -> tuple[Topology, bool]:
        """A started topology for ``scenario``, and whether the caller must stop it."""
        options = scenario.topology_options
        if not scenario.shared_topology:
            topology = make_topology(scenario.topology, self.binary, directory, **options)
            return topology.start(), True
        key = (scenario.topology, repr(sorted(options.items())))
        if key not in self._shared:
            topology = make_topology(scenario.topology, self.binary, self.directory, **options)
            self._shared[key] = topology.start()
        topology = self._shared[key]
        topology.heal()
        for server in topology.servers:  # replicas refuse FLUSHALL: their masters flush them
            if server.process is not None:
                with contextlib.suppress(redis.exceptions.RedisError), probe(server.port) as c:
                    c.flushall()
        return topology, False

    def close(self) -> None:
        for topology in self._shared.values():
            topology.stop()
        self._shared.clear()
        self.sinks.close()
        self.resource.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Lab:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_scenario(
    scenario: Scenario,
    mode: Mode,
    lab: Lab,
    *,
    keep: bool = False,
    log: Callable[[str], None] = lambda line: None,
) -> Result:
    """Run ``scenario`` once in ``mode`` with ``lab``'s servers (the resource is flushed)."""
    begin = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix=f"chaos-{scenario.slug}-"))
    skipped = scenario.unavailable(lab.binary)
    if skipped:
        empty = checker.Report({}, [], [])
        return Result(scenario, empty, 0, 0.0, directory, skipped=skipped)
    errors: list[str] = []
    resource = lab.resource
    with contextlib.closing(resource.client()) as raw:
        raw.flushall()
    topology: Topology | None = None
    owned = True
    run: Run | None = None
    try:
        sink = lab.sinks.spec(scenario.sink, resource.server.port)
        topology, owned = lab.topology(scenario, directory)
        for index in scenario.proxied:
            topology.proxy(index)
        run = Run(scenario, mode, topology, resource, directory, sink)
        for name in run.names:
            kind = run.kind_of[name]
            run.record(h.CONFIG, worker=h.HARNESS, name=name, value=round(scenario.ttl * 1000),
                       detail=kind)  # fmt: skip
        run.start_workers()
        run.sleep(mode.warmup)
        for cycle in range(mode.cycles):
            try:
                scenario.schedule(run, cycle)
            except Exception as exc:  # the run goes on: the history shows what was done
                errors.append(f"cycle {cycle}: {exc!r}")
                log(traceback.format_exc())
            run.sleep(mode.quiet + scenario.ttl)  # time to recover, and to be seen recovering
        run.stop_workers()
        topology.heal()
        run.probe_final_state()
    except Unavailable as exc:
        skipped = str(exc)
    except Exception as exc:
        errors.append(f"harness: {exc!r}")
        log(traceback.format_exc())
    finally:
        if run is not None:
            run.close()
        if topology is not None:
            with contextlib.suppress(Exception):
                topology.heal()
            if owned:
                topology.stop()
    if skipped:
        shutil.rmtree(directory, ignore_errors=True)
        return Result(scenario, checker.Report({}, [], []), 0, 0.0, directory, skipped=skipped)
    events = h.read_dir(directory)
    report = checker.check(events)
    faults = sum(1 for e in events if e.kind == h.FAULT_START)
    result = Result(scenario, report, faults, time.monotonic() - begin, directory, errors)
    if not keep and not errors:
        shutil.rmtree(directory, ignore_errors=True)
    return result
