"""The explorer (issue 25, parts 3 and 6): every schedule up to a bound, or seeded random ones.

**Exhaustive** (``Exhaustive``): a search over the scheduler's choices (``world.py``),
CHESS-style: the default at each choice point is the oldest message in flight (time moves only
when nothing is), and a schedule may depart from the default at most ``k`` times (a
*preemption*: a later message first, or time moved while messages wait, which delays them),
plus at most one fault, at any step, of the configuration's kinds; the schedules with the
fewest preemptions first, depth first within them. Each run is replayed from the start along a
prefix of choices; at every new choice point the state is hashed (``World.digest``: the
servers' keys, what is in flight, every process's grants, phases and timers), and a state
already explored with no more preemptions spent is not explored again. (The hash leaves out
the history the checker keeps, such as the tokens of earlier grants: a run cut short there was
explored from the same state, with another past.)

**Random** (``Random``): seeded runs, each choice drawn from its seed (mostly the default,
sometimes any other), with up to three faults.

Any violation stops the search and is reported with the schedule that replays it: the steps
where the run departed from the default (``step.choice,...``), or a random run's seed.

    python -m tests.sim.explore                    # the CI budget, with figures
    python -m tests.sim.explore --long --write-docs   # the long run: docs/safety.md
    python -m tests.sim.explore --mutants          # the seeded bugs: each must be found
    python -m tests.sim.explore --replay rwlock 5.2,17.7   # one run, step by step
    python -m tests.sim.explore --replay lock --seed 17      # a random run
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import platform
import random
import re
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compute import ComputeScenario
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

    def __init__(self, seed: int, fault_rate: float = 0.05) -> None:
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
    scenario = (spec.scenario or Scenario)(spec, patches)
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
    if outcome.seed is not None:  # (a random run: its seed says the same, shorter)
        command = f"python -m tests.sim.explore --replay {spec.name} --seed {outcome.seed}"
    elif outcome.budget != 1:
        command += f" --faults {outcome.budget}"
    lines = [
        f"VIOLATION in {spec.name}: {outcome.violation}",
        f"faults: {', '.join(outcome.faults) or 'none'}; {outcome.steps} steps",
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
# compute_once calls whose build spans a renewal of its 1 s lease, or is over within a request
# timeout (a caller whose first try at the lease was lost tries again after it)
BUILDER = Plan(kind="compute", rounds=1, work=0.45)
QUICK_BUILDER = Plan(kind="compute", rounds=1, work=0.2)
# holds that the watchdog renews several times (five steps of work, 1.5 ttl; a renewal every
# third of the ttl), writing after each step; a holder that writes without check(), trusting
# the fence alone (ttl 2 s: a waiter's listener, re-made 0.5 s after a restart, can take the
# name before the holder's next renewal)
RENEWED = Plan(kind="lock", rounds=1, work=0.6, works=5, timeout=5)
TRUSTING = Plan(kind="lock", rounds=1, work=0.6, works=5, timeout=5, checks=False)


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
            "barging",
            ((Plan(kind="lock", fair=False),),) * 3,
            faults=("pause", "crash", "drop", "reset"),
        ),
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
        # a node whose clock is a ttl ahead: each grant's tokens differ, the largest written
        # back (a client's second grant is asked for after its first: its token must be larger)
        _spec(
            "redlock-ahead",
            ((LOCK,), (SHORT,)),
            nodes=3,
            redlock=True,
            ahead=1.0,
            faults=("node-lost", "pause"),
        ),
        _spec(
            "election",
            ((Plan(kind="election", rounds=1, block=True),),) * 2,
            faults=("pause", "crash", "clock"),
        ),
        # two builders of one result, and a waiter that comes while it is built (compute.py)
        _spec(
            "compute",
            ((QUICK_BUILDER,), (BUILDER,), (Plan(kind="compute", rounds=2, work=0.45, delay=0.1),)),
            faults=("pause", "crash", "drop", "reset", "restart"),
            scenario=ComputeScenario,
        ),
        _spec(
            "renewed-lock",
            ((TRUSTING,), (RENEWED,)),
            ttl=2.0,
            faults=("pause", "drop", "restart", "failover", "crash"),
        ),
        _spec(
            "renewed-semaphore",
            (
                (Plan(kind="semaphore", rounds=1, works=5, checks=False),),
                (Plan(kind="semaphore", rounds=1, works=5),),
            ),
            faults=("pause", "drop", "restart", "crash"),
        ),
        _spec(
            "renewed-election",
            (
                (Plan(kind="election", rounds=1, block=True, works=5, checks=False),),
                (Plan(kind="election", rounds=1, block=True, works=5),),
            ),
            faults=("pause", "drop", "restart", "clock"),
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
    "faults injected | violating runs | time |\n|---|---|---|---|---|---|---|---|"
)
# The budgets. CI's (the test suite: tests/explore, mutants included, about a minute of CPU in
# all): every schedule with one fault and no preemption, and seeded random runs. The long
# run's: one preemption too, for two minutes per configuration (or until every such schedule
# was run), and 2000 seeds: about 45 minutes in all for 12 configurations on a shared machine
# of 2 cores.
CI: dict[str, Any] = {"k": 0, "budget": None, "seconds": None, "seeds": 20}
LONG: dict[str, Any] = {"k": 1, "budget": None, "seconds": 120.0, "seeds": 2000}


def measure(
    spec: Spec,
    k: int,
    budget: int | None,
    seconds: float | None,
    seeds: int,
    keep_going: bool = False,
) -> tuple[Figures, list[Outcome]]:
    """Explore ``spec`` exhaustively within the budget, then with random seeds: the figures,
    and the violations found (the first only, unless ``keep_going``: then one run for each
    distinct violation, and the exploration goes on past them)."""
    started = time.monotonic()
    exhaustive, randomly = Exhaustive(spec, k), Random(spec)
    found: dict[str, Outcome] = {}
    violations = 0

    def note(outcome: Outcome | None) -> bool:
        nonlocal violations
        if outcome is None:
            return False
        violations += 1
        assert outcome.violation is not None
        found.setdefault(re.sub(r"[0-9.]+", "#", str(outcome.violation))[:60], outcome)
        return keep_going

    while True:
        left = None if seconds is None else seconds - (time.monotonic() - started)
        if not note(exhaustive.explore(budget=budget, seconds=left)):
            break
    while randomly.runs < seeds and (not found or keep_going):
        if not note(randomly.explore(range(randomly.runs, seeds))):
            break
    figures = Figures(
        spec.name,
        k,
        exhaustive.runs,
        exhaustive.complete,
        len(exhaustive.seen),
        randomly.runs,
        exhaustive.injected + randomly.injected,
        violations,
        time.monotonic() - started,
    )
    return figures, list(found.values())


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


SECTION = """\
## Every schedule explored: the simulation

