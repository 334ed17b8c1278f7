"""Time rules: how long a blocked acquire waits, how long a lease lasts here, when the watchdog
renews, how long a releaser yields."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Protocol, TypeVar


def remaining(deadline: float | None, now: float) -> float | None:
    """Seconds left until ``deadline`` (monotonic), or None for no deadline."""
    return None if deadline is None else max(0.0, deadline - now)


def retry_delay(
    pttl: float | None,
    left: float | None,
    max_poll: float | None,
    fallback: float,
    elapsed: float = 0.0,
) -> float:
    """How long to wait for a wake-up before re-trying an acquire that found the lock busy.

    Waiting costs the server nothing: the wake-up is a pub/sub message, and a message lost with
    a broken pub/sub connection is made up for when it is re-made (waiter.py), not by polling.
    The holder's remaining lease ``pttl`` is when the lock frees itself at the latest, so the
    one fallback re-try fires then (a key without expiry, not fencelock's: after ``fallback``);
    never later than ``max_poll`` if the user set one, nor past the caller's deadline (``left``
    seconds away; None waits forever). ``pttl`` counts from the moment the request left,
    ``elapsed`` seconds ago: the server read it somewhere between then and the reply's arrival,
    and a slow reply must not delay the re-try by its own lateness.
    """
    delay = fallback if pttl is None else pttl - elapsed
    if max_poll is not None:
        delay = min(delay, max_poll)
    if left is not None:
        delay = min(delay, left)
    return max(0.0, delay)


def drift(ttl: float) -> float:
    """Allowance for clock-rate differences between this host and the server over one lease
    (antirez's Redlock reference: 1% of the ttl plus 2 ms)."""
    return 0.01 * ttl + 0.002


def lease_deadline(sent_at: float, ttl: float) -> float:
    """Until when this process may believe it holds a lease of ``ttl`` seconds.

    Counted from ``sent_at``, the moment the request left (not when the reply came back): the
    server started the lease somewhere in between, so this is the conservative end.
    """
    return sent_at + ttl - drift(ttl)


# Redisson's default: renew when a third of the lease has passed, so two renewals can fail before
# the lease runs out.
RENEW_FRACTION = 1 / 3
# A renewal that failed (server unreachable) is retried this often, bounded by the lease.
RENEW_RETRY = 0.5
# Locks renewed per script call: bounds the time one call blocks the server.
RENEW_BATCH = 100


def next_renewal(sent_at: float, ttl: float) -> float:
    return sent_at + ttl * RENEW_FRACTION


def first_renewal(deadline: float, ttl: float) -> float:
    """When a lease that ends at ``deadline`` is first renewed: a third of the way into it,
    counted back from its deadline, not from when the watchdog takes it on. A grant whose reply
    came back late (or whose tracking took long) is renewed that much sooner: at once, when a
    third of its lease has passed already."""
    return deadline - ttl * (1 - RENEW_FRACTION)


def renewal_due(renew_at: float, ttl: float, now: float) -> bool:
    """Whether a lease goes into the renewal round happening ``now``. Leases due within the next
    sixth of their ttl join it early (harmless: the lease just restarts sooner), so leases taken
    at scattered times fall into step and share batches instead of one call each."""
    return now >= renew_at - ttl * RENEW_FRACTION / 2


def renewal_late(left: float, ttl: float) -> bool:
    """Whether a renewal sent with ``left`` seconds of the lease left came late: a third of
    the ttl later than planned or more (it failed before, or the watchdog was held up), with
    one more failure then fatal."""
    return left < ttl * RENEW_FRACTION


def renewal_retry(now: float, ttl: float) -> float:
    return now + min(RENEW_RETRY, ttl * RENEW_FRACTION / 2)


def handoff_needs_refresh(left: float, ttl: float) -> bool:
    """Whether a lease with ``left`` seconds to run must be restarted before it is handed to a
    local waiter whose lock has ``ttl``: a waiter gets at least what the watchdog keeps a lease
    at (two thirds of the ttl), never a lease about to end."""
    return left < ttl * (1 - RENEW_FRACTION)


def yield_after_release(round_trip: float) -> float:
    """How long a client that released a lock while other clients were waiting for it holds back
    before it tries to take the lock again: long enough for a woken waiter to get the message
    and take it (about two round trips), so the releaser does not win every time by being first.
    Bounded, since the waiter may have given up meanwhile."""
    return min(0.05, max(0.0005, 3 * round_trip))


class Renewable(Protocol):
    slot: int  # its Cluster slot (0 elsewhere): one script call renews keys of one slot only
    renew_at: float  # monotonic

    @property
    def ttl(self) -> float: ...


R = TypeVar("R", bound=Renewable)


def renewal_batches(leases: Iterable[R], now: float) -> list[list[R]]:
    """The renew script calls of the watchdog round happening ``now``: per slot, the leases due
    (``renewal_due``) in batches of up to ``RENEW_BATCH``. The last batch of a slot is filled up
    with the leases due soonest: renewing them early costs nothing, and leases taken at scattered
    times end up sharing full batches instead of a call each."""
    due: dict[int, list[R]] = {}
    later: dict[int, list[R]] = {}
    for lease in leases:
        group = due if renewal_due(lease.renew_at, lease.ttl, now) else later
        group.setdefault(lease.slot, []).append(lease)
    batches = []
    for slot, leases_due in due.items():
        room = -len(leases_due) % RENEW_BATCH
        if room and slot in later:
            leases_due += heapq.nsmallest(room, later[slot], key=lambda le: le.renew_at)
        batches += [leases_due[i : i + RENEW_BATCH] for i in range(0, len(leases_due), RENEW_BATCH)]
    return batches
