"""The explorer (issue 25, parts 3 and 6): every schedule up to a bound, or seeded random ones.

**Exhaustive** (``exhaustive``): a depth-first search over the scheduler's choices (``world.py``),
CHESS-style: the default at each choice point is the oldest message in flight (time moves only
when nothing is), and a schedule may depart from the default at most ``k`` times (a
*preemption*: a later message first, or time moved while messages wait, which delays them),
plus at most one fault, at any step, of the configuration's kinds. Each run is replayed from the
start along a prefix of choices; at every new choice point the state is hashed
(``World.digest``: the servers' keys, what is in flight, every process's grants, phases and
timers), and a state already explored with no more preemptions spent is not explored again.

**Random** (``random_runs``): seeded runs, each choice drawn from its seed (mostly the default,
sometimes any other), with up to ``faults`` faults.

Any violation stops the search and is reported with the schedule that replays it: a seed, or
the steps where the run departed from the default (``step.choice,...``).

    python -m tests.sim.explore                      # the CI budget, with figures
    python -m tests.sim.explore --long               # the long run (docs/safety.md's figures)
    python -m tests.sim.explore --replay lock:pause 12.1,40.3   # one run, step by step
    python -m tests.sim.explore --replay lock:random --seed 17
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .loop import Spinning, deterministic, virtual_monotonic
from .scenario import Plan, Scenario, Spec, Violation
from .world import Option, World

MAX_STEPS = 4000


class Pruned(Exception):
    """This run reached a state explored before: the rest of it was explored then."""


class Default:
    """Always the default: the oldest message, else the next timer."""

    def choose(self, world: World, options: list[Option]) -> int:
        return 0


class Replay:
    """The default, except at the steps given (``{step: choice}``)."""

    def __init__(self, forced: dict[int, int]) -> None:
        self.forced = forced
        self.step = 0

    def choose(self, world: World, options: list[Option]) -> int:
        index = self.forced.get(self.step, 0)
        self.step += 1
        if index >= len(options):
            raise RuntimeError(f"step {self.step - 1} has {len(options)} options, not {index + 1}")
        return index


class Randomly:
    """Choices drawn from a seed: mostly the default, sometimes another (a message out of
    order, or time moved while messages wait); a fault now and then while the budget lasts."""

    def __init__(self, seed: int, fault_rate: float = 0.02) -> None:
        self.rng = random.Random(seed)
        self.fault_rate = fault_rate

    def choose(self, world: World, options: list[Option]) -> int:
        rng = self.rng
        faults = [i for i, o in enumerate(options) if o.kind == "fault"]
        if faults and rng.random() < self.fault_rate:
            return rng.choice(faults)
        normal = [i for i, o in enumerate(options) if o.kind != "fault"]
        return normal[0] if rng.random() < 0.8 else rng.choice(normal)


class Search:
    """The exhaustive chooser of one run: follows ``prefix``, then defaults, recording where the
    search may branch next (``frontier``) and pruning states already explored."""

    def __init__(self, prefix: list[int], explorer: Exhaustive) -> None:
        self.prefix = prefix
        self.explorer = explorer
        self.taken: list[int] = []
        self.preemptions = 0
        self.faults = 0

    def choose(self, world: World, options: list[Option]) -> int:
        step = len(self.taken)
        explorer = self.explorer
        if step < len(self.prefix):
            index = self.prefix[step]
        else:
            index = 0
            state = world.digest()
            spent = explorer.seen.get(state)
            if spent is not None and spent <= self.preemptions:
                raise Pruned
            explorer.seen[state] = self.preemptions
            for alternative, option in enumerate(options[1:], 1):
                level = self.preemptions + (option.kind != "fault")
                if level <= explorer.k:
                    explorer.frontier[level].append([*self.taken, alternative])
        option = options[index]
        if option.kind == "fault":
            self.faults += 1
        elif index:
            self.preemptions += 1
        self.taken.append(index)
        return index


@dataclass
class Outcome:
    spec: Spec
    violation: Violation | None = None
    steps: int = 0
    pruned: bool = False
    faults: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    schedule: str = ""  # the steps that departed from the default: "step.choice,..."
    budget: int = 1  # the faults it was allowed
    seed: int | None = None  # a random run's


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The library's warnings (lost leases are expected here) and log lines, silenced."""
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def run(
    spec: Spec,
    chooser: object,
    *,
    faults: int = 1,
    seed: int = 0,
    patches: dict[str, str] | None = None,
) -> Outcome:
    """One run of ``spec`` as ``chooser`` decides (at most ``faults`` faults), checked
    throughout (``scenario.Checker``), then the probe for orphans with the faults healed."""
    scenario = Scenario(spec, patches)
    world, checker = scenario.world, scenario.checker
    world.on_settled.append(checker.settled)
    world.on_step.append(checker.stepped)
    outcome = Outcome(spec, budget=faults)

    def offered() -> list[Option]:
        return scenario.fault_options(spec.faults) if len(world.faults) < faults else []

    with virtual_monotonic(world.clock), deterministic(seed), quiet():
        try:
            while world.step(chooser, offered, lambda: scenario.done):  # type: ignore[arg-type]
                if checker.violation is not None:
                    raise checker.violation
                if len(world.steps) > MAX_STEPS:
                    raise Violation("bounds", f"no end after {MAX_STEPS} steps")
            if checker.violation is not None:
                raise checker.violation
            if not scenario.done:
                raise Violation("bounds", "nothing can happen, and the actors are not done")
            checker.finish()
            scenario.heal()
            probe = scenario.probe()
            while world.step(Default(), stop=lambda: probe.process.done):
                if checker.violation is not None:
                    raise checker.violation
                if len(world.steps) > MAX_STEPS:
                    raise Violation("bounds", f"no end after {MAX_STEPS} steps")
            probe.check()
        except Violation as violation:
            outcome.violation = violation
        except Spinning as exc:
            outcome.violation = Violation("bounds", f"a process spins: {exc}")
        except Pruned:
            outcome.pruned = True
        finally:
            world.close()
    outcome.steps = len(world.steps)
    outcome.faults = list(world.faults)
    outcome.log = world.log
    outcome.schedule = ",".join(f"{i}.{s.index}" for i, s in enumerate(world.steps) if s.index)
    return outcome