The chaos matrix finds a rare interleaving by luck. `tests/sim/` runs the real library (its
asyncio code: the lease engine, contention, hand-off, the local queue, the pub/sub waiter, the
watchdog, the topologies) against simulated servers under a scheduler that owns every await, so
that interleavings are explored on purpose and every run replays exactly, step by step.

- **The servers** run fencelock's real `.lua` files in Lua 5.1 (lupa), with the commands they
  use, key expiry, `TIME` and pub/sub, on a clock the scheduler moves.
  `tests/sim/test_differential.py` sends the same command streams to `redis-server` and
  `valkey-server` and to the simulation, and compares every reply.
- **The processes**: each simulated client process runs on an asyncio event loop of its own
  (asyncio's loop with no I/O and a virtual clock, which `time.monotonic()` and
  `time.time_ns()` read too), with the
  library's own routes (`AsyncOneServerRoute`, `AsyncQuorumRoute`), requester (its own connections,
  RESP written once per request, raw RESP3 replies) and pub/sub waiter over simulated redis-py
  connections and pub/sub.
  Holder tokens, waiter ids and Redlock's re-try jitter come from a seed.
- **The scheduler** decides what happens whenever every process waits: which message in flight
  is delivered next (a request to a server, its reply, a pub/sub message; each connection keeps
  its order, as TCP does; 0.1 ms a hop), or that time moves to the next timer (delaying what is
  in flight), or a fault: a message dropped, a process's connections reset, a process paused
  (1.5 ttl) or killed, a server restarted empty, a failover to a replica that missed the last
  write, a server's clock jumped forward (2 ttl), a Redlock node lost.
