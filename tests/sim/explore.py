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
    outcome = Outcome(spec)

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
        self.runs = 0
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
            search = Search(prefix, self)
            outcome = run(self.spec, search, faults=self.faults, patches=self.patches)
            self.runs += 1
            if outcome.violation is not None:
                return outcome
        self.complete = True
        return None


def random_runs(
    spec: Spec, seeds: range, *, faults: int = 3, patches: dict[str, str] | None = None
) -> tuple[int, Outcome | None]:
    """Run ``spec`` once per seed: (runs, the first violating run or None)."""
    done = 0
    for seed in seeds:
        outcome = run(spec, Randomly(seed), faults=faults, seed=seed, patches=patches)
        done += 1
        if outcome.violation is not None:
            outcome.schedule = f"--seed {seed}"
            return done, outcome
    return done, None


def report(outcome: Outcome) -> str:
    """A violation, its replay command, and the run step by step."""
    spec = outcome.spec
    lines = [
        f"VIOLATION in {spec.name}: {outcome.violation}",
        f"faults: {', '.join(outcome.faults) or 'none'}; {outcome.steps} steps",
        f"replay: python -m tests.sim.explore --replay {spec.name} {outcome.schedule or '-'}",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.explore")
    parser.add_argument("--replay", nargs=2, metavar=("CONFIG", "SCHEDULE"))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("-k", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    if args.replay:
        name, schedule = args.replay
        spec = SPECS[name]
        if args.seed is not None:
            outcome = run(spec, Randomly(args.seed), faults=3, seed=args.seed)
        else:
            forced = {}
            for part in filter(None, schedule.split(",") if schedule != "-" else []):
                step, choice = part.split(".")
                forced[int(step)] = int(choice)
            outcome = run(spec, Replay(forced))
        print(report(outcome) if outcome.violation else "\n".join(outcome.log))
        return 1 if outcome.violation else 0
    for spec in SPECS.values():
        started = time.monotonic()
        explorer = Exhaustive(spec, args.k)
        found = explorer.explore(budget=args.runs)
        print(
            f"{spec.name}: {explorer.runs} runs, {len(explorer.seen)} states, "
            f"complete={explorer.complete}, {time.monotonic() - started:.1f} s"
        )
        if found is not None:
            print(report(found))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