class Exhaustive:
    """Every schedule of ``spec`` with at most ``k`` preemptions and ``faults`` faults (see the
    module's docstring), until a violation or ``budget`` runs."""

    def __init__(self, spec: Spec, k: int, faults: int = 1, patches: dict[str, str] | None = None):
        self.spec, self.k, self.faults, self.patches = spec, k, faults, patches
        self.seen: dict[str, int] = {}
        # schedules to run, per preemptions spent: the fewest first (iterative deepening)
        self.frontier: list[list[list[int]]] = [[[]]] + [[] for _ in range(k)]
        self.runs = self.pruned = self.injected = 0
        self.complete = False

    def explore(self, budget: int | None = None, seconds: float | None = None) -> Outcome | None:
        """The first violating run, or None (``complete``: every schedule was explored)."""
        started = time.monotonic()
        while any(self.frontier):
            if budget is not None and self.runs >= budget:
                return None
            if seconds is not None and time.monotonic() - started > seconds:
                return None
            prefix = next(level for level in self.frontier if level).pop()
            outcome = run(self.spec, Search(prefix, self), faults=self.faults, patches=self.patches)
            self.runs += 1
            self.pruned += outcome.pruned
            self.injected += len(outcome.faults)
            if outcome.violation is not None:
                return outcome
        self.complete = True
        return None


class Random:
    """Seeded runs of ``spec``, each with up to ``faults`` faults."""

    def __init__(self, spec: Spec, faults: int = 3, patches: dict[str, str] | None = None):
        self.spec, self.faults, self.patches = spec, faults, patches
        self.runs = self.injected = 0

    def explore(self, seeds: range) -> Outcome | None:
        """The first violating run, or None."""
        for seed in seeds:
            outcome = run(
                self.spec, Randomly(seed), faults=self.faults, seed=seed, patches=self.patches
            )
            self.runs += 1
            self.injected += len(outcome.faults)
            if outcome.violation is not None:
                outcome.seed = seed
                return outcome
        return None


