"""What the simulated processes do, and what must hold whatever the schedule (issue 25, parts 3
and 4): the chaos suite's promises (bench/chaos/checker.py), checked at every step of a run
instead of on a history afterwards, with what only a simulation can see (the servers' own
state, every process's belief at the same instant).

An **actor** is one primitive object in a process, running its ``Plan``: ``rounds`` times take
the grant (within ``timeout``) and claim the fenced resource with its token (the real
``fenced_set.lua``, on a server no fault touches), then ``works`` times work (virtual seconds),
``check()`` and write its token there (``checks=False``: without the ``check()``, trusting the
fence alone), optionally ``extend()``, and give the grant up. Several actors in one process
share its client: they queue locally and hand the grant on. Every name in a ``Spec`` is one
name ("job") of one primitive.

The checks (``Checker``), each a ``Violation`` with the step it was seen at:

- **holders**: at no instant more valid holders than the primitive allows (one; the semaphore's
  limit in permits; a writer alone or readers), valid meaning that ``check()`` would pass now.
  Not promised after a fault that loses or expires grants on a server (a restart, a failover, a
  clock jump): there, as in the chaos matrix, only fencing and the loss signals are;
- **told**: once a process was told a grant is lost (``on_lost``, ``check()`` or ``release()``
  raising), no object of it holds that grant (its holder token) as valid again;
- **tokens**: every grant's token is larger than those of the grants returned before it was
  asked for, no two grants share one, and the resource never accepts a token older than one it
  accepted (stale write: every grant claims the resource as it is returned, so the write of a
  holder a newer grant overtook must be refused, whether it checked or not);
- **fenced**: the resource never accepts the write of a holder that checked (``check()``
  passed) after its lease ended: the end the servers last gave it (a majority, for Redlock), not
  brought forward by a fault that drops it early (a restart, a failover, a clock jump: the
  holder cannot know before its next renewal);
- **signalled**: ``check()`` never passes beyond the lease's end (as above), nor once a renewal
  refused by the server has reached the holder's process (the watchdog declares that loss at
  once); and every loss of an ``auto_renew`` grant (the servers stopped showing it while it
  was held, and another took the name) is signalled: ``on_lost``, ``check()`` or ``release()``
  raising (the last is no excuse for a ``check()`` that passed beyond the lease's end
  meanwhile);
- **kept**: with no fault and no message delayed, no ``auto_renew`` grant is lost (the watchdog
  renews it in time, however long the hold);
- **wake-up**: a waiter is never left waiting while the name is free for it and nothing is in
  flight: the system idle (no message anywhere) for longer than ``patience`` with a waiting
  acquire and a free name is a lost wake-up; after faults that lose messages without the
  listener noticing, the fallback re-try at the holder's lease end bounds it instead (as it
  does after a pause or a crash where a lock barges: its woken waiter may stop before its
  re-try, and leave the name free);
- **cancel**: under ``on_lost_policy="cancel"`` (the election, and ``async with`` actors),
  nothing of a block begins after ``on_lost``, and the block ends with ``LockLost``;
- **bounds**: every call returns within its bound (an acquire: its timeout plus three request
  timeouts), and with a typed error if any (``LockError``);
- **orphans**: no lease on a server ends more than its ttl ahead (a dead holder's lease ends
  within a ttl); once every actor is done and the faults healed, no lock key outlives its ttl
  and a fresh client takes the name (all of it) within 1.5 ttl + 1 s;
- the loops saw no task die of an unhandled exception.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fencelock import _scripts as scripts
from fencelock._keys import SemaphoreKeys, fence_key_for
from fencelock.errors import LockError, LockLost, LockNotOwned, LockTimeout

from .loop import T0_US
from .server import SimServer
from .topology import REQUEST_TIMEOUT, SimClient, sim_client
from .world import Message, Node, Option, Process, World

NAME = "job"
WRITE_PERMITS = 2**31
# faults after which two valid holders are not a broken promise (the grant is gone early)
OVERLAPPING = ("restart", "failover", "clock")
# faults that lose messages without the listener noticing: waiters fall back on lease ends
SILENT = ("drop", "restart", "failover", "clock", "node-lost")
# faults that stop a process, woken or not
STOPPED = ("pause", "crash")


@dataclass(frozen=True)
class Plan:
    """What one actor does (see the module's docstring)."""

    kind: str = "lock"  # lock, reentrant, semaphore, read, write, election
    rounds: int = 2
    timeout: float = 3.0
    work: float = 0.3
    works: int = 1
    auto_renew: bool = True
    extend: bool = False
    take: int = 1  # a semaphore's permits
    block: bool = False  # ``async with`` instead of acquire()/release()
    release: bool = True  # False: never released (the lease must free the name by itself)
    delay: float = 0.0  # before the first round
    follows: bool = False  # starts once another actor of its process has acquired (or failed to)
    checks: bool = True  # False: writes without check(), trusting the fence alone
    fair: bool = True  # False: a barging lock (``client.lock(name, fair=False)``)


@dataclass(frozen=True)
class Spec:
    """A configuration: the processes (each a list of actors) on one name, and the servers."""

    name: str
    processes: tuple[tuple[Plan, ...], ...]
    ttl: float = 1.0
    nodes: int = 1
    redlock: bool = False
    limit: int = 1  # a semaphore's
    faults: tuple[str, ...] = ()  # the kinds of fault this configuration injects
    max_handoffs: int = 10
    # the first server's clock is ahead of the world's by this many seconds (Redlock: its tokens
    # are the largest, so the majority's differ and the largest must be written back)
    ahead: float = 0.0
    scenario: Any = None  # what runs it (None: ``Scenario``; compute.py's runs compute_once)

    @property
    def barging(self) -> bool:
        """Whether an actor's lock is a barging one (``fair=False``)."""
        return any(not plan.fair for plans in self.processes for plan in plans)


class Violation(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check


@dataclass(eq=False)
class Hold:
    """One grant, as its actor saw it."""

    actor: Actor
    holder: str
    token: int
    requested: float
    start: float
    end: float | None = None  # release called
    told: list[str] = field(default_factory=list)  # how it was told of a loss
    released: str = ""
    gone_at: float | None = None  # when the servers first no longer showed it, while held

    def __repr__(self) -> str:
        return f"{self.actor.label} token {self.token} ({self.holder}) from {self.start:.4f}"


class Resource:
    """The fenced resource: ``fenced_set.lua`` on a server of its own, written instantly."""

    KEY = f"res:{NAME}"

    def __init__(self, checker: Checker) -> None:
        self.server = SimServer()
        self.checker = checker
        self.accepted: list[tuple[int, Hold]] = []

    def write(self, hold: Hold, now: float) -> bool:
        self.server.now_us = T0_US + round(now * 1_000_000)
        keys = [self.KEY, fence_key_for(self.KEY)]
        reply = self.server.execute("w", *scripts.FENCED_SET.eval(keys, [hold.token, hold.token]))
        assert isinstance(reply, list), reply
        if reply[0] != 1:
            return False
        for token, other in self.accepted:
            if token > hold.token:
                self.checker.fail(
                    "tokens", f"stale write accepted: {hold} after token {token} of {other}"
                )
        ended = self.checker.lease_end(hold.holder)
        if hold.actor.plan.checks and now > ended:
            self.checker.fail(
                "fenced",
                f"{hold}: its check() passed and its write was accepted at {now:.4f}, "
                f"after its lease ended at {ended:.4f}",
            )
        self.accepted.append((hold.token, hold))
        return True


class Actor:
    """One primitive object and its plan, in a process."""

    def __init__(self, scenario: Scenario, process: Process, plan: Plan, label: str) -> None:
        self.scenario, self.process, self.plan, self.label = scenario, process, plan, label
        self.obj: Any = None
        self.phase = "start"  # start, acquire, hold, release, done
        self.hold: Hold | None = None
        self.asked_at = 0.0
        self.weight = WRITE_PERMITS if plan.kind == "write" else plan.take

    def make(self, client: SimClient) -> None:
        plan, ttl, spec = self.plan, self.scenario.spec.ttl, self.scenario.spec
        given: dict[str, Any] = {"timeout": plan.timeout, "on_lost": self.on_lost}
        if plan.kind == "election":
            self.obj = client.election(NAME, ttl, **given)
            return
        given["auto_renew"] = plan.auto_renew
        if plan.block:
            given["on_lost_policy"] = "cancel"
        if plan.kind in ("lock", "reentrant"):
            reentrant = plan.kind == "reentrant"
            self.obj = client.lock(NAME, ttl, reentrant=reentrant, fair=plan.fair, **given)
        elif plan.kind == "semaphore":
            self.obj = client.semaphore(NAME, spec.limit, ttl, **given)
        else:
            rw = client.rw_lock(NAME, ttl, **given)
            self.obj = rw.write() if plan.kind == "write" else rw.read()

    # -- what the checker reads ---------------------------------------------------------------

    def grant(self) -> Any:
        return None if self.obj is None else self.obj._lease.grant()

    def valid(self, now: float) -> bool:
        """Whether ``check()`` would pass now (read without declaring anything)."""
        grant = self.grant()
        return grant is not None and not grant.lost and grant.deadline > now

    def state(self) -> tuple[Any, ...]:
        grant = self.grant()
        now = self.scenario.world.clock.now
        held = (
            None
            if grant is None
            else (
                grant.holder,
                grant.fence,
                grant.lost,
                round(grant.deadline - now, 6),
                grant.depth,
            )
        )
        return (self.phase, held)

    # -- the plan ------------------------------------------------------------------------------

    def on_lost(self, _obj: object) -> None:
        self.told("on_lost")

    def told(self, how: str) -> None:
        self.note(f"told {how}")
        if self.hold is not None:
            self.scenario.checker.told(self.hold, how)

    def note(self, what: str) -> None:
        self.scenario.world.log.append(
            f"{self.scenario.world.clock.now:9.4f}  {self.label}: {what}"
        )

    async def run(self) -> None:
        try:
            await asyncio.sleep(self.plan.delay)
            if self.plan.follows:
                await self.scenario.tried[self.process.name].wait()
            for _ in range(self.plan.rounds):
                if self.plan.block:
                    await self._block()
                else:
                    await self._round()
        except asyncio.CancelledError:
            raise
        except Violation:
            raise
        except BaseException as exc:  # a lock call failed with an untyped error
            self.scenario.checker.fail("typed", f"{self.label}: {exc!r}")
        finally:
            self.phase = "done"

    async def _call(self, what: str, call: Any, bound: float) -> Any:
        """Run a library call, checking its bound; a ``LockError`` is returned, not raised."""
        started, paused = self.scenario.world.clock.now, self.process.paused_total
        try:
            return await call
        except LockError as exc:
            self.note(f"{what} raised {type(exc).__name__}")
            return exc
        finally:
            took = self.scenario.world.clock.now - started - (self.process.paused_total - paused)
            if took > bound + 1e-9:
                self.scenario.checker.fail("bounds", f"{self.label}: {what} took {took:.4f} s")

    def _acquire_call(self) -> Any:
        kind, obj = self.plan.kind, self.obj
        if kind == "semaphore":
            return obj.acquire(permits=self.plan.take)
        return obj.acquire()

    async def _round(self) -> None:
        plan = self.plan
        self.phase, self.asked_at = "acquire", self.scenario.world.clock.now
        bound = plan.timeout + 3 * REQUEST_TIMEOUT
        got = await self._call("acquire", self._acquire_call(), bound)
        self.scenario.tried[self.process.name].set()
        if got is not True:
            self.phase = "start"
            self.note(f"acquire -> {got!r}")
            return
        self._took()
        if plan.kind == "reentrant":
            again = await self._call("re-enter", self.obj.acquire(), bound)
            self.note(f"re-enter -> {again!r}")
        await self._work()
        if not plan.release:
            self.phase = "done"
            self.hold = None
            return
        for _ in range(2 if plan.kind == "reentrant" else 1):
            self._releasing()
            if self.grant() is None:
                break
            outcome = await self._call("release", self.obj.release(), 3 * REQUEST_TIMEOUT)
            self._released(outcome)
        self.phase, self.hold = "start", None

    async def _block(self) -> None:
        plan = self.plan
        self.phase, self.asked_at = "acquire", self.scenario.world.clock.now
        started, paused = self.asked_at, self.process.paused_total
        try:
            async with self.obj:
                self._took()
                await self._work()
                self._releasing()
            outcome: Any = None
        except (LockLost, LockNotOwned) as exc:
            outcome = exc
        except LockTimeout:
            outcome = "timeout"
        except LockError as exc:
            outcome = exc
        except asyncio.CancelledError:  # (nobody cancels an actor: the library did)
            self.scenario.checker.fail(
                "cancel", f"{self.label}: the block ended with CancelledError, not LockLost"
            )
        took = self.scenario.world.clock.now - started - (self.process.paused_total - paused)
        if (
            took
            > plan.timeout + plan.works * plan.work + 6 * REQUEST_TIMEOUT + self.scenario.spec.ttl
        ):
            self.scenario.checker.fail("bounds", f"{self.label}: a with block took {took:.4f} s")
        if outcome == "timeout":
            self.note("with: not acquired in time")
        elif self.hold is not None:
            self._released(outcome)
        self.phase, self.hold = "start", None

    def _took(self) -> None:
        grant = self.grant()
        now = self.scenario.world.clock.now
        hold = Hold(self, grant.holder, self.obj.token, self.asked_at, now)
        self.hold, self.phase = hold, "hold"
        self.note(f"granted token {hold.token} ({hold.holder})")
        self.scenario.checker.granted(hold)
        self._write()  # the claim: from now on the fence refuses every older token

    def _write(self) -> bool:
        """``check()`` (unless the plan trusts the fence alone), then write the token to the
        fenced resource; False if the check raised ``LockLost``."""
        hold = self.hold
        assert hold is not None
        if self.plan.checks:
            try:
                self.obj.check()
            except LockLost:
                self.told("check")
                return False
        accepted = self.scenario.resource.write(hold, self.scenario.world.clock.now)
        self.note(f"write token {hold.token}: {'accepted' if accepted else 'refused'}")
        return True

    async def _work(self) -> None:
        plan, hold = self.plan, self.hold
        assert hold is not None
        for _ in range(plan.works):
            await asyncio.sleep(plan.work)
            if plan.block and "on_lost" in hold.told:  # on_lost_policy="cancel"
                self.scenario.checker.fail(
                    "cancel", f"{self.label}: a step of the block began after on_lost"
                )
            if not self._write():
                return
            if plan.extend:
                outcome = await self._call("extend", self.obj.extend(), REQUEST_TIMEOUT * 3)
                if isinstance(outcome, LockLost | LockNotOwned):
                    self.told("extend")
                    return

    def _releasing(self) -> None:
        """The holder stops relying on the grant (its release is under way)."""
        self.phase = "release"
        if self.hold is not None and self.hold.end is None:
            self.hold.end = self.scenario.world.clock.now

    def _released(self, outcome: Any) -> None:
        hold = self.hold
        assert hold is not None
        if hold.end is None:
            hold.end = self.scenario.world.clock.now
        if isinstance(outcome, LockLost | LockNotOwned):
            self.told("release")
            hold.released = type(outcome).__name__
        elif isinstance(outcome, LockError):
            hold.released = type(outcome).__name__
        else:
            hold.released = "ok"
        self.note(f"released: {hold.released}")
        self.scenario.checker.released(hold)


class Checker:
    """The checks of the module's docstring, fed by the actors and by every step."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.holds: list[Hold] = []
        self.told_holders: set[str] = set()
        # (node, holder) -> the latest end of its lease that node gave it, in world time
        self.ends: dict[tuple[str, bytes], float] = {}
        self.refused: set[str] = set()  # holders whose process heard a renewal refused
        self.delayed = False  # time moved while a message could have been delivered
        self.idle_free: dict[Actor, float] = {}  # waiter -> idle time spent with the name free
        # waiting actors -> when the name is free for them if nothing else happens
        self.free_from: dict[Actor, float] = {}
        self.overlaps_allowed = False
        self.violation: Violation | None = None
        self.masked = 0  # losses told only by a release that could not reach the servers

    def fail(self, check: str, message: str) -> None:
        """Stop the run (from a task too: the harness looks after every step)."""
        violation = Violation(check, message)
        if self.violation is None:
            self.violation = violation
        raise violation

    @property
    def patience(self) -> float:
        spec = self.scenario.spec
        # (a barging lock's release wakes its first waiter without granting it the name: if
        # that waiter stops before its re-try, the name is free until the next waiter's fallback
        # re-try, where a fair release's grant would hold it for the stopped waiter's lease)
        silent = SILENT + (STOPPED if spec.barging else ())
        if any(f.split()[0] in silent for f in self.scenario.world.faults):
            return spec.ttl + 2 * REQUEST_TIMEOUT + 0.6
        return 0.11  # Redlock's re-try jitter and a releaser's polite pause are at most 50 ms

    def lease_end(self, holder: str) -> float:
        """The end of ``holder``'s lease as the servers gave it (a majority's, for Redlock): the
        latest they showed, whatever a fault did to it since (-inf: never shown)."""
        world, key = self.scenario.world, holder.encode()
        ends = sorted(
            (self.ends[n.name, key] for n in world.nodes if (n.name, key) in self.ends),
            reverse=True,
        )
        needed = len(world.nodes) // 2 + 1 if self.scenario.spec.redlock else 1
        return ends[needed - 1] if len(ends) >= needed else -math.inf

    # -- fed by the actors -----------------------------------------------------------------------

    def told(self, hold: Hold, how: str) -> None:
        hold.told.append(how)
        self.told_holders.add(hold.holder)
        if hold.actor.plan.auto_renew and not self.scenario.world.faults and not self.delayed:
            self.fail("kept", f"{hold}: lost ({how}) with no fault and no message delayed")

    def granted(self, hold: Hold) -> None:
        for other in self.holds:
            if other.token == hold.token and other.holder != hold.holder:
                self.fail("tokens", f"{hold} has the token of {other}")
            if other.start < hold.requested and other.token >= hold.token:
                self.fail("tokens", f"{hold} is not larger than {other}, returned before it")
        self.holds.append(hold)

    def released(self, hold: Hold) -> None:
        """A loss: the servers no longer showed the grant while it was held, and another actor
        was granted the name (permits) after that, before this one's release (as the chaos
        checker counts them, with the servers' view). An auto_renew grant's loss must be told,
        at the latest by release()."""
        if not hold.actor.plan.auto_renew or hold.told or hold.gone_at is None:
            return
        end = hold.end if hold.end is not None else float("inf")
        taken = [
            h for h in self.holds if h.actor is not hold.actor and hold.gone_at <= h.start < end
        ]
        if not taken:
            return
        if hold.released == "LockConnectionError":
            self.masked += 1  # (counted apart, as the chaos checker does)
            return
        self.fail(
            "signalled", f"{hold}: taken over by {taken[0]}, never told (release: {hold.released})"
        )

    # -- every step ------------------------------------------------------------------------------

    def settled(self, world: World) -> None:
        """The invariants, on the state every process has reacted to."""
        scenario, now = self.scenario, world.clock.now
        if any(f.split()[0] in OVERLAPPING for f in world.faults):
            self.overlaps_allowed = True
        for node in world.nodes:
            for holder, end in _lease_ends(node, now).items():
                if end - now > scenario.spec.ttl + 1e-6:
                    self.fail(
                        "orphans",
                        f"{holder.decode()}'s lease on {node.name} ends in {end - now:.4f} s, "
                        "beyond its ttl",
                    )
                self.ends[node.name, holder] = max(end, self.ends.get((node.name, holder), end))
        valid = [a for a in scenario.actors if a.valid(now)]
        for actor in valid:
            grant = actor.grant()
            if grant.holder in self.told_holders:
                self.fail(
                    "told",
                    f"{actor.label} holds {grant.holder} (token {grant.fence}) as "
                    "valid after its loss was told",
                )
            ended = self.lease_end(grant.holder)
            if now > ended:
                self.fail(
                    "signalled",
                    f"{actor.label}: check() passes for token {grant.fence} after its lease "
                    f"ended at {ended:.4f}",
                )
            if grant.holder in self.refused:
                self.fail(
                    "signalled",
                    f"{actor.label}: check() passes for token {grant.fence} after a renewal "
                    "refused by the server reached its process",
                )
        if not self.overlaps_allowed:
            used = sum(a.weight for a in valid)
            if used > scenario.capacity:
                shown = ", ".join(f"{a.label} ({a.grant().fence})" for a in valid)
                self.fail("holders", f"valid at once: {shown}")
        for actor in scenario.actors:
            hold = actor.hold
            held = hold is not None and hold.end is None and hold.gone_at is None
            if held and not scenario.shows(hold.holder, actor):  # type: ignore[union-attr]
                hold.gone_at = now  # type: ignore[union-attr]
        waiting = [a for a in scenario.actors if a.phase == "acquire" and a.process.running]
        self.free_from = {}
        for actor in waiting:
            since = scenario.free_from(actor)
            if since is not None:
                self.free_from[actor] = since
            if since is None or since > now:  # held now: what was wasted before is forgiven
                self.idle_free.pop(actor, None)
        for actor in list(self.idle_free):
            if actor not in waiting:
                del self.idle_free[actor]

    def stepped(self, world: World, option: Option, idle: float) -> None:
        """A renewal's refusal read by its process, or time moved while a message waited (a
        delay); time passed with nothing in flight: the waiters whose name was free (or freed
        itself meanwhile, by a lease's end) wasted it."""
        message = option.message
        if message is not None and message.answered and not self.scenario.spec.redlock:
            # (a Redlock node's refusal is no loss while a majority renews)
            self.refused.update(_refusals(message))
        if option.kind == "advance" and not idle:
            self.delayed = True
        if not idle:
            return
        after = world.clock.now
        before = after - idle
        for actor, since in self.free_from.items():
            spent = self.idle_free.get(actor, 0.0) + max(0.0, after - max(since, before))
            self.idle_free[actor] = spent
            if spent > self.patience:
                self.fail(
                    "wake-up",
                    f"{actor.label} waits while {NAME!r} is free and nothing "
                    f"is in flight, for {spent:.4f} s",
                )

    def finish(self) -> None:
        for actor in self.scenario.actors:
            if actor.phase != "done" and not actor.process.crashed:
                self.fail("bounds", f"{actor.label} never finished ({actor.phase})")
        for message in self.scenario.world.loop_errors:
            self.fail("loop", message)


class Scenario:
    """One run's world, processes, actors and checker, for a ``Spec``."""

    def __init__(self, spec: Spec, patches: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.world = World(nodes=spec.nodes, patches=patches)
        self.world.nodes[0].offset_us = round(spec.ahead * 1_000_000)
        if "failover" in spec.faults:
            for node in self.world.nodes:
                node.writes = deque(maxlen=2)
        self.checker = Checker(self)
        self.resource = Resource(self.checker)
        self.actors: list[Actor] = []
        self.clients: list[SimClient] = []
        self.tried: dict[str, asyncio.Event] = {}  # an acquire of the process has returned
        kinds = {p.kind for plans in spec.processes for p in plans}
        self.capacity = WRITE_PERMITS if kinds & {"read", "write"} else spec.limit
        for i, plans in enumerate(spec.processes):
            process = self.world.process(f"p{i}")
            self.tried[process.name] = asyncio.Event()
            actors = [Actor(self, process, plan, f"p{i}.{j}") for j, plan in enumerate(plans)]
            self.actors += actors
            process.state = lambda actors=actors: tuple(a.state() for a in actors)
            self.world.start(process, self._main(process, actors))

    def client(self, process: Process) -> SimClient:
        spec = self.spec
        client = sim_client(
            self.world, process, redlock=spec.redlock, max_handoffs=spec.max_handoffs
        )
        self.clients.append(client)
        return client

    async def _main(self, process: Process, actors: list[Actor]) -> None:
        client = self.client(process)
        for actor in actors:
            actor.make(client)
        await asyncio.gather(*(actor.run() for actor in actors))
        await client.close()

    @property
    def done(self) -> bool:
        return all(p.done or p.crashed for p in self.world.processes)

    # -- the servers' view -----------------------------------------------------------------------

    def _nodes(self) -> list[Node]:
        return [n for n in self.world.nodes if n.up]

    def shows(self, holder: str, actor: Actor) -> bool:
        """Whether the servers (a majority, for Redlock) show ``holder`` holding the name."""
        key = actor.obj._lease.spec.keys.lock.encode()
        now = self.world.clock.now
        count = sum(1 for n in self.world.nodes if n.up and _holds(n, key, holder.encode(), now))
        needed = len(self.world.nodes) // 2 + 1 if self.spec.redlock else 1
        return count >= needed

    def free_from(self, actor: Actor) -> float | None:
        """When every waiting actor's request fits on the servers (conservative: only then
        must the first of them be served) if nothing else happens: now, or when the leases in
        the way end, and for a semaphore the turns of the waiters queued ahead that no longer
        listen (None: never by themselves)."""
        keys = actor.obj._lease.spec.keys
        key = keys.lock.encode()
        need = max(a.weight for a in self.actors if a.phase == "acquire")
        now, times = self.world.clock.now, []
        for node in self._nodes():
            when = _free_at(node, key, need, self.capacity, now)
            if when is None:
                return None
            times.append(when)
            if isinstance(keys, SemaphoreKeys):
                running = {p.name for p in self.world.processes if p.running}
                times.append(_dead_turns(node, keys, now, running))
        return max(times, default=now)

    # -- the end ---------------------------------------------------------------------------------

    def fault_options(self, kinds: tuple[str, ...]) -> list[Option]:
        world, ttl = self.world, self.spec.ttl
        found: list[Option] = []
        live = [p for p in world.processes if p.running and not p.done]
        for kind in kinds:
            if kind == "pause":
                found += [
                    Option(f"pause {p.name}", lambda p=p: world.pause(p, 1.5 * ttl), "fault")
                    for p in live
                ]
            elif kind == "crash":
                found += [
                    Option(f"crash {p.name}", lambda p=p: world.crash(p), "fault") for p in live
                ]
            elif kind == "reset":
                found += [
                    Option(f"reset {p.name}-{n.name}", lambda p=p, n=n: world.reset(p, n), "fault")
                    for p in live
                    for n in self._nodes()
                ]
            elif kind == "drop":
                found += [
                    Option(f"drop {m.describe()}", lambda m=m: world.drop(m), "fault")
                    for m in world.deliverable()
                ]
            elif kind == "restart":
                found += [
                    Option(f"restart {n.name}", lambda n=n: self._restart(n), "fault")
                    for n in self._nodes()
                ]
            elif kind == "failover":
                found += [
                    Option(f"failover {n.name}", lambda n=n: world.failover(n, 1, 0.05), "fault")
                    for n in self._nodes()
                ]
            elif kind == "clock":
                found += [
                    Option(f"clock {n.name} +{2 * ttl:g}s", lambda n=n: _jump(n, 2 * ttl), "fault")
                    for n in self._nodes()
                ]
            elif kind == "node-lost":
                found += [
                    Option(f"node-lost {n.name}", lambda n=n: world.node_down(n), "fault")
                    for n in self._nodes()
                ]
        return found

    def _restart(self, node: Node) -> None:
        self.world.node_down(node)
        self.world.at(
            self.world.clock.now + 0.05,
            f"{node.name} back, empty",
            lambda: self.world.restart_empty(node),
        )

    def heal(self) -> None:
        """Every fault ends now: what was to end later ends at once, a node lost comes back."""
        world = self.world
        timers, world.timers = world.timers, []
        for _, _, label, action in timers:
            world.log.append(f"{world.clock.now:9.4f}  {label} (healed)")
            action()
        for node in self.world.nodes:
            if not node.up:
                self.world.restart_empty(node)

    def probe(self) -> Probe:
        """A fresh process that must take the whole name within 1.5 ttl + 1 s."""
        return Probe(self)


class Probe:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        world = scenario.world
        self.process = world.process("probe")
        self.result: Any = None
        world.start(self.process, self._main())

    async def _main(self) -> None:
        scenario = self.scenario
        spec, client = scenario.spec, scenario.client(self.process)
        wait = 1.5 * spec.ttl + 1
        kinds = {p.kind for plans in spec.processes for p in plans}
        try:
            if kinds & {"read", "write"}:
                obj: Any = client.rw_lock(NAME, spec.ttl).write()
                self.result = await obj.acquire(timeout=wait)
            elif "semaphore" in kinds:
                obj = client.semaphore(NAME, spec.limit, spec.ttl)
                self.result = await obj.acquire(permits=spec.limit, timeout=wait)
            else:
                obj = client.lock(NAME, spec.ttl, reentrant="reentrant" in kinds)
                self.result = await obj.acquire(timeout=wait)
        except LockError as exc:
            self.result = exc
        await client.close()

    def check(self) -> None:
        if self.result is not True:
            self.scenario.checker.fail(
                "orphans", f"a fresh client could not take {NAME!r}: {self.result!r}"
            )
        ttl_ms = self.scenario.spec.ttl * 1000
        world = self.scenario.world
        for node in world.nodes:
            now_ms = node.now_us(world.clock.now) // 1000
            for key, entry in node.server.keys.items():
                if not key.endswith(b":lock"):
                    continue
                left = None if entry.expires_at is None else entry.expires_at - now_ms
                if left is None or left > ttl_ms:
                    self.scenario.checker.fail("orphans", f"{key!r} on {node.name}: {left} ms left")


def _holds(node: Node, key: bytes, holder: bytes, now: float) -> bool:
    entry = node.server.keys.get(key)
    now_ms = node.now_us(now) // 1000
    if entry is None or (entry.expires_at is not None and entry.expires_at < now_ms):
        return False
    value = entry.value
    if isinstance(value, bytes):  # a simple lock: 'holder token'
        return value.partition(b" ")[0] == holder
    if isinstance(value, dict) and not hasattr(value, "ordered"):
        return holder in value
    score = value.get(holder)  # type: ignore[union-attr]
    return score is not None and score > now_ms


def _world_time(node: Node, ms: float, now: float) -> float:
    """The world's time when ``node``'s clock reads ``ms`` (not before ``now``)."""
    return max(now, _world_at(node, ms))


def _world_at(node: Node, ms: float) -> float:
    """The world's time when ``node``'s clock reads ``ms``."""
    return (ms * 1000 - T0_US - node.offset_us) / 1_000_000


def _lease_ends(node: Node, now: float) -> dict[bytes, float]:
    """Every holder of a grant ``node`` shows now, and when its lease ends there (world time):
    the expiry of a lock's key, or a permit's score."""
    found: dict[bytes, float] = {}
    if not node.up:
        return found
    now_ms = node.now_us(now) // 1000
    for key, entry in node.server.keys.items():
        expires = entry.expires_at
        if not key.endswith(b":lock") or (expires is not None and expires < now_ms):
            continue
        value = entry.value
        if hasattr(value, "ordered"):  # permits: holder -> lease end
            ends = {holder: float(score) for holder, score in value.items()}  # type: ignore[union-attr]
        else:  # a lock's holder ('holder token'), or a reentrant lock's holders
            holders = [value.partition(b" ")[0]] if isinstance(value, bytes) else list(value)
            ends = dict.fromkeys(holders, math.inf if expires is None else float(expires))
        for holder, ms in ends.items():
            found[holder] = _world_at(node, ms)
    return found


def _refusals(reply: Message) -> list[str]:
    """The holders whose renewal (renew.lua) a reply refuses."""
    found: list[str] = []
    for command, answer in zip(reply.request, reply.payload, strict=True):
        if str(command[0]).upper() not in ("EVALSHA", "EVAL") or not isinstance(answer, list):
            continue
        if command[1] not in (scripts.RENEW.sha, scripts.RENEW.source):
            continue
        holders = command[3 + int(command[2]) :: 2]
        found += [str(h) for h, renewed in zip(holders, answer, strict=True) if renewed != 1]
    return found


def _live(node: Node, key: bytes, now: float) -> Any:
    """The value at ``key`` on ``node`` if it has not expired (read without deleting)."""
    entry = node.server.keys.get(key)
    if entry is None or (
        entry.expires_at is not None and entry.expires_at < node.now_us(now) // 1000
    ):
        return None
    return entry.value


def _dead_turns(node: Node, keys: SemaphoreKeys, now: float, running: set[str]) -> float:
    """When the semaphore's queue no longer starts with waiters that stopped listening (a
    waiter that crashed or gave up keeps its place until its turn ends: semaphore.lua), or
    that cannot act: a paused process's (``running``: the processes that run), whose turn
    the others wait out as they would a slow one's."""
    queue = _live(node, keys.queue.encode(), now) or {}
    alive = _live(node, keys.alive.encode(), now) or {}
    listened = {
        c
        for conn_id, conn in node.server.connections.items()
        if isinstance(conn_id, tuple) and conn_id[0] in running
        for c in conn.channels
    }
    until = now
    for entry, _ in sorted(queue.items(), key=lambda item: (item[1], item[0])):
        if f"{keys.channel}:{entry.split()[0].decode()}".encode() in listened:
            break
        until = max(until, _world_time(node, alive.get(entry, 0), now))
    return until


def _free_at(node: Node, key: bytes, need: int, capacity: int, now: float) -> float | None:
    """When ``need`` permits fit at ``key`` on ``node`` (a lock: when it is free), as the
    leases there end: a world time, or None (a key without expiry)."""
    entry = node.server.keys.get(key)
    now_ms = node.now_us(now) // 1000

    def at(ms: int) -> float:
        return _world_time(node, ms, now)

    if entry is None or (entry.expires_at is not None and entry.expires_at < now_ms):
        return now
    value = entry.value
    if not hasattr(value, "ordered"):  # a lock: free once its key expires
        return None if entry.expires_at is None else at(entry.expires_at + 1)
    state = node.server.keys.get(key[: -len(b":lock")] + b":state")
    counts = state.value if state is not None and isinstance(state.value, dict) else {}
    leases = sorted((s, int(counts.get(b"n:" + h, b"1"))) for h, s in value.items() if s > now_ms)  # type: ignore[union-attr]
    used = sum(n for _, n in leases)
    if used + need <= capacity:
        return now
    for score, n in leases:  # a permit is gone once the clock reaches its score
        used -= n
        if used + need <= capacity:
            return at(int(score))
    return None


def _jump(node: Node, seconds: float) -> None:
    node.offset_us += round(seconds * 1_000_000)
