# GENERATED from src/fencelock/_async/watchdog.py by tools/gen_sync.py: edit that file instead.
"""One watchdog per client renews every auto-renewed lease, and declares the lost ones lost.

Failure timeline it guards against: the work outlives the lease. Every lease is renewed when a
third of it has passed (Redisson's schedule), so two renewals can fail before it runs out; all
leases due together go to the server in one script call per batch of up to 100. A renewal that
finds the lock gone or held by another holder declares it lost at once. When renewals fail
(server down, network cut) the lease is declared lost at its local deadline, counted on this
host's monotonic clock from when the last successful renewal was *sent*, minus a drift allowance:
no later than the moment another client could acquire it. One task (asyncio) or one thread
(sync) serves every lease of the client: 10,000 leases are not 10,000 timers. Between its
renewals it gives back the grants a silent server may still make (``giveback.py``).

Nothing here keeps a lock or the client alive: a lease record reaches its lock object only through a
weak reference (to the method that declares the loss), and the worker runs only while there are
leases, or give-backs left. A lock object
dropped while held is no longer renewed (a ResourceWarning says so) and its lease runs out on the
server by its ttl; it is not deleted: the drop may have been a mistake elsewhere, and expiry is
the outcome the server guarantees anyway.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from .. import _events as events
from .._backend import SyncBackground, SyncEvent, SyncStateLock
from .._core.kinds import LeaseSpec, Released
from .._core.lease import Grant
from .._core.replies import RENEWED, TAKEN
from .._core.stats import Counters
from .._core.timing import (
    RENEW_RETRY,
    first_renewal,
    next_renewal,
    renewal_batches,
    renewal_late,
    renewal_retry,
)
from ..errors import LockError
from .giveback import LateGiveBacks

logger = logging.getLogger("fencelock.watchdog")


class Lose(Protocol):
    """How a lease record declares its loss: ``AsyncLease.declare_lost``."""

    def __call__(self, grant: Grant, found: str, *, other_holder: bool = False) -> str: ...


# How a loss reaches its lock object: called at once (None), or handed to ``deliver(lose, grant,
# found, other_holder)`` (the asyncio client renews in a thread, and declares losses on its
# loop: _offloop.py)
Deliver = Callable[[Lose, Grant, str, bool], object]


class SyncRenewalGrants(Protocol):
    """What the watchdog asks of the grants: an ``AsyncGrants``'s renewals and late
    give-backs (the asyncio client's renewal thread asks them of the grants of a twin of its
    topology, made in a thread of its own: ``_offloop.DeferredTwin``)."""

    @property
    def request_timeout(self) -> float: ...

    @property
    def node_count(self) -> int: ...

    def renew(
        self,
        specs: Sequence[LeaseSpec],
        holders: Sequence[str],
        ttls: Sequence[float],
        timeout: float,
        what: str = ...,
    ) -> Sequence[int | LockError]: ...

    def release_at(
        self, spec: LeaseSpec, holder: str, node: int, timeout: float
    ) -> Released: ...


class SyncRenewer(Protocol):
    """What a client's lock objects ask of its watchdog (this one, or ``OffLoopWatchdog``)."""

    def __len__(self) -> int: ...

    def track(self, grant: Grant, spec: LeaseSpec, lose: Lose) -> None: ...

    def untrack(self, grant: Grant) -> None: ...

    def give_back_late(self, spec: LeaseSpec, holder: str) -> None: ...

    def abandon(self) -> None: ...

    def close(self) -> None: ...


@dataclass(eq=False, slots=True)
class Tracked:
    """A lease the watchdog renews, as it tracks it (the lease itself: ``engine.AsyncLease``):
    its grant (whose deadline a renewal moves), what the renew script needs, and how to declare
    it lost (a weak reference: the lock object may be dropped)."""

    grant: Grant
    spec: LeaseSpec
    slot: int  # its Cluster slot (0 elsewhere), computed once
    lose: weakref.WeakMethod[Lose]
    renew_at: float  # monotonic
    deliver: Deliver | None = None

    @property
    def ttl(self) -> float:  # (for renewal_batches)
        return self.spec.ttl