def report(outcome: Outcome) -> str:
    """A violation, its replay command, and the run step by step."""
    spec = outcome.spec
    command = f"python -m tests.sim.explore --replay {spec.name} {outcome.schedule or '-'}"
    if outcome.budget != 1:
        command += f" --faults {outcome.budget}"
    lines = [
        f"VIOLATION in {spec.name}: {outcome.violation}",
        f"faults: {', '.join(outcome.faults) or 'none'}; {outcome.steps} steps"
        + ("" if outcome.seed is None else f"; random seed {outcome.seed}"),
        f"replay: {command}",
        *outcome.log,
    ]
    return "\n".join(lines)


# -- the configurations -------------------------------------------------------------------------

LOCK = Plan(kind="lock")
SHORT = Plan(kind="lock", rounds=1)
# a lock without renewal whose holder outlives its lease, and releases late
LATE = Plan(kind="lock", auto_renew=False, work=1.2)
# lock objects of one client that hand the grant on, extending it as they work
LOCAL = Plan(kind="lock", work=0.15, works=2, extend=True, timeout=5)
# a holder that drops its lock without releasing it, and a lock object queued behind it once
# it holds
DROPPED = Plan(kind="lock", auto_renew=False, release=False, rounds=1)
BEHIND = Plan(kind="lock", rounds=1, follows=True)


def _spec(name: str, processes: tuple[tuple[Plan, ...], ...], **kw: object) -> Spec:
    return Spec(name, processes, **kw)  # type: ignore[arg-type]


SPECS: dict[str, Spec] = {
    s.name: s
    for s in (
        _spec("lock", ((LOCK,), (LOCK,)), faults=("pause", "crash", "restart", "reset", "drop")),
        _spec("expiry", ((LATE,), (LOCK,)), faults=("pause", "drop", "clock")),
        _spec("lapse", ((DROPPED, BEHIND), (SHORT,)), faults=("pause", "crash", "reset")),
        _spec("handoff", ((LOCAL, LOCAL), (LOCAL,)), faults=("restart", "failover", "pause")),
        _spec(
            "reentrant",
            ((Plan(kind="reentrant"),), (Plan(kind="reentrant"),)),
            faults=("pause", "failover", "drop"),
        ),
        _spec(
            "semaphore",
            ((Plan(kind="semaphore"),),) * 3,
            limit=2,
            faults=("pause", "crash", "drop"),
        ),
        _spec(
            "rwlock",
            (
                (Plan(kind="write", rounds=1),),
                (Plan(kind="read", rounds=1),),
                (Plan(kind="read", rounds=1),),
            ),
            faults=("pause", "reset", "drop"),
        ),
        _spec(
            "redlock",
            ((SHORT,), (SHORT,)),
            nodes=3,
            redlock=True,
            faults=("node-lost", "pause", "drop"),
        ),
        _spec(
            "election",
            ((Plan(kind="election", rounds=1, block=True),),) * 2,
            faults=("pause", "crash", "clock"),
        ),
    )
}


# Configurations in which the explorer found a broken promise of today's code: each has a
# regression test (tests/explore/test_findings.py) and replays like the others.
FINDINGS: dict[str, Spec] = {
    s.name: s
    for s in (
        # a lock object queued while the head of its client's line was still acquiring is not
        # told when the head's grant then lapses without a release
        _spec("lapse-race", ((DROPPED, SHORT),)),
    )
}


@dataclass
class Figures:
    """What one configuration's exploration amounted to (docs/safety.md)."""

    name: str
    k: int
    runs: int = 0  # exhaustive schedules run (to their end, or to a state already explored)
    complete: bool = False
    states: int = 0
    seeds: int = 0
    injected: int = 0  # faults, in both modes
    violations: int = 0
    seconds: float = 0.0

    def row(self) -> str:
        runs = f"{self.runs}" + (" (all)" if self.complete else "")
        return (
            f"| `{self.name}` | {self.k} | {runs} | {self.states} | {self.seeds} | "
            f"{self.injected} | {self.violations} | {self.seconds:.0f} s |"
        )


