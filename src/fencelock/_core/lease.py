"""The rules that decide a lease's safety, as plain values and functions (no I/O).

The I/O code (``_async/``) asks these and does what they say; ``tests/core/test_lease.py``
checks each rule without a server. A lease moves through these states::

    acquire ──granted──▶ held ──renewed / re-entered──▶ held
                          │  └──handed off (local)──▶ held by the next local lock object
                          ├──released──▶ gone
                          └──lost (renewal refused, deadline passed, found gone)──▶ lost ──▶ gone

A lost grant never becomes held again: the lock object takes the name afresh with a new grant.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from .replies import Granted, release_grant
from .timing import handoff_needs_refresh, lease_deadline


# (weakly referable: tracing keeps a hold's open span by its grant, and forgets the span of a
# grant dropped without a release)
@dataclass(eq=False, slots=True, weakref_slot=True)
class Grant:
    """What this process knows about one grant of the lock."""

    holder: str  # the random holder token stored in Redis
    fence: int  # the fencing token of this grant
    pid: int  # a forked child must not act on its parent's grant
    deadline: float  # monotonic time until which the lease is certainly ours
    depth: int = 1  # hold count of a reentrant lock
    lost: bool = False
    # why it was lost (one of LOSS_REASONS), decided once, when it was found: every later report
    # of the loss (release, check, the block's end) gives this cause, not one guessed anew
    loss: str = ""
    task: Any = None  # the task inside ``async with``, cancelled under on_lost_policy="cancel"
    cancelled: bool = False  # the library cancelled that task because the lease was lost
    in_block: bool = False  # taken by ``with``/``async with``: the block's end releases it
    # Redlock: ``fence`` is safe to hand out only once a majority's counters were raised to it
    confirmed: bool = True
    # local hand-offs: the highest fencing token reserved for this streak (0: none reserved)
    reserved: int = 0
    since: float = 0.0  # monotonic time it was taken, for the hold-time metric (0: not timed)
    # a multi-lock's grant: the tokens of its other names, in order (``fence`` is the first's)
    more_fences: tuple[int, ...] = ()
    unanswered: bool = False  # a renewal was sent and got no answer (yet)

    # -- transitions: the grant changes only through these --------------------------------

    def expired(self, now: float) -> bool:
        """Whether the lease must be taken as gone: declared lost, or past its deadline."""
        return self.lost or self.deadline <= now

    @property
    def held_until(self) -> float | None:
        """Until when the lease certainly holds, as far as this process knows: its deadline,
        or None once it was declared lost (a release's allowance: ``_core/quorum.two_rounds``)."""
        return None if self.lost else self.deadline

    def renewed(self, sent_at: float, ttl: float) -> None:
        """A renewal (or extend) sent at ``sent_at`` restarted the lease at ``ttl``."""
        self.deadline = lease_deadline(sent_at, ttl)
        self.unanswered = False

    def reentered(self, sent_at: float, ttl: float) -> None:
        self.depth += 1
        self.renewed(sent_at, ttl)

    def mark_lost(self, reason: str) -> bool:
        """Mark the grant lost for ``reason``; True only the first time (the loss is signalled
        once, and keeps its first reason)."""
        if self.lost:
            return False
        self.lost, self.loss = True, reason
        return True

    def left_once(self) -> None:
        """A reentrant hold was left (others remain)."""
        self.depth -= 1

    def entered_block(self, task: Any) -> None:
        """Taken by ``with``/``async with`` in ``task``: the block's end releases it."""
        self.task = task
        self.in_block = True

    def timed_from(self, since: float) -> None:
        self.since = since

    def confirm(self) -> None:
        """Redlock: a majority's counters were raised to ``fence``: it may be handed out."""
        self.confirmed = True

    def cancel_task(self) -> None:
        """The lease was lost under on_lost_policy="cancel": the block's task is cancelled."""
        self.cancelled = True
        self.task.cancel()

    def renewal_sent(self) -> bool:
        """A renewal is going out; whether the one before it got no answer."""
        failed, self.unanswered = self.unanswered, True
        return failed


@dataclass(frozen=True, slots=True, eq=False)
class Words:
    """How the messages of a primitive speak of it and of its grant, in the words of its own
    docs: a lock is held, acquired and released; an election's candidate leads, campaigns and
    resigns; a latch's participant joins and leaves. (Compared by identity: one per primitive.)"""

    noun: str  # the object: "lock", "candidate", "latch"...
    holding: str = ""  # what holding the grant is called ("": "held by this <noun>")
    acquire: str = "acquire"  # the call that takes the grant
    release: str = "release"  # the call that gives it up
    acquired: str = "acquired"  # what the object is once it has taken it

    def __post_init__(self) -> None:
        if not self.holding:
            object.__setattr__(self, "holding", f"held by this {self.noun}")


LOCK_WORDS = Words("lock")


# Why a lease was lost (the ``reason`` of the lost-lease metric and log event).
EXPIRED = "expired"  # it ran out first: the work outlived it, the process paused, renewed late
UNREACHABLE = "unreachable"  # it ran out while its renewals got no answer
TAKEN_OVER = "taken_over"  # the server shows another holder of the name
DATA_LOSS = "data_loss"  # the server dropped it before it could expire (force_release, FLUSHALL,
# a restart without persistence, a failover to a replica that missed it, eviction)
LOSS_REASONS = (EXPIRED, UNREACHABLE, TAKEN_OVER, DATA_LOSS)
# each reason, for the message of LockLost
EXPLAINED = MappingProxyType(
    {
        EXPIRED: "its lease had expired",
        UNREACHABLE: "its lease ran out while renewals got no answer",
        TAKEN_OVER: "another holder has it",
        DATA_LOSS: "the server no longer had it before its lease could end (a force_release, a "
        "flush, a restart or failover that lost it, or eviction)",
    }
)


def loss_reason(grant: Grant, now: float, *, other_holder: bool = False) -> str:
    """Why ``grant`` is lost, from what was seen: the server showed ``other_holder``, or not
    this holder, or nothing (the deadline passed while a renewal got no answer, or with none
    sent). Before the local deadline the key cannot have expired on the server (that deadline
    comes first), so a server that no longer shows the holder then has dropped it."""
    if other_holder:
        return TAKEN_OVER
    if grant.deadline > now:
        return DATA_LOSS
    return UNREACHABLE if grant.unanswered else EXPIRED


def granted(result: Granted, holder: str, sent_at: float, ttl: float, pid: int) -> Grant:
    """The grant an acquire got, its lease counted from ``sent_at`` (a re-sent request: from
    the one that was granted, ``result.sent_at``)."""
    deadline = lease_deadline(sent_at if result.sent_at is None else result.sent_at, ttl)
    return Grant(
        holder,
        result.fence,
        pid,
        deadline,
        confirmed=result.confirmed,
        reserved=result.reserved,
        more_fences=result.more_fences,
    )


def arrived_late(sent_at: float, ttl: float, now: float) -> bool:
    """A grant whose reply came back after its lease's local deadline: the lease may be someone
    else's by now, so it is given back (and the acquire tries again with a new holder token)."""
    return lease_deadline(sent_at, ttl) <= now


def handoff_within_block(grant: Grant, to_ttl: float, now: float) -> Grant | None:
    """A local hand-off that needs no request: the next token of the block reserved for this
    streak, on the same lease, if enough of it is left for the next holder (``to_ttl``). None:
    the hand-off script must run (it restarts the lease and reserves a new block)."""
    if (
        grant.expired(now)  # a lost grant is never held again (the watchdog may mark it meanwhile)
        or grant.fence >= grant.reserved
        or handoff_needs_refresh(grant.deadline - now, to_ttl)
    ):
        return None
    return replace(
        grant,
        fence=grant.fence + 1,
        lost=False,
        loss="",
        task=None,
        cancelled=False,
        in_block=False,
    )


def trusted_release_grant(
    message: str | None, queued: str | None, block: int, queued_at: float, ttl: float, now: float
) -> Granted | None:
    """The grant a release announced to this waiter, if it may be used as it is: made to the
    queue entry the waiter's last re-try (sent at ``queued_at``) found in place, with at least
    half the ttl left counted from that re-try (the grant came after it). Else None: the next
    re-try finds the lock ours (and re-extends it) or busy."""
    if lease_deadline(queued_at, ttl) - now < ttl / 2:
        return None
    return release_grant(message, queued, block, sent_at=queued_at)


class Exit(enum.Enum):
    """What leaving a ``with`` block does about a lost lease."""

    NOTHING = "nothing"
    RAISE = "raise"  # raise LockLost (chained to the body's error, if any)
    NOTE = "note"  # the body's own error propagates, with the loss as a note on it


def exit_action(lost: bool, policy: str, body_raised: bool, cancelled_by_us: bool) -> Exit:
    """The exit policy table of ``__exit__``/``__aexit__``:

    ===========  ===========  ==========================  =======
    lease lost   policy       how the body ended           action
    ===========  ===========  ==========================  =======
    no           any          any                          NOTHING
    yes          "ignore"     any                          NOTHING
    yes          other        normally                     RAISE
    yes          other        cancelled by the library     RAISE (the cancellation is ours)
    yes          other        its own error                NOTE
    ===========  ===========  ==========================  =======
    """
    if not lost or policy == "ignore":
        return Exit.NOTHING
    if not body_raised or cancelled_by_us:
        return Exit.RAISE
    return Exit.NOTE


def should_cancel(policy: str, task: object, current: object) -> bool:
    """Whether a loss cancels the task in the block (on_lost_policy="cancel"). Not the task that
    is declaring it (its check(), or the release at the block's end): that one raises LockLost
    now, and a cancellation of itself would stay pending (before Python 3.13 Task.uncancel()
    does not withdraw it) and land in whatever it awaits next."""
    return policy == "cancel" and task is not None and task is not current


def reserve(one_at_a_time: bool, handoffs_ahead: int) -> int:
    """Fencing tokens to reserve with a grant: one, or enough for a streak of local hand-offs
    when waiters of this client are queued already (not where a grant needs a majority or
    replicas: ``one_at_a_time``)."""
    return 1 if one_at_a_time else 1 + handoffs_ahead


def time_left(deadline: float | None, request_timeout: float, now: float) -> float:
    """What is left of the bound of a call whose ``deadline`` (None: none) is near or has
    passed: that deadline plus one request timeout, and at most one request timeout (<= 0: no
    time left, the request is not sent)."""
    if deadline is None:
        return request_timeout
    return min(request_timeout, deadline + request_timeout - now)