class Watchdog:
    def __init__(
        self, grants: SyncRenewalGrants, slot_of: Callable[[str], int], counters: Counters
    ) -> None:
        # what it asks: the grants' renewals and late give-backs, and which slot a lease's key
        # is in (batches)
        self._grants = grants
        self._slot_of = slot_of
        self._counters = counters
        self._guard = SyncStateLock()
        self._wake = SyncEvent()
        self._worker = SyncBackground("fencelock-watchdog")
        self._pid = os.getpid()
        self._closing = False
        self._running = False  # a worker runs, or has been started (under _guard)
        self._leases: dict[Grant, Tracked] = {}
        self._late = LateGiveBacks(self._grants, counters)  # tried between the renewals
        self._sleep_until = math.inf  # monotonic time the worker sleeps until

    def __len__(self) -> int:
        return len(self._leases)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            # A forked child: the parent's leases are the parent's to renew, its watchdog
            # thread does not exist here, and its locks may have been held by that thread.
            self._pid = os.getpid()
            self._leases = {}
            self._late = LateGiveBacks(self._grants, self._counters)
            self._guard = SyncStateLock()
            self._wake = SyncEvent()
            self._worker = SyncBackground("fencelock-watchdog")
            self._running = False
            self._sleep_until = math.inf

    def track(
        self, grant: Grant, spec: LeaseSpec, lose: Lose, deliver: Deliver | None = None
    ) -> None:
        """Renew ``grant`` every ttl/3 until untracked; ``lose`` (a bound method of the lock
        object, held weakly) declares it lost, through ``deliver`` if given."""
        self._reset_after_fork()
        renew_at = first_renewal(grant.deadline, spec.ttl)
        dropped = partial(_dropped, self._leases, grant, spec, _user_site())
        lease = Tracked(
            grant,
            spec,
            self._slot_of(spec.keys.lock),
            weakref.WeakMethod(lose, dropped),
            renew_at,
            deliver,
        )
        with self._guard:
            self._leases[grant] = lease
            # Wake the worker only if it sleeps past this lease's first renewal: waking it for
            # every acquire would make it rescan all leases each time.
            self._start_or_wake(renew_at < self._sleep_until)

    def _start_or_wake(self, wake: bool) -> None:
        """(Under ``_guard``) start the worker, or wake it if ``wake``."""
        start, self._running = not self._running, True
        if start:
            self._closing = False
            self._worker.start(self._run)
        elif wake:
            self._wake.set()

    def untrack(self, grant: Grant) -> None:
        with self._guard:
            self._leases.pop(grant, None)

    def give_back_late(self, spec: LeaseSpec, holder: str) -> None:
        """Give back what ``holder`` may still hold once the server answers again: an acquire
        of it got no reply (it may still grant), or its release did, and its call has ended
        (``giveback.py``)."""
        self._reset_after_fork()
        if self._late.add(spec, holder):
            with self._guard:
                self._start_or_wake(True)

    def abandon(self) -> None:
        """The client was dropped unclosed: the worker ends (as at close, without waiting for
        it; from the garbage collector: it only sets flags)."""
        self._late.end_by(time.monotonic() + self._grants.request_timeout)
        self._closing = True

    def _run(self) -> None:
        while True:
            with self._guard:
                # leases of lock objects that were dropped: no longer renewed (see _dropped)
                for grant in [g for g, le in self._leases.items() if le.lose() is None]:
                    del self._leases[grant]
                if self._closing:
                    self._leases.clear()  # the client closes: only the give-backs go on
                if not (self._leases or self._late):
                    # Done: a lease tracked from now on starts a new worker. Ending here lets a
                    # dropped client go, with no thread or task of it left behind.
                    self._running = False
                    self._sleep_until = math.inf
                    return
            try:
                self._round()
            except Exception:  # a bug here must not silently end renewals for every lock
                logger.exception("fencelock watchdog round failed")
                self._sleep_until = time.monotonic() + RENEW_RETRY
            left = self._sleep_until - time.monotonic()
            if not math.isinf(left):  # (else no lease is left: the worker ends above)
                self._wake.wait(max(0.0, left))

    def _round(self) -> None:
        self._wake.clear()  # before looking: a lease tracked from now on wakes the next wait
        with self._guard:
            leases = list(self._leases.values())
        ends = [(le.grant.deadline, id(le), le) for le in leases]
        heapq.heapify(ends)
        for batch in renewal_batches(leases, time.monotonic()):
            # between batches too: a lease must be declared lost at its deadline, not when the
            # round ends (each batch may take until its earliest deadline)
            self._expire(ends)
            self._renew(batch)
        self._expire(ends)
        if self._late:
            self._late.try_due(self._next_due())  # (never holding up a renewal)
        self._sleep_until = min(self._next_due(), self._late.next_due())

    def _next_due(self) -> float:
        """When a lease is next to be renewed, or declared lost."""
        with self._guard:
            times = [min(le.renew_at, le.grant.deadline) for le in self._leases.values()]
        return min(times, default=math.inf)

    def _expire(self, ends: list[tuple[float, int, Tracked]]) -> None:
        """Declare lost the leases whose deadline has passed (``ends``: a heap of the round's
        deadlines; a lease renewed since is skipped)."""
        now = time.monotonic()
        while ends and ends[0][0] <= now:
            lease = heapq.heappop(ends)[2]
            if now >= lease.grant.deadline:
                self._lose(lease, "by its local deadline, no renewal confirmed")

    def _renew(self, batch: list[Tracked]) -> None:
        with self._guard:  # not the ones declared lost, released or dropped meanwhile
            batch = [le for le in batch if le.grant in self._leases and le.lose() is not None]
        if not batch:
            return
        specs = [lease.spec for lease in batch]
        holders = [lease.grant.holder for lease in batch]
        sent_at = time.monotonic()
        # A server that hangs must not hold the worker past a lease's deadline, at which its
        # loss is to be signalled (and the socket timeout may be longer than the whole ttl);
        # within one request timeout, so that a failure is known (and re-tried) before it.
        left = min(lease.grant.deadline for lease in batch) - sent_at
        left = min(left, self._grants.request_timeout)
        self._counters.add(renewal_calls=1)
        # (a lease that runs out meanwhile was lost for want of an answer)
        failing = [lease.grant.renewal_sent() for lease in batch]
        held: list[Any]
        try:
            held = list(self._grants.renew(specs, holders, [s.ttl for s in specs], left))
        except LockError as exc:  # unreachable, or not acknowledged by the replicas
            held = [exc] * len(batch)
        now = time.monotonic()
        for lease, ok, failed in zip(batch, held, failing, strict=True):
            spec, grant = lease.spec, lease.grant
            if isinstance(ok, LockError):  # not confirmed, not refused: try again soon
                self._counters.add(renewal_failures=1)
                logger.debug("renewal of %r unconfirmed: %s", spec.name, ok)
                lease.renew_at = renewal_retry(now, spec.ttl)
            elif ok == RENEWED:
                self._counters.add(renewals=1)
                if renewal_late(grant.deadline - sent_at, spec.ttl):
                    _log_late(lease, grant.deadline - sent_at, failed)
                grant.renewed(sent_at, spec.ttl)
                lease.renew_at = next_renewal(sent_at, spec.ttl)
            else:
                self._lose(lease, "at renewal", other_holder=ok == TAKEN)
                continue  # (a loss: no renewal, and no renewal failure either)
            if events.on:
                events.emit(events.Renewal(spec.primitive, spec.name, ok == RENEWED))

    def _lose(self, lease: Tracked, found: str, *, other_holder: bool = False) -> None:
        with self._guard:
            if self._leases.pop(lease.grant, None) is None:
                return  # released meanwhile: a renewal answered after release is no loss
        lose = lease.lose()
        if lose is None:
            return  # dropped: nobody is left to hear of it
        if lease.deliver is not None:
            lease.deliver(lose, lease.grant, found, other_holder)
        else:
            lose(lease.grant, found, other_holder=other_holder)

    def close(self) -> None:
        # the give-backs left get one request timeout more
        wait = self._grants.request_timeout if self._late else 0.0
        self._late.end_by(time.monotonic() + wait)
        self._closing = True
        self._wake.set()
        self._worker.stop(2.0 + wait)
        with self._guard:
            self._leases.clear()
            self._running = False