HEADER = (
    "| configuration | k | schedules (exhaustive) | distinct states | random seeds | "
    "faults injected | violations | time |\n|---|---|---|---|---|---|---|---|"
)
# The budgets: CI's (the test suite, about a minute in all) and the long run's.
CI = {"k": 1, "budget": 120, "seconds": None, "seeds": 15}
LONG = {"k": 1, "budget": None, "seconds": 600.0, "seeds": 500}


def measure(
    spec: Spec, k: int, budget: int | None, seconds: float | None, seeds: int
) -> tuple[Figures, Outcome | None]:
    """Explore ``spec`` exhaustively within the budget, then with random seeds: the figures,
    and the first violation found (None: none)."""
    started = time.monotonic()
    exhaustive, randomly = Exhaustive(spec, k), Random(spec)
    found = exhaustive.explore(budget=budget, seconds=seconds)
    if found is None:
        found = randomly.explore(range(seeds))
    figures = Figures(
        spec.name,
        k,
        exhaustive.runs,
        exhaustive.complete,
        len(exhaustive.seen),
        randomly.runs,
        exhaustive.injected + randomly.injected,
        int(found is not None),
        time.monotonic() - started,
    )
    return figures, found


def mutant_row(mutant: Any) -> str:
    """Run the explorer on one mutant within the CI budget: its row of the table."""
    spec = SPECS[mutant.config]
    started = time.monotonic()
    with mutant.functions_patched():
        exhaustive = Exhaustive(spec, CI["k"], patches=mutant.patches())
        found = exhaustive.explore(budget=CI["budget"])
    seconds = time.monotonic() - started
    if found is None:
        return f"| {mutant.what} | `{spec.name}` | not found in {exhaustive.runs} schedules |"
    assert found.violation is not None
    return (
        f"| {mutant.what} | `{spec.name}` | {exhaustive.runs} schedules, {seconds:.1f} s: "
        f"{found.violation.check}, after {found.steps} steps | `{found.schedule or '-'}` |"
    )


def write_docs(table: str) -> None:
    """Put ``table`` in docs/safety.md, between its markers."""
    path = Path(__file__).resolve().parents[2] / "docs" / "safety.md"
    text = path.read_text(encoding="utf-8")
    begin, end = "<!-- explore:begin -->", "<!-- explore:end -->"
    before, rest = text.split(begin)
    _, after = rest.split(end)
    path.write_text(f"{before}{begin}\n{table}\n{end}{after}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.explore")
    parser.add_argument("--long", action="store_true", help="the long run (docs/safety.md)")
    parser.add_argument("--config", action="append", choices=sorted(SPECS))
    parser.add_argument("--mutants", action="store_true", help="the seeded bugs, each found?")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--replay", nargs="+", metavar="CONFIG [SCHEDULE]")
    parser.add_argument("--seed", type=int, help="with --replay: a random run's seed")
    parser.add_argument("--faults", type=int, default=None, help="with --replay")
    args = parser.parse_args(argv)
    if args.replay:
        name, schedule = args.replay[0], (args.replay[1:] or ["-"])[0]
        spec = {**SPECS, **FINDINGS}[name]
        if args.seed is not None:
            chooser: Any = Randomly(args.seed)
            faults = 3 if args.faults is None else args.faults
        else:
            forced = {}
            for part in filter(None, [] if schedule == "-" else schedule.split(",")):
                step, choice = part.split(".")
                forced[int(step)] = int(choice)
            chooser, faults = Replay(forced), 1 if args.faults is None else args.faults
        outcome = run(spec, chooser, faults=faults, seed=args.seed or 0)
        print(report(outcome) if outcome.violation else "\n".join(outcome.log))
        return 1 if outcome.violation else 0
    if args.mutants:
        from .mutants import MUTANTS

        print("| fix undone / script broken | configuration | found | schedule |")
        print("|---|---|---|---|")
        for mutant in MUTANTS:
            print(mutant_row(mutant), flush=True)
        return 0
    budget = LONG if args.long else CI
    rows, failed = [], False
    print(HEADER)
    for name in args.config or SPECS:
        figures, found = measure(SPECS[name], **budget)  # type: ignore[arg-type]
        rows.append(figures.row())
        print(rows[-1], flush=True)
        if found is not None:
            print(report(found))
            failed = True
    if args.write_docs and not failed:
        write_docs("\n".join([HEADER, *rows]))
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