- **Exhaustive mode**: every schedule that departs at most k times from the default (the
  oldest message first; time moves only when nothing is in flight) with at most one fault, at
  any step, the fewest departures first; a state already explored (a hash of the servers' keys,
  the messages in flight, and every process's grants, phases and timers) is not explored again.
  **Random mode**: seeded runs, with up to three faults each.
- **The holders** take the grant, claim the fenced resource (`fenced_set.lua`) with its token
  at once, and after each step of work call `check()` and write there again; one kind of holder
  writes without `check()`, trusting the fence alone.
- **The checks**, at every step of every run: at most one valid holder (`check()` would pass;
  the semaphore's limit in permits; a writer alone) unless a fault dropped or expired grants on
  a server (a restart, a failover, a clock jump); `check()` never passing beyond the end of the
  lease the servers last gave (a majority's, for Redlock; a fault that drops the grant early
  does not bring that end forward: the holder learns of it at its next renewal), nor once a
  renewal the server refused has reached the holder's process; no write accepted from a holder
  that checked after its lease ended, nor from one a newer grant overtook (it claimed the
  resource first); no grant valid again after its holder was told it is lost; every grant's
  token larger than those returned before it was asked for, no token twice; every loss of an
  `auto_renew` grant signalled (a release that could not reach the server is counted apart, as
  above), and none without a fault or a delayed message; no lease on a server ending more than
  its ttl ahead; under `on_lost_policy="cancel"`, nothing of the block begun after `on_lost`,
  and the block ended with `LockLost`; no waiter left waiting while the name is free and
  nothing is in flight (0.11 s, or the holder's lease end after a fault that loses messages
  unnoticed; a semaphore's or read-write lock's waiter queued behind one that crashed, gave up
  or is paused waits out that one's turn first, as the scripts' first come, first served order
  says); every call within its bound and failing only with a `LockError`; after the run, no
  lock key outliving its ttl and a fresh client taking the whole name within 1.5 ttl + 1 s.

Any violation prints the run step by step and the command that replays it:
`python -m tests.sim.explore --replay CONFIG SCHEDULE` (the steps where the run departed from
the default, as `step.choice`), or `--seed N` for a random run. The configurations, each on one
name with a ttl of 1 s unless said: `lock`, two clients, `auto_renew`, two rounds each;
`expiry`, a holder without renewal that outlives its lease and releases late, against a renewed
one; `lapse`, a holder that drops its lock without a release, a lock object of the same client
queued behind it, and another client; `handoff`, two lock objects of one client handing the
grant on (and extending it) against a third client; `barging`, three clients of a barging lock
(`fair=False`: a release wakes the first waiter, whoever asks first takes the name);
`reentrant`, two clients entering twice;
`semaphore`, limit 2, three clients; `rwlock`, a writer and two readers; `redlock`, three
nodes, two clients; `redlock-ahead`, the same with one node's clock a ttl ahead (every grant's
tokens differ: the largest is written back), one client taking the name twice;
`election`, two candidates in `async with` blocks
(`on_lost_policy="cancel"`). In those, every hold ends before the watchdog's first renewal (a
third of the ttl). Three more hold for 1.5 ttl in five steps, each lease renewed four times,
against the watchdog's faults (a holder paused past its ttl, a renewal or its reply lost, a
restart or a failover that loses the grant, a crash, a clock jump), one holder of each pair
writing without `check()`: `renewed-lock` (ttl 2 s: a waiter whose connection a restart broke
can then take the name before the holder's next renewal), `renewed-semaphore` (limit 1) and
`renewed-election` (`async with`, `on_lost_policy="cancel"`). And `compute`: two builders of
one `compute_once` result and a waiter that comes while it is built, with checks of their own
(`tests/sim/compute.py`: one build per generation, unless a lease was lost; no stale overwrite
of the stored result; no caller left waiting while a result is stored or nobody builds it).

{figures}

{date}. `tests/explore/` runs the CI budget in the test suite ({ci}); the table is the long run,
`python -m tests.sim.explore --long --write-docs` ({long}).

**Proof that it bites.** Three past fixes undone, three scripts broken (a release that
compares no holder token, and two that lose a wake-up: a release publishes only to the waiters
the queue holds), and seven bugs the watchdog's path could plausibly have (the renewal script,
the watchdog, the cancel policy), each in a scratch copy for one run (`tests/sim/mutants.py`;
`python -m tests.sim.explore --mutants`): the explorer must find each within the CI budget, in a
configuration today's code passes (`tests/explore/test_mutants.py`).

{mutants}

{findings}
"""

FINDINGS_TEXT = """\
**What it found**, each fixed, with a regression test that replays it
(`tests/explore/test_findings.py`):