def _log_late(lease: Tracked, left: float, failed: bool) -> None:
    spec = lease.spec
    why = "after renewals that got no answer" if failed else "the watchdog ran late"
    logger.warning(
        "fencelock: %s (token %d) renewed late, %.3f s of its %g s lease left: %s",
        spec.what,
        lease.grant.fence,
        left,
        spec.ttl,
        why,
        extra={
            "event": "renewal_late",
            "lock_name": spec.name,
            "token": lease.grant.fence,
            "reason": why,
            "seconds_left": left,
        },
    )


def _user_site() -> tuple[str, int]:
    """Where the user's code took the lock: the first frame outside fencelock (the warning of a
    lock dropped while held points there, not at the garbage collector's weakref.py)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("fencelock."):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def _dropped(
    leases: dict[Grant, Tracked], grant: Grant, spec: LeaseSpec, site: tuple[str, int], _: object
) -> None:
    """A lock object was collected: warn if it still held a renewed lease, at the line that took
    it (``site``). (Called by the garbage collector, in whatever thread, maybe inside a section
    under the watchdog's guard: so it only reads, and the worker drops the lease at its next
    round.)"""
    if sys.is_finalizing():
        return  # the process is ending: so are its leases' renewals, as expected
    if grant in leases and not grant.lost and grant.pid == os.getpid():
        words = spec.words
        message = (
            f"{spec.what}, {words.acquired} here, was dropped without {words.release}(): its "
            "lease is no longer renewed"
        )
        warnings.warn_explicit(message, ResourceWarning, *site)
