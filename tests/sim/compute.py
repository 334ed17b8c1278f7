"""The explorer's compute-once configuration (issue 31): processes that each ask for one result
with ``compute_once`` (the library's own ``AsyncResults`` over a simulated client), whose
``compute`` takes virtual time, under the explorer's faults; and what must hold whatever the
schedule, checked at every step (``ComputeChecker``):

- **builds**: one build per generation: a build (``compute`` called) never begins while a
  result is stored, nor while another build's lease is held by a running process, unless a fault
  lost or expired grants on the server;
- **stores**: no stale overwrite: the token of the stored result never decreases (a builder
  whose lease ran out cannot store over a newer build's result), and only a build's result is
  ever stored;
- **results**: every call returns the result of a build, or raises a ``LockError``, within its
  bound;
- **wake-up**: no caller is left waiting while a result is stored, or while nobody holds the
  builder's lease (it must take the build over), with nothing in flight for longer than the
  explorer's patience;
- **orphans**: once every caller is done and the faults healed, no lease key outlives its ttl,
  and a fresh caller has a result within 1.5 ttl + 1 s.

A configuration is a ``Spec`` whose plans are of kind "compute" (``rounds`` calls, each within
``timeout``, a build taking ``work`` seconds, the first after ``delay``) and whose ``scenario``
is ``ComputeScenario``; it is explored as any other (``python -m tests.sim.explore --config
compute``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import fencelock._async.compute as compute_module
from fencelock._async.compute import AsyncResults
from fencelock._context import current_token
from fencelock._core.compute import (
    COMPUTE,
    COMPUTE_FORGET,
    COMPUTE_LOOK,
    COMPUTE_STORE,
    MAX_SIZE,
    ComputeKeys,
)
from fencelock._keys import DEFAULT_PREFIX
from fencelock.errors import LockError

from .mutants import Mutant
from .scenario import OVERLAPPING, SILENT, Scenario, Spec, Violation, _live
from .topology import REQUEST_TIMEOUT
from .world import Option, Process, World

KEY = "report"
KEYS = ComputeKeys.for_compute(KEY, DEFAULT_PREFIX, COMPUTE)
FRESH_FOR = 100.0  # every result stored stays fresh for the whole run


async def compute_once(
    results: AsyncResults, build: Any, *, ttl: float = 30.0, timeout: float | None
) -> Any:
    """``client.compute_once(KEY, build, fresh_for=FRESH_FOR, ttl=ttl, timeout=timeout)``: the
    client's call, over a simulated process's ``AsyncResults``."""
    ask: dict[str, Any] = {"fresh_for": FRESH_FOR, "stale_for": 0.0, "ttl": ttl}
    call = results.call(COMPUTE, KEY, build, **ask, timeout=timeout, codec=None, max_size=MAX_SIZE)
    return await results.get(call)


class Caller:
    """One process's calls of ``compute_once``."""

    def __init__(self, scenario: ComputeScenario, process: Process, plan: Any) -> None:
        self.scenario, self.process, self.plan = scenario, process, plan
        self.label = process.name
        self.phase = "start"  # start, call (asking, or waiting for another's build), build, done
        self.builds = 0

    def note(self, what: str) -> None:
        world = self.scenario.world
        world.log.append(f"{world.clock.now:9.4f}  {self.label}: {what}")

    async def run(self, results: AsyncResults) -> None:
        checker, plan = self.scenario.checker, self.plan
        try:
            await asyncio.sleep(plan.delay)
            for _ in range(plan.rounds):
                self.phase = "call"
                started, paused = self.scenario.world.clock.now, self.process.paused_total
                try:
                    value = await compute_once(
                        results, self.build, ttl=self.scenario.spec.ttl, timeout=plan.timeout
                    )
                    self.note(f"returned {value!r}")
                    checker.returned(self, value)
                except LockError as exc:
                    self.note(f"raised {type(exc).__name__}")
                world = self.scenario.world
                took = world.clock.now - started - (self.process.paused_total - paused)
                if took > checker.bound(plan) + 1e-9:
                    checker.fail("bounds", f"{self.label}: a call took {took:.4f} s")
                self.phase = "start"
        except (asyncio.CancelledError, Violation):
            raise
        except BaseException as exc:  # a call failed with an untyped error
            checker.fail("typed", f"{self.label}: {exc!r}")
        finally:
            self.phase = "done"

    async def build(self) -> str:
        """``compute``: a result of its own, after ``work`` seconds."""
        self.builds += 1
        value, token = f"{self.label}#{self.builds}", current_token()
        self.phase = "build"
        self.note(f"builds {value} (token {token})")
        self.scenario.checker.build_began(self, token)
        try:
            await asyncio.sleep(self.plan.work)
        finally:
            self.phase = "call"
            self.scenario.checker.build_ended(self)
        self.scenario.checker.built[value] = token
        return value

    def state(self) -> tuple[Any, ...]:
        return (self.phase, self.builds)


