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

from .._backend import AsyncEvent, AsyncStateLock

if TYPE_CHECKING:
    from .lock import AsyncLock, Grant


@dataclass(eq=False, slots=True)
class Ticket:
    """A queued acquire: it is woken with either a grant (handed off) or its turn as head."""

    lock: AsyncLock
    event: AsyncEvent = field(default_factory=AsyncEvent)
    grant: Grant | None = None
    turn: bool = False


@dataclass(slots=True)
class _Line:
    tickets: deque[Ticket] = field(default_factory=deque)
    streak: int = 0  # local hand-offs since the lock last went through Redis
    holder: Grant | None = None  # the local grant, once the head (or a hand-off) got one


class AsyncLocalQueues:
    """The local queues of one client, one per lock key (and kind) with someone inside: present
    while a local lock object holds the key or is acquiring it."""

    def __init__(self, max_handoffs: int) -> None:
        self.max_handoffs = max_handoffs
        self._guard = AsyncStateLock()
        self._lines: dict[str, _Line] = {}
        # key -> (monotonic time until which this client lets another client's waiter go first,
        # whether it holds back meanwhile: else the other already has the lock)
        self._yields: dict[str, tuple[float, bool]] = {}
        self._pid = os.getpid()
        self.handoffs = 0  # successful local hand-offs (for the tests and benchmarks)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            # the queued threads of the parent do not exist in a forked child
            self._pid = os.getpid()
            self._guard = AsyncStateLock()
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

    def join(self, key: str, lock: AsyncLock) -> Ticket | None:
        """None: the caller is the head (goes to Redis). Else a ticket to wait on."""
        self._reset_after_fork()
        with self._guard:
            line = self._lines.get(key)
            if line is None:
                self._lines[key] = _Line()
                return None
            ticket = Ticket(lock)
            line.tickets.append(ticket)
            return ticket

    def holding(self, key: str, grant: Grant) -> None:
        with self._guard:
            line = self._lines.get(key)
            if line is not None:
                line.holder = grant

    def holder_gone(self, key: str, now: float) -> float | None:
        """For a queued waiter: 0 when the local holder's lease has run out (a lock object that
        was never released must not hold its queue up forever), else the seconds until its
        deadline (None while the head is still acquiring)."""
        with self._guard:
            line = self._lines.get(key)
            holder = None if line is None else line.holder
        if holder is None:
            return None
        return 0.0 if holder.lost else max(0.0, holder.deadline - now)

    def handoffs_ahead(self, key: str) -> int:
        """How many local hand-offs the grant the head is about to take can expect: the
        waiters queued behind it, up to the streak bound."""
        with self._guard:
            line = self._lines.get(key)
            return 0 if line is None or not line.tickets else self.max_handoffs

    def pass_turn(self, key: str) -> None:
        """The head or the holder leaves without handing the lock on: the next in line becomes
        the head; with nobody queued the key has no local user any more."""
        with self._guard:
            line = self._lines.get(key)
            if line is None:
                return
            line.streak = 0
            line.holder = None
            if line.tickets:
                ticket = line.tickets.popleft()
                ticket.turn = True
                ticket.event.set()
            else:
                del self._lines[key]

    def next_for_handoff(self, key: str) -> Ticket | None:
        """The ticket the releasing holder may hand the lock to, taken out of the queue; None
        when nobody is queued or the streak is used up."""
        with self._guard:
            line = self._lines.get(key)
            if line is None or not line.tickets or line.streak >= self.max_handoffs:
                return None
            line.streak += 1
            line.holder = None
            return line.tickets.popleft()

    def hand(self, ticket: Ticket, grant: Grant) -> None:
        with self._guard:
            self.handoffs += 1
        ticket.grant = grant
        ticket.event.set()

    def give_turn(self, ticket: Ticket) -> None:
        """A hand-off that failed (the lease was gone): the ticket goes to Redis as the head."""
        with self._guard:
            ticket.turn = True
            ticket.event.set()

    def leave(self, key: str, ticket: Ticket) -> bool:
        """A waiter gives up. False if it was still queued (nothing to pass on); True if the
        lock or the turn reached it meanwhile (``ticket.grant`` / ``ticket.turn``)."""
        with self._guard:
            line = self._lines.get(key)
            if line is not None and ticket in line.tickets:
                line.tickets.remove(ticket)
                return False
            return True