- `lapse-race` (the default schedule): a lock object queued in its client's local line while
  the head was still acquiring was never told when the head's grant then lapsed without a
  release: it waited for a release, or its own timeout, while the name was free. A waiter
  behind a head that is still acquiring now looks again within the head's ttl, by when any
  grant the head gets has a deadline it can read or has run out (`singleflight.py`,
  `holder_gone`). (The first fix woke every queued waiter on every grant instead, and halved
  the throughput of 8 threads sharing one name, P3; `contention._wait_in_line` also waits for a
  hand-off under way inside its guarded block, so that a cancellation passes the grant on.)
- `rwlock 5.2,17.7` (a reset between a waiter's SUBSCRIBE and the reply to its PING): the
  listener re-subscribed and confirmed that with a PING of its own, but the waiter's nonce,
  lost with the old connection, was never answered: it waited out the confirmation timeout,
  then failed with `LockConnectionError`. The re-subscription's reply now confirms the
  watchers whose PING went before it (`waiter.py`).
- `expiry 19.2,50.1` (a busy reply 0.19 s late, then a lease that ends without a release): the
  fallback re-try came the holder's remaining lease after the reply *arrived*, late by the
  reply's own lateness; it now counts from when the request left (`retry_delay`'s `elapsed`).
- `redlock --seed 124` (first seen as `redlock 0.10,46.2`): a Redlock waiter granted by a
  majority whose token could not be confirmed in time gave the grant back (as it must) and
  then waited a whole ttl while the name was free: such a grant, or one that came too late,
  now answers busy with a pttl of 0 (`grants.py`, `_core/quorum.py`).
- `semaphore --seed 61` (a holder paused, one crashed holding, the first queued waiter
  crashed): with no permit held, a busy reply carried the whole ttl as its pttl instead of the
  dead waiter's remaining turn (`semaphore_acquire.lua`: `ipairs({lease, turn})` stopped at
  the nil `lease` in Lua 5.1).

None of them broke safety (one holder, fencing, loss signals): they were waits longer than the
documented ones, or a call failing that could have succeeded."""


def budget_text(budget: dict[str, Any]) -> str:
    k, runs, seconds, seeds = budget["k"], budget["budget"], budget["seconds"], budget["seeds"]
    limit = (
        f"up to {runs} schedules"
        if runs
        else f"up to {seconds / 60:.0f} minutes"
        if seconds
        else "every schedule"
    )
    return f"k = {k}, {limit}, and {seeds} random seeds per configuration"


def write_docs(figures: str, mutants: str, budget: dict[str, Any]) -> None:
    """Write the simulation's section of docs/safety.md (before "Scenarios")."""
    path = Path(__file__).resolve().parents[2] / "docs" / "safety.md"
    text = path.read_text(encoding="utf-8")
    begin, end = "<!-- explore:begin -->", "<!-- explore:end -->"
    # (the load: a budget in minutes explores fewer schedules on a machine shared with others)
    load = f"load average {os.getloadavg()[2]:.0f} over the last 15 minutes"
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} vCPUs ({load})"
    section = SECTION.format(
        figures=figures,
        mutants=mutants,
        findings=FINDINGS_TEXT,
        ci=budget_text(CI),
        long=budget_text(budget),
        date=f"{datetime.date.today().isoformat()}, {machine}, Python {platform.python_version()}",
    )
    block = f"{begin}\n{section}{end}\n\n"
    if begin in text:
        before, rest = text.split(begin, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
    else:
        before, after = text.split("## Scenarios\n", 1)
        after = "## Scenarios\n" + after
    path.write_text(before + block + after, encoding="utf-8")


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
    mutants = [
        "| fix undone / bug put in | configuration | found | schedule |",
        "|---|---|---|---|",
    ]
    if args.mutants or args.write_docs:
        from .mutants import MUTANTS

        for mutant in MUTANTS:
            mutants.append(mutant_row(mutant))
            print(mutants[-1], flush=True)
        if args.mutants:
            return int(any("not found" in row for row in mutants))
    budget = LONG if args.long else CI
    rows, failed = [], False
    print(HEADER)
    for name in args.config or SPECS:
        figures, found = measure(SPECS[name], **budget, keep_going=args.long)
        rows.append(figures.row())
        print(rows[-1], flush=True)
        for outcome in found:
            print(report(outcome)[:3000], flush=True)
        failed = failed or (bool(found) and not args.long)
    if args.write_docs and not failed:
        write_docs("\n".join([HEADER, *rows]), "\n".join(mutants), budget)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