class ComputeChecker:
    """The checks of the module's docstring, fed by the callers and by every step."""

    def __init__(self, scenario: ComputeScenario) -> None:
        self.scenario = scenario
        self.violation: Violation | None = None
        self.built: dict[str, int] = {}  # every build's result -> its token
        self.building: dict[Caller, tuple[int, bytes | None]] = {}  # token, lease holder
        self.top = 0  # the largest token of a stored result seen
        self.waiting: list[Caller] = []  # callers that must act now, at the last settled state
        self.idle: dict[Caller, float] = {}

    def fail(self, check: str, message: str) -> None:
        violation = Violation(check, message)
        if self.violation is None:
            self.violation = violation
        raise violation

    def bound(self, plan: Any) -> float:
        """A call's: its wait, its own build, and the requests around them."""
        return plan.timeout + plan.work + 8 * REQUEST_TIMEOUT

    @property
    def overlaps_allowed(self) -> bool:
        return any(f.split()[0] in OVERLAPPING for f in self.scenario.world.faults)

    @property
    def patience(self) -> float:
        if any(f.split()[0] in SILENT for f in self.scenario.world.faults):
            return self.scenario.spec.ttl + 2 * REQUEST_TIMEOUT + 0.6
        return 0.11

    # -- fed by the callers --------------------------------------------------------------------

    def build_began(self, caller: Caller, token: int) -> None:
        scenario = self.scenario
        stored = scenario.stored()
        if stored is not None:
            self.fail(
                "builds", f"{caller.label} began a build (token {token}) while {stored} was stored"
            )
        for other, (other_token, holder) in self.building.items():
            held = holder is not None and scenario.lease_holder() == holder
            if other.process.running and held and not self.overlaps_allowed:
                self.fail(
                    "builds",
                    f"{caller.label} began a build (token {token}) while {other.label}'s "
                    f"(token {other_token}) held the lease",
                )
        self.building[caller] = (token, scenario.lease_holder())

    def build_ended(self, caller: Caller) -> None:
        self.building.pop(caller, None)

    def returned(self, caller: Caller, value: object) -> None:
        if value not in self.built:
            self.fail("results", f"{caller.label} returned {value!r}, which no build made")

    # -- every step ----------------------------------------------------------------------------

    def settled(self, world: World) -> None:
        scenario = self.scenario
        stored = scenario.stored()
        if stored is not None:
            value, token = stored
            if value not in self.built:
                self.fail("stores", f"{value!r} (token {token}) is stored, which no build made")
            if token < self.top:
                self.fail("stores", f"{value!r} of token {token} stored over token {self.top}")
            self.top = token
        must_act = stored is not None or scenario.lease_holder() is None
        self.waiting = [
            c for c in scenario.callers if c.phase == "call" and c.process.running and must_act
        ]
        for caller in list(self.idle):
            if caller not in self.waiting:
                del self.idle[caller]

    def stepped(self, world: World, option: Option, idle: float) -> None:
        """Time passed with nothing in flight while callers had to act (take the stored
        result, or take the build over)."""
        if not idle:
            return
        for caller in self.waiting:
            spent = self.idle.get(caller, 0.0) + idle
            self.idle[caller] = spent
            if spent > self.patience:
                what = "a result is stored" if self.scenario.stored() else "nobody builds"
                self.fail("wake-up", f"{caller.label} waits while {what}, for {spent:.4f} s")

    def finish(self) -> None:
        for caller in self.scenario.callers:
            if caller.phase != "done" and not caller.process.crashed:
                self.fail("bounds", f"{caller.label} never finished ({caller.phase})")
        for message in self.scenario.world.loop_errors:
            self.fail("loop", message)


