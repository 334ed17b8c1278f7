# GENERATED from src/fencelock/_async/latch.py by tools/gen_sync.py: edit that file instead.
"""A countdown latch and a double barrier, written against the lease engine and a kind of their
own (``_core/latch.py``): a participant that joins holds a lease engine over the
``Participant`` kind, renewed by the client's watchdog like any lease; counting down, waiting,
counting and resetting are the latch's own scripts, run by the topology; waiters are woken by
the name's channel and look again at least once per ttl (docs/latch.md).

Failure timeline: a participant SIGKILLed after joining stops renewing; its lease ends within
its ttl and ``missing()`` names it. A ``count_down`` sent again (a timeout, a lost reply) counts
once: participants are counted by id. A waiter whose message is lost looks again within a ttl,
and at the earliest lease end of a barrier's participants (an expiry publishes nothing).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Never, Self

from .._backend import sync_public_name
from .._core.inspection import LockInfo
from .._core.latch import (
    LATCH,
    LATCH_COUNT_DOWN,
    LATCH_RESET,
    LATCH_STATE,
    LatchKeys,
    LatchReset,
    LatchState,
    Participant,
    count_down_reply,
    latch_state,
)
from .._core.lease import Words
from .._core.options import DEFAULT, LeaseOptions
from .._core.timing import remaining
from .._scripts import Script
from ..errors import LockLost, LockNotOwned, LockTimeout
from . import admin
from .engine import Lease, Wiring
from .leased import end_lost_block, keyword_only
from .topology import SyncTopology

LATCH_KEEP = 86_400.0  # seconds an unused latch stays in Redis, by default
# what their messages say: a participant joins (enters) and leaves
LATCH_WORDS = Words("latch", "joined by this participant", "join", "leave", "joined")
BARRIER_WORDS = Words("barrier", "entered by this participant", "enter", "leave", "entered")


def validate_count(arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be an int, not {type(value).__name__}")
    if not 1 <= value <= 2**31:
        raise ValueError(f"{arg} must be from 1 to 2**31, got {value}")
    return value


class _Participant:
    """What a latch and a barrier share: a participant's lease engine and the latch's state."""

    def __init__(
        self, wiring: Wiring, options: LeaseOptions, kind: Participant, words: Words
    ) -> None:
        self._lease = Lease(self, wiring, options, wiring.spec(kind, options, words))
        self._kind = kind
        keys = self._lease.spec.keys
        assert isinstance(keys, LatchKeys)
        self._keys = keys

    def __repr__(self) -> str:
        public = sync_public_name(self)
        return f"<{public} {self.name!r} participant={self.participant!r}>"

    @property
    def name(self) -> str:
        return self._lease.options.name

    @property
    def participant(self) -> str:
        """This participant's id: it counts down once per generation by it."""
        return str(self._lease.options.label)

    def _run(self, script: Script, args: tuple[str | int, ...]) -> object:
        return self._lease.run(script, self._keys.scripted(), args)

    def _state(self) -> LatchState:
        return latch_state(self._lease.read(LATCH_STATE, self._keys.scripted()))

    def _until(
        self,
        done: Callable[[LatchState, int], bool],
        deadline: float | None,
        gen: int | None,
        *,
        reset_breaks: bool,
    ) -> bool:
        """Wait until the state is ``done`` for generation ``gen`` (None: the one current at the
        first look): True, or False once ``deadline`` passes. Woken by the latch's channel, and
        looking again at least once per ttl. ``reset_breaks``: ``LatchReset`` when a reset
        abandons that generation."""
        lease, ttl = self._lease, self._lease.options.ttl
        state = self._state()  # (also how a RedisCluster learns its slots, before watch)
        gen = max(state.gen, 1) if gen is None else gen
        if done(state, gen):
            return True
        with lease.watch(self._keys.channel, deadline) as watch:
            while True:
                # subscribed (and confirmed) before this look: any change after it wakes us
                watch.event.clear()
                state = self._state()
                if done(state, gen):
                    return True
                if reset_breaks and state.gen > gen:
                    raise LatchReset(f"{self._lease.what()} was reset while waiting for it")
                left = remaining(deadline, time.monotonic())
                if left == 0:
                    return False
                look = state.next_look(ttl)
                lease.wait(watch, look if left is None else min(look, left))


def _opened(state: LatchState, gen: int) -> bool:
    return state.opened >= gen


