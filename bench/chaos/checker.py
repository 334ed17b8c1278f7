"""The checker: pure functions from a history (a list of events, see ``history``) to a report.

No I/O, no clock: every number comes from the events, so hand-made histories test it
(``tests/chaos/test_chaos_checker.py``). What it counts, per lock name:

grant
    One successful acquire, from when it returned (``acquire``) to when its holder stopped
    holding it: ``release`` called, the worker SIGKILLed (``killed``), or the worker's history
    ended. A re-entry (``reenter``) is part of its grant.
belief
    The part of a grant during which its holder, by its own knowledge, held the lock: from the
    acquire until ``release`` was called, the worker was killed, it was told of a loss (``lost``
    from ``on_lost``, ``check_failed``, ``cancelled``, or a ``write_refused``), or, for a lock
    that is not renewed, its lease ended by its own clock (``until`` of the acquire or of the
    last re-entry: ``lease_end``), whichever came first. A holder knows when its lease ends
    (``check()`` fails from then on, ``remaining()`` is 0), and fencelock promises no
    exclusion past it: a holder slow to call ``release()`` (a loaded machine, a long gap after
    its last ``check()``) holds nothing meanwhile, and fencing refuses its late writes. The
    renewed kinds (``history.RENEWED_KINDS``) have no known end: a renewal moves it unrecorded,
    so their belief lasts until release or a loss told, and every loss must be told; except a
    grant whose lease had ended already when its acquire returned (``until`` not after the
    ``acquire`` event: ``remaining()`` was 0; under load the hand-over can outlast a lease),
    which no renewal revives. A paused (SIGSTOPped) holder keeps believing within its lease:
    that is what a pause is.
overlap
    Two grants of one name, by different workers, whose beliefs intersect: two holders inside
    the critical section at once, each by its own belief.
superseded write
    A write of a grant answered after a newer grant of the same name (see loss) had returned:
    the holder was overtaken with the write sent or in flight (the time a worker records as
    sent comes before the request leaves: a SIGSTOP can fall between, and the write then
    reaches the resource after the newer grant). Fencing refuses it when the newer holder has
    written first; one that arrives before the newer holder's first write is not stale in the
    resource's eyes and is accepted (and then usually lost, see lost updates). Unfenced: one
    accepted although a newer holder's write had been accepted before it was sent (a stale
    write accepted, too). A scenario cannot make the newer holder write first: on a loaded
    machine its own lease may end before it writes, and then nothing can refuse the overtaken
    holder's write.
stale write accepted
    A write accepted with a token lower than the token of a write accepted before it was sent
    (per key). The fenced resource must refuse every such write: this must be 0 always.
lost updates
    Each accepted write stores (value read) + 1, so without lost updates the final counter
    equals the number of accepted writes. Lost updates = accepted writes - final counter.
    Fencing only the write does not prevent them: a superseded holder's write that lands between
    the newer holder's read and its write is accepted, then overwritten (docs/leases.md,
    "Read-modify-write: fence the read too").
loss
    A grant whose lock was taken by another worker while it held it (a newer grant of the name
    returned before its hold ended: asked for after it returned, or with a larger token), or
    whose release found it gone (``release_failed`` with
    ``LockLost``/``LockNotOwned``). Signalled: by ``on_lost``/``check_failed``/``cancelled``/
    ``write_refused`` before the release (in time), only by the release raising (at release), or
    never. Every loss of a lock with ``auto_renew`` (``history.RENEWED_KINDS``) must be signalled.
uncancelled block
    Locks with ``on_lost_policy="cancel"`` (``history.CANCELLING_KINDS``) only: a grant whose
    holder was told of a loss inside its ``async with`` block (``lost``, ``cancelled`` or
    ``check_failed`` before ``release``) must stop at its next await, and its block must end
    with ``LockLost``. Reported: a step begun after the loss was declared (``read``, ``reenter``,
    ``check_passed`` or ``write_attempt`` after ``lost``/``cancelled``), and a block that ended
    otherwise: normally, or with ``CancelledError`` or any error but those of ``RELEASE_ERRORS``.
masked loss
    Such a block that ended instead with the error of a release that could not reach the servers
    (``LockConnectionError``, which the block's exit lets through in place of ``LockLost``). Told
    apart from the uncancelled blocks: the loss was signalled, and the error is a typed one.
blocked loop
    An asyncio holder's event loop blocked by a sync call while it held (``loop_blocked`` to
    ``loop_resumed``, recorded by the worker). The grant must keep its lease through it
    (``leases_not_kept``): nobody else granted the name during its hold, no loss told (``lost``,
    ``check_failed``, ``cancelled``, a refused write), a write sent after the block (after a
    passed ``check()``) and accepted, and a block that ends normally. And the stall must be
    reported (``unreported_stalls``): a ``fencelock.watchdog`` warning that the loop was blocked
    (``library_log``), after each block longer than a third of the ttl.
token regression
    A grant whose token is not larger than that of a grant returned before it was requested.
orphaned lock
    After the run (every worker stopped, every fault healed) a lock key without an expiry or
    with a PTTL above the ttl, or a lock a fresh client could not acquire within the harness's
    bound (``final_acquire`` = -1). A final acquire that failed with an error (-2) leaves the
    question open: ``unverified``.
recovery
    Per fault and lock name. A fault on a holder (killed, paused, its loop blocked): from the
    fault until another worker was granted the lock. A fault on servers or the network: 0 if
    grants requested after it began were returned before it was healed (the service went on),
    else from the heal until the first grant requested after the fault began. None: no such
    grant before the run ended.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from . import history as h
from .history import Event

NOT_OWNED = ("LockLost", "LockNotOwned")
STALL_LOG: Final = "event loop was blocked"  # in fencelock.watchdog's warning of a stall
IN_TIME = "in time"  # signalled before the release: on_lost, check() or a refused write
AT_RELEASE = "at release"  # only release() raising told the holder
NEVER = "never"


@dataclass(frozen=True, slots=True)
class Write:
    worker: str
    name: str
    token: int
    value: int | None
    sent: float
    done: float
    outcome: str  # WRITE_ACCEPTED, WRITE_REFUSED, WRITE_ERROR, or "" (never answered)
    detail: str = ""


@dataclass(eq=False)
class Grant:
    worker: str
    name: str
    token: int | None
    requested: float  # acquire called
    start: float  # acquire returned
    hold_end: float = float("inf")
    # when its lease ends by the holder's clock, as last known (acquire, re-entry); inf: not
    # recorded, or a renewed lock's (moved by renewals)
    lease_end: float = float("inf")
    ended_by: str = ""  # "release", "killed", "exit", "end of history"
    released: bool | None = None  # release() returned (True) or raised (False)
    release_error: str = ""
    signals: list[tuple[float, str]] = field(default_factory=list)  # (t, event kind)
    steps: list[tuple[float, str]] = field(default_factory=list)  # (t, kind): read, reenter,
    #   check_passed, write_attempt: what the holder began
    checks_passed: list[float] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    blocks: list[tuple[float, float]] = field(default_factory=list)  # its event loop blocked:
    #   (loop_blocked, loop_resumed), inf while not resumed
    stalls: list[float] = field(default_factory=list)  # the library reported a blocked loop

    @property
    def belief_end(self) -> float:
        told = [t for t, kind in self.signals if kind != h.RELEASE_FAILED and t <= self.hold_end]
        return min([self.hold_end, self.lease_end, *told])

    def __repr__(self) -> str:
        return (
            f"Grant({self.worker} {self.name!r} token={self.token} "
            f"{self.start:.3f}..{self.hold_end:.3f} {self.ended_by})"
        )


@dataclass(frozen=True, slots=True)
class Overlap:
    name: str
    earlier: Grant
    later: Grant
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Loss:
    grant: Grant
    how: str  # "taken over" or "gone at release"
    at: float  # when it became visible in the history
    signalled: str  # IN_TIME, AT_RELEASE or NEVER


@dataclass(frozen=True, slots=True)
class Fault:
    id: int
    name: str  # the lock it aims at, "" for all
    scope: str  # HOLDER or SERVER
    detail: str
    start: float
    end: float | None
    targets: frozenset[str]  # workers it killed or paused


@dataclass(frozen=True, slots=True)
class Recovery:
    fault: Fault
    name: str
    seconds: float | None  # None: no grant before the history ended


@dataclass
class NameReport:
    name: str
    kind: str = ""
    ttl: float | None = None
    acquisitions: int = 0
    overlaps: list[Overlap] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    superseded_accepted: list[Write] = field(default_factory=list)
    superseded_refused: list[Write] = field(default_factory=list)
    unfenced: list[Write] = field(default_factory=list)  # superseded, accepted, and stale
    refused_not_superseded: list[Write] = field(default_factory=list)
    stale_accepted: list[Write] = field(default_factory=list)
    final_value: int | None = None
    lost_updates: int | None = None
    unexplained_increments: int = 0
    losses: list[Loss] = field(default_factory=list)
    late_checks: list[tuple[Grant, float]] = field(default_factory=list)
    token_regressions: list[Grant] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    unverified: str = ""  # why the final probe failed ("": it did not)
    threads_died: list[str] = field(default_factory=list)  # worker threads ended by exceptions
    # a worker's own loop ended by an exception: a lock call raised something untyped
    untyped_errors: list[str] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    uncancelled: list[tuple[Grant, str]] = field(default_factory=list)  # cancelling kinds only
    masked_losses: list[tuple[Grant, str]] = field(default_factory=list)  # the same
    loop_blocks: int = 0  # grants whose event loop was blocked (asyncio kinds only)
    leases_not_kept: list[tuple[Grant, str]] = field(default_factory=list)  # of those grants
    unreported_stalls: list[tuple[Grant, str]] = field(default_factory=list)  # the same

    def count(self, outcome: str) -> int:
        return sum(1 for w in self.writes if w.outcome == outcome)

    @property
    def renewed(self) -> bool:
        """Whether this lock is renewed by the watchdog (its losses must all be signalled)."""
        return self.kind in h.RENEWED_KINDS

    @property
    def locked(self) -> bool:
        """Whether this name is a lock (the ``versioned`` kind takes none: its "grants" are
        reads of a version, which overlap by design)."""
        return self.kind != h.VERSIONED

    @property
    def cancelling(self) -> bool:
        """Whether this lock has ``on_lost_policy="cancel"`` (see ``uncancelled_blocks``)."""
        return self.kind in h.CANCELLING_KINDS

    @property
    def losses_signalled(self) -> int:
        return sum(1 for loss in self.losses if loss.signalled != NEVER)

    @property
    def losses_in_time(self) -> int:
        return sum(1 for loss in self.losses if loss.signalled == IN_TIME)

    @property
    def unsignalled(self) -> list[Loss]:
        return [loss for loss in self.losses if loss.signalled == NEVER]

    @property
    def not_recovered(self) -> list[Recovery]:
        return [r for r in self.recoveries if r.seconds is None]

    @property
    def worst_recovery(self) -> float | None:
        """The longest recovery; inf if some fault was never recovered from; None: no fault."""
        if not self.recoveries:
            return None
        if self.not_recovered:
            return float("inf")
        return max(r.seconds for r in self.recoveries if r.seconds is not None)


@dataclass
class Report:
    names: dict[str, NameReport]
    faults: list[Fault]
    grants: list[Grant]

    @property
    def stale_accepted(self) -> int:
        return sum(len(r.stale_accepted) for r in self.names.values())


# -- building blocks -----------------------------------------------------------------------------


def grants(events: Sequence[Event]) -> list[Grant]:
    """Every grant of the history, with its hold, signals, checks and writes, by start time."""
    events = sorted(events, key=lambda e: e.t)
    # (a renewed lock's lease goes on past the end known at its grant, unless that end had
    # passed already when the holder got the grant: no renewal revives a lease that ended)
    renewed = {e.name for e in events if e.kind == h.CONFIG and e.detail in h.RENEWED_KINDS}

    def lease_ends(grant: Grant, e: Event) -> None:
        if e.until is not None and (e.name not in renewed or e.until <= e.t):
            grant.lease_end = e.until

    current: dict[str, Grant] = {}  # worker -> its latest grant (kept after release, for results)
    sent: dict[str, Event] = {}  # worker -> its write waiting for an answer
    result: list[Grant] = []
    end_of_history = events[-1].t if events else 0.0

    def close(grant: Grant, t: float, why: str) -> None:
        if grant.ended_by == "":
            grant.hold_end, grant.ended_by = t, why

    for e in events:
        grant = current.get(e.worker)
        if e.kind == h.ACQUIRE:
            if grant is not None:
                close(grant, e.t, "acquired again")
            grant = Grant(e.worker, e.name, e.token, e.t if e.t0 is None else e.t0, e.t)
            lease_ends(grant, e)
            current[e.worker] = grant
            result.append(grant)
        elif e.kind == h.ACQUIRE_FAILED:
            current.pop(e.worker, None)  # what follows belongs to no grant of the past
        elif grant is None or e.worker in (h.NEMESIS, h.HARNESS):
            continue
        elif e.kind == h.RELEASE:
            close(grant, e.t, "release")
        elif e.kind == h.RELEASED:
            grant.released = True
        elif e.kind == h.RELEASE_FAILED:
            grant.released, grant.release_error = False, e.detail
            if e.detail in NOT_OWNED:
                grant.signals.append((e.t, e.kind))
        elif e.kind in (h.KILLED, h.EXIT):
            close(grant, e.t, "killed" if e.kind == h.KILLED else "exit")
        elif e.kind in (h.LOST, h.CHECK_FAILED, h.CANCELLED):
            grant.signals.append((e.t, e.kind))
        elif e.kind in (h.READ, h.REENTER):
            grant.steps.append((e.t, e.kind))
            lease_ends(grant, e)
        elif e.kind == h.LOOP_BLOCKED:
            grant.blocks.append((e.t, float("inf")))
        elif e.kind == h.LOOP_RESUMED and grant.blocks:
            grant.blocks[-1] = (grant.blocks[-1][0], e.t)
        elif e.kind == h.LIBRARY_LOG and STALL_LOG in e.detail:
            grant.stalls.append(e.t)
        elif e.kind == h.CHECK_PASSED:
            grant.checks_passed.append(e.t)
            grant.steps.append((e.t, e.kind))
        elif e.kind == h.WRITE_ATTEMPT:
            sent[e.worker] = e
            grant.steps.append((e.t, e.kind))
        elif e.kind in (h.WRITE_ACCEPTED, h.WRITE_REFUSED, h.WRITE_ERROR):
            attempt = sent.pop(e.worker, None)
            t0 = e.t0 if e.t0 is not None else (attempt.t if attempt else e.t)
            value = e.value if e.value is not None else (attempt.value if attempt else None)
            token = e.token if e.token is not None else grant.token
            assert token is not None, f"a write without a token: {e}"
            grant.writes.append(
                Write(e.worker, grant.name, token, value, t0, e.t, e.kind, e.detail)
            )
            if e.kind == h.WRITE_REFUSED:
                grant.signals.append((e.t, e.kind))
    # writes never answered: the worker was killed (or its history cut) while they were sent
    for worker, attempt in sent.items():
        grant = current[worker]
        token = attempt.token if attempt.token is not None else grant.token
        if token is not None:
            w = Write(worker, grant.name, token, attempt.value, attempt.t, attempt.t, "")
            grant.writes.append(w)
    for grant in result:
        close(grant, end_of_history, "end of history")
    return result


def by_name(items: Iterable[Grant]) -> dict[str, list[Grant]]:
    groups: dict[str, list[Grant]] = defaultdict(list)
    for grant in items:
        groups[grant.name].append(grant)
    for group in groups.values():
        group.sort(key=lambda g: g.start)
    return groups


def overlaps(grant_list: Sequence[Grant]) -> list[Overlap]:
    """Pairs of grants of one name, by different workers, whose beliefs intersect."""
    found: list[Overlap] = []
    for name, group in by_name(grant_list).items():
        for i, earlier in enumerate(group):
            belief = earlier.belief_end
            for later in group[i + 1 :]:
                if later.start >= belief:
                    break
                if later.worker == earlier.worker:
                    continue
                end = min(belief, later.belief_end)
                if end > later.start:
                    found.append(Overlap(name, earlier, later, later.start, end))
    return found


def newer(g: Grant, than: Grant) -> bool:
    """Whether ``g`` was granted after ``than``: asked for after ``than`` had returned, or, when
    the two acquires overlapped in time, given a larger token (tokens order the grants at the
    servers, and an acquire can return long after its grant)."""
    if g.start <= than.requested:  # g returned before ``than`` was even asked for
        return False
    if g.requested >= than.start:
        return True
    return g.token is not None and than.token is not None and g.token > than.token


def taken_over_at(grant: Grant, same_name: Sequence[Grant]) -> float | None:
    """When ``grant`` was first superseded: the first return of a newer grant of the name, by
    another worker, before ``grant``'s hold ended. It can precede ``grant``'s own return, when
    its acquire returned after its lease had already run out."""
    times = [
        g.start
        for g in same_name
        if g.worker != grant.worker and g.start < grant.hold_end and newer(g, grant)
    ]
    return min(times) if times else None


def losses(grant_list: Sequence[Grant]) -> list[Loss]:
    found: list[Loss] = []
    for group in by_name(grant_list).values():
        for grant in group:
            taken = taken_over_at(grant, group)
            gone = grant.released is False and grant.release_error in NOT_OWNED
            if taken is None and not gone:
                continue
            if not grant.signals:
                signalled = NEVER
            elif any(kind != h.RELEASE_FAILED and t <= grant.hold_end for t, kind in grant.signals):
                signalled = IN_TIME
            else:
                signalled = AT_RELEASE
            if taken is not None:
                found.append(Loss(grant, "taken over", taken, signalled))
            else:
                found.append(Loss(grant, "gone at release", grant.hold_end, signalled))
    return found


def superseded_writes(grant_list: Sequence[Grant]) -> list[Write]:
    """Writes of a grant answered after another worker had been granted the same name (see
    "superseded write" in the module's docstring)."""
    found: list[Write] = []
    for group in by_name(grant_list).values():
        for grant in group:
            taken = taken_over_at(grant, group)
            if taken is not None:
                found.extend(w for w in grant.writes if w.done > taken)
    return found


def late_checks(grant_list: Sequence[Grant]) -> list[tuple[Grant, float]]:
    """``check()`` calls that passed after another worker had been granted the name."""
    found: list[tuple[Grant, float]] = []
    for group in by_name(grant_list).values():
        for grant in group:
            taken = taken_over_at(grant, group)
            if taken is not None:
                found.extend((grant, t) for t in grant.checks_passed if t > taken)
    return found


def leases_not_kept(grant_list: Sequence[Grant]) -> list[tuple[Grant, str]]:
    """Grants whose holder's event loop was blocked and that did not keep their lease through
    it (see "blocked loop" in the module's docstring), each with everything that went wrong."""
    found: list[tuple[Grant, str]] = []
    for group in by_name(grant_list).values():
        for grant in group:
            if not grant.blocks:
                continue
            wrong = []
            resumed = max(end for _, end in grant.blocks)
            if resumed == float("inf"):
                wrong.append(f"its loop was still blocked when its hold ended ({grant.ended_by})")
            taken = taken_over_at(grant, group)
            if taken is not None:
                wrong.append(f"another worker was granted the lock at {taken:.3f}")
            told = [(t, kind) for t, kind in grant.signals if kind != h.RELEASE_FAILED]
            if told:
                wrong.append("told of a loss: " + ", ".join(f"{k} at {t:.3f}" for t, k in told))
            after = [w.outcome or "unanswered" for w in grant.writes if w.sent >= resumed]
            if h.WRITE_ACCEPTED not in after:
                wrong.append(f"no write accepted after the block ({', '.join(after) or 'none'})")
            if grant.released is False:
                wrong.append(f"the block ended with {grant.release_error}")
            if wrong:
                found.append((grant, "; ".join(wrong)))
    return found


def unreported_stalls(
    grant_list: Iterable[Grant], ttl_ms: dict[str, int]
) -> list[tuple[Grant, str]]:
    """Blocks of a grant's event loop longer than a third of its ttl that the library did not
    report (no stall warning from the holder since the block began)."""
    found: list[tuple[Grant, str]] = []
    for grant in grant_list:
        third = ttl_ms.get(grant.name, 0) / 3000
        for start, end in grant.blocks:
            if end - start > third and not any(t >= start for t in grant.stalls):
                found.append((grant, f"the loop blocked {start:.3f}..{end:.3f} was not reported"))
    return found


TOLD: Final = (h.LOST, h.CANCELLED, h.CHECK_FAILED)  # the library declared the lease lost
DECLARED: Final = (h.LOST, h.CANCELLED)  # ... and (cancel policy) cancelled the block
# errors of a release that could not reach the servers: the block's exit lets them through in
# place of LockLost (a masked loss, reported apart)
RELEASE_ERRORS: Final = ("LockConnectionError",)


def _told_in_block(grant: Grant) -> bool:
    return any(kind in TOLD and t <= grant.hold_end for t, kind in grant.signals)


def uncancelled_blocks(grant_list: Iterable[Grant]) -> list[tuple[Grant, str]]:
    """Grants of a lock with ``on_lost_policy="cancel"`` (pass only those) whose loss, told
    inside the block, did not cancel it: a step begun after the loss was declared, or a block
    that did not end with ``LockLost`` (see the module's docstring), each with what happened."""
    found: list[tuple[Grant, str]] = []
    for grant in grant_list:
        if not _told_in_block(grant):
            continue
        declared = [t for t, kind in grant.signals if kind in DECLARED and t <= grant.hold_end]
        if declared:
            lost_at = min(declared)
            later = [(t, kind) for t, kind in grant.steps if t > lost_at]
            for t, kind in later[:1]:
                found.append((grant, f"{kind} at {t:.3f}, after the loss at {lost_at:.3f}"))
        if grant.ended_by != "release" or grant.released is None:
            continue  # killed, or its history ended, before the block did
        if grant.released:
            found.append((grant, "the block ended normally after the loss, not with LockLost"))
        elif grant.release_error not in ("LockLost", *RELEASE_ERRORS):
            found.append((grant, f"the block ended with {grant.release_error}, not LockLost"))
    return found


def masked_losses(grant_list: Iterable[Grant]) -> list[tuple[Grant, str]]:
    """Grants of a lock with ``on_lost_policy="cancel"`` (pass only those) whose loss, told
    inside the block, ended the block with a ``RELEASE_ERRORS`` error instead of ``LockLost``."""
    return [
        (grant, f"the block ended with {grant.release_error} from its release, not LockLost")
        for grant in grant_list
        if _told_in_block(grant)
        and grant.ended_by == "release"
        and grant.released is False
        and grant.release_error in RELEASE_ERRORS
    ]


def stale_accepted(writes: Sequence[Write]) -> list[Write]:
    """Accepted writes whose token is lower than that of a write accepted (per key) before
    they were sent. Keyed by lock name: each name has its own counter key."""
    found: list[Write] = []
    per_key: dict[str, list[Write]] = defaultdict(list)
    for w in writes:
        if w.outcome == h.WRITE_ACCEPTED:
            per_key[w.name].append(w)
    for accepted in per_key.values():
        accepted.sort(key=lambda w: w.done)
        done = [w.done for w in accepted]
        highest: list[int] = []  # highest[i]: largest token among accepted[: i + 1]
        for w in accepted:
            highest.append(max(w.token, highest[-1]) if highest else w.token)
        for w in accepted:
            before = bisect.bisect_left(done, w.sent)  # accepted[:before] were done before it
            if before and highest[before - 1] > w.token:
                found.append(w)
    return found


def token_regressions(grant_list: Sequence[Grant]) -> list[Grant]:
    """Grants whose token is not larger than that of a grant returned before they were
    requested (tokens must strictly increase)."""
    found: list[Grant] = []
    for group in by_name(grant_list).values():
        tokened = [g for g in group if g.token is not None]
        starts = [g.start for g in tokened]  # sorted: by_name sorts by start
        highest: list[int] = []
        for g in tokened:
            assert g.token is not None
            highest.append(max(g.token, highest[-1]) if highest else g.token)
        for g in tokened:
            assert g.token is not None
            before = bisect.bisect_left(starts, g.requested)
            if before and highest[before - 1] >= g.token:
                found.append(g)
    return found


def faults(events: Sequence[Event]) -> list[Fault]:
    starts = [e for e in events if e.kind == h.FAULT_START]
    ends = {e.value: e.t for e in events if e.kind == h.FAULT_END}
    targets: dict[int | None, set[str]] = defaultdict(set)
    for e in events:
        if e.kind in (h.KILLED, h.PAUSED, h.BLOCKED) and e.value is not None:
            targets[e.value].add(e.worker)
    result = []
    for e in sorted(starts, key=lambda e: e.t):
        assert e.value is not None, f"a fault without an id: {e}"
        scope = e.scope or h.SERVER
        fault = Fault(
            e.value, e.name, scope, e.detail, e.t, ends.get(e.value), frozenset(targets[e.value])
        )
        result.append(fault)
    return result


def recoveries(
    fault_list: Sequence[Fault], grant_list: Sequence[Grant], names: Iterable[str]
) -> list[Recovery]:
    groups = by_name(grant_list)
    result: list[Recovery] = []
    for fault in fault_list:
        for name in [fault.name] if fault.name else sorted(names):
            others = [g for g in groups.get(name, []) if g.worker not in fault.targets]
            result.append(Recovery(fault, name, _recovery(fault, others)))
    return result


def _recovery(fault: Fault, others: Sequence[Grant]) -> float | None:
    if fault.scope == h.HOLDER:
        after = [g.start for g in others if g.start > fault.start]
        return min(after) - fault.start if after else None
    # a server fault: only grants asked for once it had begun count
    asked = [g for g in others if g.requested >= fault.start]
    end = fault.start if fault.end is None else fault.end
    if any(g.start <= end for g in asked):
        return 0.0  # grants went on while it lasted
    after = [g.start for g in asked]
    return min(after) - end if after else None


def orphans(events: Sequence[Event], ttl_ms: dict[str, int]) -> dict[str, list[str]]:
    """Per name, what was left held after the run (see the module's docstring)."""
    found: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e.kind == h.FINAL_KEY and e.value is not None:
            limit = ttl_ms.get(e.name)
            if e.value == -1:
                found[e.name].append(f"{e.detail}: lock key without an expiry")
            elif limit is not None and e.value > limit:
                found[e.name].append(f"{e.detail}: PTTL {e.value} ms > ttl {limit} ms")
        elif e.kind == h.FINAL_ACQUIRE and e.value == -1:
            found[e.name].append(f"a fresh client could not acquire it: {e.detail}")
    return found


def unverified(events: Sequence[Event]) -> dict[str, str]:
    """Per name, why the final probe could not tell whether the lock was left held."""
    return {e.name: e.detail for e in events if e.kind == h.FINAL_ACQUIRE and e.value == -2}


# -- the whole report ----------------------------------------------------------------------------


def check(events: Sequence[Event]) -> Report:
    events = sorted(events, key=lambda e: e.t)
    grant_list = grants(events)
    names: dict[str, NameReport] = {}

    def report(name: str) -> NameReport:
        if name not in names:
            names[name] = NameReport(name)
        return names[name]

    ttl_ms: dict[str, int] = {}
    for e in events:
        if e.kind == h.CONFIG:
            r = report(e.name)
            r.kind = e.detail
            if e.value is not None:
                r.ttl, ttl_ms[e.name] = e.value / 1000, e.value
        elif e.kind == h.FINAL_VALUE:
            report(e.name).final_value = e.value
        elif e.kind == h.THREAD_DIED:
            report(e.name).threads_died.append(f"{e.worker} {e.detail}")
            if e.detail.startswith("worker "):  # (workers.run records its own death so)
                report(e.name).untyped_errors.append(f"{e.worker} {e.detail}")
    for grant in grant_list:
        r = report(grant.name)
        r.acquisitions += 1
        r.writes.extend(grant.writes)
    for o in overlaps(grant_list):
        report(o.name).overlaps.append(o)
    superseded = set(map(id, superseded_writes(grant_list)))
    for r in names.values():
        for w in r.writes:
            if id(w) in superseded and w.outcome == h.WRITE_ACCEPTED:
                r.superseded_accepted.append(w)
            elif id(w) in superseded and w.outcome == h.WRITE_REFUSED:
                r.superseded_refused.append(w)
            elif w.outcome == h.WRITE_REFUSED:
                r.refused_not_superseded.append(w)
        r.stale_accepted = stale_accepted(r.writes)
        stale = set(map(id, r.stale_accepted))
        r.unfenced = [w for w in r.superseded_accepted if id(w) in stale]
        if r.final_value is not None:
            accepted = r.count(h.WRITE_ACCEPTED)
            unknown = r.count("")
            r.lost_updates = max(0, accepted - r.final_value)
            r.unexplained_increments = max(0, r.final_value - accepted - unknown)
    for loss in losses(grant_list):
        report(loss.grant.name).losses.append(loss)
    for grant, t in late_checks(grant_list):
        report(grant.name).late_checks.append((grant, t))
    cancelling = [g for g in grant_list if report(g.name).cancelling]
    for grant, why in uncancelled_blocks(cancelling):
        report(grant.name).uncancelled.append((grant, why))
    for grant, why in masked_losses(cancelling):
        report(grant.name).masked_losses.append((grant, why))
    for grant in grant_list:
        report(grant.name).loop_blocks += bool(grant.blocks)
    for grant, why in leases_not_kept(grant_list):
        report(grant.name).leases_not_kept.append((grant, why))
    for grant, why in unreported_stalls(grant_list, ttl_ms):
        report(grant.name).unreported_stalls.append((grant, why))
    for grant in token_regressions(grant_list):
        report(grant.name).token_regressions.append(grant)
    for name, found in orphans(events, ttl_ms).items():
        report(name).orphaned.extend(found)
    for name, why in unverified(events).items():
        report(name).unverified = why
    fault_list = faults(events)
    for rec in recoveries(fault_list, grant_list, list(names)):
        report(rec.name).recoveries.append(rec)
    return Report(names, fault_list, grant_list)
