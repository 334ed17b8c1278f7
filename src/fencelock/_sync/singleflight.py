# GENERATED from src/fencelock/_async/singleflight.py by tools/gen_sync.py: edit that file instead.
"""Singleflight and local hand-off: contention inside one process costs Redis (almost) nothing.

Without this, eight threads of one process that want the same lock are eight contenders in
Redis: each re-tries on every release message, most of them in vain. Here the lock objects of one
client that want the same name form a local FIFO queue. Only its head talks to Redis (acquires,
waits for a wake-up); the others wait in the queue. When the holder releases and someone is
queued, the lock is handed straight to the next in line, and the process keeps its holder token
in Redis. Fencing still orders every holder: a block of fencing tokens is reserved (INCRBY) by
the head's acquire when waiters are already queued behind it, or else by the first hand-off of a
streak (one script that also restarts the lease), so any later grant, by anyone, gets a larger
token than the block's. The next hand-offs of the streak take the
next token of the block and send nothing, as long as at least two thirds of the new holder's ttl
is left on the lease (else the script runs again).

Failure timeline and fairness:

* A queued waiter that times out or is cancelled leaves the queue. If the lock (or the head's
  turn) reached it at that very moment, it passes it on, so nothing is left held or stuck.
* A holder whose lease was lost cannot hand it off (the script finds the lock gone): the next in
  line becomes the head and goes to Redis.
* ``max_handoffs`` bounds a streak of local hand-offs: then the lock is released in Redis (which
  wakes other processes' waiters) and the next local waiter competes with them as the head. A
  larger bound gives more throughput inside one process, and longer waits to other processes.
* Local hand-off is skipped in Redlock mode and with ``min_replicas`` (the grant would need a
  majority, or replica acknowledgement, that one local script cannot give); singleflight
  queueing still applies. Simple and reentrant locks on one name queue apart.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import _events as events
from .._backend import SyncEvent, SyncStateLock
from .._core.lease import Grant
from .._core.stats import Counters

if TYPE_CHECKING:
    from .engine import Lease


@dataclass(eq=False, slots=True)
class Ticket:
    """An acquire in the local queue: the head (``turn``: it goes to Redis), or a waiter woken
    with either a grant (handed off) or its turn as head."""

    lease: Lease
    grant: Grant | None = None
    turn: bool = False
    # what wakes it, made (under the queues' guard) only when it queues behind another: the
    # uncontended acquire, at once the head, never waits on one
    queued: SyncEvent | None = None

    @property
    def event(self) -> SyncEvent:
        assert self.queued is not None, "only a ticket that queued waits"
        return self.queued


@dataclass(slots=True)
class _Line:
    # Who has the key's turn in this client: the head acquiring it in Redis (its ticket), or the
    # local grant once it has one. Only the owner may pass the turn on or hand the lock off: a
    # grant whose lease ran out without a release loses the turn to the next acquire, and its
    # late release must not take the turn from that one.
    owner: Ticket | Grant | None
    tickets: deque[Ticket] = field(default_factory=deque)
    streak: int = 0  # local hand-offs since the lock last went through Redis


def _gone(owner: Ticket | Grant | None, now: float) -> bool:
    """Whether the turn is free: passed on (None), or held by a grant whose lease has run out
    (lost, or past its deadline)."""
    return owner is None or (not isinstance(owner, Ticket) and owner.expired(now))


def _wake(ticket: Ticket | None) -> None:
    # after the decision, outside the guard: the waiter reads what was decided under it
    if ticket is not None and ticket.event is not None:
        ticket.event.set()


class LocalQueues:
    """The local queues of one client, one per lock key (and kind) with someone inside: present
    while a local lock object holds the key or is acquiring it."""

    def __init__(self, max_handoffs: int, counters: Counters) -> None:
        self.max_handoffs = max_handoffs
        self._counters = counters
        self._guard = SyncStateLock()
        self._lines: dict[str, _Line] = {}
        # key -> (monotonic time until which this client lets another client's waiter go first,
        # whether it holds back meanwhile: else the other already has the lock)
        self._yields: dict[str, tuple[float, bool]] = {}
        self._pid = os.getpid()

    def queued(self) -> int:
        """Acquires waiting in the local queues now (``Statistics.queued``)."""
        with self._guard:
            # (copied in one step: a metrics scrape may call this from another thread)
            return sum(len(line.tickets) for line in list(self._lines.values()))

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            # the queued threads of the parent do not exist in a forked child
            self._pid = os.getpid()
            self._guard = SyncStateLock()
            self._lines = {}
            self._yields = {}

    def yield_to_others(self, key: str, until: float, hold_back: bool) -> None:
        """The lock was released to Redis while another client waited for it (``hold_back``:
        woken to take it; else granted it by the release): this client's next acquire of it
        before ``until`` lets that client go first (see ``take_yield``)."""
        with self._guard:
            if len(self._yields) > 1000:  # keys never acquired again: forget the stale ones
                now = time.monotonic()
                self._yields = {k: v for k, v in self._yields.items() if v[0] > now}
            self._yields[key] = (until, hold_back)

    def take_yield(self, key: str, now: float) -> float | None:
        """None: the head about to acquire ``key`` tries at once. Else it skips that try (it
        would find the lock busy), and first holds back this many seconds (0: none)."""
        with self._guard:
            until, hold_back = self._yields.pop(key, (0.0, False))
        if until <= now:
            return None
        return until - now if hold_back else 0.0

    def join(self, key: str, lease: Lease, now: float) -> Ticket:
        """A ticket for ``lease``'s acquire of ``key``: the head (``turn``, it goes to Redis), or
        a place in the queue to wait on."""
        self._reset_after_fork()
        ticket = Ticket(lease)
        with self._guard:
            line = self._lines.get(key)
            if line is None:
                if len(self._lines) > 1000:  # keys of lock objects dropped while they held
                    self._lines = {
                        k: v for k, v in self._lines.items() if v.tickets or not _gone(v.owner, now)
                    }
                line = self._lines[key] = _Line(None)
            line.tickets.append(ticket)
            woken = self._assign(key, line, now)
            if not ticket.turn:
                ticket.queued = SyncEvent()
        if woken is not ticket:
            _wake(woken)
        return ticket

    def holding(self, key: str, ticket: Ticket, grant: Grant) -> None:
        """The head ``ticket`` got ``grant`` in Redis."""
        with self._guard:
            line = self._lines.get(key)
            if line is not None and line.owner is ticket:
                line.owner = grant

    def holder_gone(self, key: str, now: float) -> float | None:
        """For a queued waiter: the seconds until it should look again, the local holder's
        deadline (None: the queue is gone). A holder whose lease has run out (a lock object
        never released must not hold its queue up forever) gives its turn to the first in line.
        While the head is still acquiring there is no deadline yet, but whatever it is granted
        ends within its ttl from now: looking again then, a waiter learns the grant's deadline
        (or finds it run out) without a wake-up on every grant."""
        with self._guard:
            line = self._lines.get(key)
            if line is None:
                return None
            if isinstance(line.owner, Ticket):
                return line.owner.lease.spec.ttl
            woken = self._assign(key, line, now)
            left = None if line.owner is None or woken else max(0.0, line.owner.deadline - now)
        _wake(woken)
        return left

    def handoffs_ahead(self, key: str) -> int:
        """How many local hand-offs the grant the head is about to take can expect: the
        waiters queued behind it, up to the streak bound."""
        with self._guard:
            line = self._lines.get(key)
            return 0 if line is None or not line.tickets else self.max_handoffs

    def pass_turn(self, key: str, owner: Ticket | Grant) -> None:
        """``owner`` (a head that failed, or a grant released or lost) leaves without handing
        the lock on: the next in line becomes the head; with nobody queued the key has no local
        user any more. Nothing happens if ``owner`` no longer had the turn."""
        with self._guard:
            line = self._lines.get(key)
            if line is None or line.owner is not owner:
                return
            line.owner = None
            woken = self._assign(key, line, time.monotonic())
        _wake(woken)

    def _assign(self, key: str, line: _Line, now: float) -> Ticket | None:
        """The one place the turn moves on, other than by a hand-off: when it is free (passed
        on, or held by a grant whose lease ran out without a release: a lock object dropped, or
        its holder just carried on), the first in line becomes the head and goes to Redis (the
        streak ends). Returns that ticket, to be woken once the guard is released; with nobody
        left, the line goes."""
        if not _gone(line.owner, now):
            return None
        line.streak = 0
        if not line.tickets:
            del self._lines[key]
            return None
        ticket = line.owner = line.tickets.popleft()
        ticket.turn = True
        return ticket

    def next_for_handoff(self, key: str, grant: Grant) -> Ticket | None:
        """The ticket the releasing holder of ``grant`` may hand the lock to, taken out of the
        queue; None when nobody is queued, the streak is used up, or ``grant`` no longer had
        the turn."""
        with self._guard:
            line = self._lines.get(key)
            if (
                line is None
                or line.owner is not grant
                or not line.tickets
                or line.streak >= self.max_handoffs
            ):
                return None
            line.streak += 1
            line.owner = line.tickets.popleft()
            return line.owner

    def hand(self, key: str, ticket: Ticket, grant: Grant) -> None:
        self._counters.add(handoffs=1)
        if events.on:
            events.emit(events.HandedOff(ticket.lease.spec.primitive, ticket.lease.name))
        with self._guard:
            line = self._lines.get(key)
            if line is not None and line.owner is ticket:
                line.owner = grant
        ticket.grant = grant
        _wake(ticket)

    def give_turn(self, ticket: Ticket) -> None:
        """A hand-off that failed (the lease was gone): the ticket goes to Redis as the head."""
        with self._guard:
            ticket.turn = True
        _wake(ticket)

    def leave(self, key: str, ticket: Ticket) -> bool:
        """A waiter gives up. False if it was still queued (nothing to pass on); True if the
        lock or the turn reached it meanwhile (``ticket.grant`` / ``ticket.turn``)."""
        with self._guard:
            line = self._lines.get(key)
            if line is not None and ticket in line.tickets:
                line.tickets.remove(ticket)
                return False
            return True