class Latch(_Participant):
    """``LockClient.latch(name, count)``: a countdown latch. Each participant counts down once
    per generation (``count_down()``), by its id; ``wait()`` returns once the count is down;
    a participant may ``join()`` first, with a lease the watchdog renews, so that one that dies
    before it counts down is named by ``missing()``; ``reset()`` starts a new generation."""

    def __init__(self, wiring: Wiring, options: LeaseOptions, count: int, keep: int) -> None:
        self.count_from = validate_count("count", count)
        super().__init__(wiring, options, Participant(count=count, keep_ms=keep), LATCH_WORDS)

    def join(self) -> None:
        """Join as a participant: a lease, renewed while this object holds it, so that its
        death is seen (``missing``). ``LockError`` if it joined already."""
        self._lease.acquire(timeout=0)  # (never busy)

    def leave(self) -> None:
        """End the participation without counting down (its lease ends)."""
        self._lease.release()

    def count_down(self) -> int:
        """Count this participant down, once in this generation (again: no effect), and end
        its participation if it joined. Returns what is left to count."""
        publish = self._lease.publish_command
        args = (self.participant, self.count_from, self._keys.channel, publish, self._kind.keep_ms)
        left, _, _ = count_down_reply(self._run(LATCH_COUNT_DOWN, args))
        if self._lease.grant() is not None:
            with contextlib.suppress(LockNotOwned):  # (counted all the same)
                self._lease.release()
        return left

    def wait(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Wait until the count is down in the generation current now: True, or False after
        ``timeout`` (None: as long as it takes; default: the latch's own). ``LatchReset`` if a
        reset abandons that generation meanwhile."""
        keyword_only("wait", args, "timeout=")
        wait = self._lease.options.wait(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        return self._until(_opened, deadline, None, reset_breaks=True)

    def count(self) -> int:
        """What is left to count down in this generation (one read)."""
        return (self._state()).left(self.count_from)

    def missing(self) -> tuple[str, ...]:
        """The participants (ids) that joined this generation, have not counted down, and whose
        lease ended: most likely dead (one read)."""
        return (self._state()).missing()

    def reset(self, count: int | None = None) -> None:
        """Start the next generation, counting down from ``count`` (default: this latch's):
        counted participants count again, joined ones' leases end, and waiters of the last
        generation that never opened get ``LatchReset``."""
        count = self.count_from if count is None else validate_count("count", count)
        args = (count, self._keys.channel, self._lease.publish_command, self._kind.keep_ms)
        self._run(LATCH_RESET, args)


class Barrier(_Participant):
    """``LockClient.barrier(name, parties)``: a double barrier (as in Curator and etcd).
    ``enter()`` joins and waits until ``parties`` participants hold live leases; ``leave()``
    ends the participation and waits until every participant has left (or its lease ended);
    ``async with`` enters and leaves. Then the next round may start."""

    def __init__(self, wiring: Wiring, options: LeaseOptions, parties: int, keep: int) -> None:
        self.parties = validate_count("parties", parties)
        kind = Participant(count=parties, parties=parties, keep_ms=keep)
        super().__init__(wiring, options, kind, BARRIER_WORDS)
        self._gen = 0

    def enter(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Join and wait until ``parties`` participants have: True, or False (having left
        again) after ``timeout`` (None: as long as it takes; default: the barrier's own)."""
        keyword_only("enter", args, "timeout=")
        wait = self._lease.options.wait(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        self._lease.acquire(timeout=0)  # (never busy)
        self._gen = (self._state()).gen  # (live, this participant keeps it current)
        try:
            if self._until(_opened, deadline, self._gen, reset_breaks=True):
                return True
        except BaseException:
            with contextlib.suppress(Exception):
                self._lease.release()
            raise
        with contextlib.suppress(LockNotOwned):
            self._lease.release()
        return False

    def leave(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """End the participation and wait until every participant has left, or its lease
        ended: True, or False after ``timeout``. ``LockNotOwned`` if it had not entered."""
        keyword_only("leave", args, "timeout=")
        wait = self._lease.options.wait(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        self._lease.release()
        return self._until(_all_left, deadline, self._gen, reset_breaks=False)

    def __enter__(self) -> Self:
        if not self.enter():
            raise LockTimeout(f"{self._lease.what()}: not all parties entered in time")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.leave()
        except LockLost as loss:
            # as every block over a lost lease ends (a participant takes no on_lost_policy)
            end_lost_block(loss, exc, "raise", by_us=False)


def _all_left(state: LatchState, gen: int) -> bool:
    return state.live() == 0 or state.gen > gen


def state_of(topology: SyncTopology, keys: LatchKeys, what: str) -> LatchState:
    """The latch (or barrier) at ``keys`` as the server shows it: one read-only script."""
    [reply] = topology.run_all(LATCH_STATE, keys.scripted(), (), what, read=True)
    if isinstance(reply, Exception):
        raise reply
    return latch_state(reply)


def _listed(topology: SyncTopology, prefix: str, name: str) -> LockInfo | None:
    return (state_of(topology, LatchKeys.for_latch(name, prefix), f"latch {name!r}")).info(
        name
    )


# found by its state, which a count_down or a reset makes without anyone joining
admin.register(admin.View(LATCH, Participant(), _listed, found_by="state"))