class ComputeScenario(Scenario):
    """A ``Scenario`` whose processes call ``compute_once`` (the faults, the clients, the end
    of a run are the lock scenario's)."""

    def __init__(self, spec: Spec, patches: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.world = World(nodes=spec.nodes, patches=patches)
        for node in self.world.nodes:  # (cached as the lock scripts are: runs replay alike)
            for script in (COMPUTE_LOOK, COMPUTE_STORE, COMPUTE_FORGET):
                node.load(script.source)
        self.checker = ComputeChecker(self)  # type: ignore[assignment]
        self.clients = []
        self.callers: list[Caller] = []
        for i, plans in enumerate(spec.processes):
            process = self.world.process(f"p{i}")
            callers = [Caller(self, process, plan) for plan in plans]
            self.callers += callers
            process.state = lambda callers=callers: tuple(c.state() for c in callers)
            self.world.start(process, self._run(process, callers))

    async def _run(self, process: Process, callers: list[Caller]) -> None:
        client = self.client(process)
        # labelled by process: the default label names a task, which differs between runs
        results = AsyncResults(replace(client.wiring, label=process.name))
        await asyncio.gather(*(caller.run(results) for caller in callers))
        await client.close()

    def stored(self) -> tuple[str, int] | None:
        """The result stored on the server now, and its token."""
        fields = self._live(KEYS.result)
        if not isinstance(fields, dict) or b"v" not in fields:
            return None
        return json.loads(fields[b"v"]), int(fields[b"f"])

    def lease_holder(self) -> bytes | None:
        holder = self._live(KEYS.lock)  # 'holder token'
        return holder.partition(b" ")[0] if isinstance(holder, bytes) else None

    def _live(self, key: str) -> Any:
        node = self.world.nodes[0]
        return _live(node, key.encode(), self.world.clock.now) if node.up else None

    def probe(self) -> ComputeProbe:  # type: ignore[override]
        return ComputeProbe(self)


class ComputeProbe:
    """A fresh process that must have a result within 1.5 ttl + 1 s, after which no lease key
    outlives its ttl."""

    def __init__(self, scenario: ComputeScenario) -> None:
        self.scenario = scenario
        self.process = scenario.world.process("probe")
        self.result: Any = None
        scenario.world.start(self.process, self._main())

    async def _main(self) -> None:
        scenario = self.scenario
        client = scenario.client(self.process)
        results = AsyncResults(replace(client.wiring, label="probe"))

        async def build() -> str:
            scenario.checker.built["probe"] = current_token()
            return "probe"

        wait = 1.5 * scenario.spec.ttl + 1
        try:
            self.result = await compute_once(results, build, timeout=wait)
        except LockError as exc:
            self.result = exc
        await client.close()

    def check(self) -> None:
        checker = self.scenario.checker
        if self.result not in checker.built:
            checker.fail("orphans", f"a fresh caller had no result: {self.result!r}")
        world, ttl_ms = self.scenario.world, self.scenario.spec.ttl * 1000
        node = world.nodes[0]
        now_ms = node.now_us(world.clock.now) // 1000
        for key, entry in node.server.keys.items():
            if key.endswith(b":lock"):
                left = None if entry.expires_at is None else entry.expires_at - now_ms
                if left is None or left > ttl_ms:
                    checker.fail("orphans", f"{key!r}: {left} ms left")


# -- proof that it bites: the compute configuration must find each of these within the CI budget
# (tests/explore/test_compute.py; a builder that does not look again once it holds the lease is
# found only by a schedule that reorders two callers' requests: that test forces it)


@dataclass(frozen=True)
class MethodMutant:
    """A method of ``AsyncResults`` with one change, patched in for a run: a ``Mutant`` (whose
    ``functions`` are a module's functions) of the compute configuration."""

    name: str
    what: str
    method: str
    old: str
    new: str
    config: str = "compute"

    def patches(self) -> dict[str, str]:
        return {}  # (no script changed)

    @contextlib.contextmanager
    def functions_patched(self) -> Iterator[None]:
        cls = AsyncResults
        original = vars(cls)[self.method]
        source = textwrap.dedent(inspect.getsource(original))
        assert self.old in source, f"{self.old!r} not in AsyncResults.{self.method}"
        namespace = dict(vars(compute_module))
        exec(
            compile(source.replace(self.old, self.new), compute_module.__file__ or "", "exec"),
            namespace,
        )
        setattr(cls, self.method, namespace[self.method])
        try:
            yield
        finally:
            setattr(cls, self.method, original)


MUTANTS: tuple[Mutant | MethodMutant, ...] = (
    Mutant(
        "compute-unfenced-store",
        "compute_store.lua stores whatever the builder's token: a builder paused past its "
        "lease stores over the newer build's result",
        "compute",
        scripts=(
            (COMPUTE_STORE, "if below(token, seen) or below(token, counter) then", "if false then"),
        ),
    ),
    MethodMutant(
        "compute-no-look-at-the-lease-end",
        "a waiter does not look again when the builder's lease would end: a builder that died "
        "leaves it waiting until its timeout",
        "_wait",
        "ends, ttl = found.lease_left, call.options.ttl",
        "ends, ttl = None, 3600.0",
    ),
)
