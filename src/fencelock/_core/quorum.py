"""The one-or-majority decision: what the answers of the servers that hold a name mean
together, and Redlock's arithmetic (quorum, validity, per-node timeouts).

Every function here is pure: the client sends one request to every server in parallel
(``_async/grants.py``) and hands the list of answers (an answer, or the exception that server
raised) to these functions to decide. One server is a majority of one: its answer is the
answer, and its failure is raised as it is.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import LockConnectionError, LockError, LockLost
from .kinds import Released
from .replies import GONE, RENEWED, Busy, Granted, renew_reply, unanswered
from .timing import drift


def quorum(nodes: int) -> int:
    """A majority: any two majorities of the same nodes share at least one node."""
    return nodes // 2 + 1


def validity(ttl: float, elapsed: float) -> float:
    """How long a lease granted by a majority certainly lasts, counted from when the requests
    were sent: the ttl, less the time the requests took, less the clock-rate allowance."""
    return ttl - elapsed - drift(ttl)


# The per-node timeout, when not configured, is a small fraction of the ttl within these bounds:
# long enough for a loaded local network, short enough that a hung node costs little of the lease.
NODE_TIMEOUT_MIN = 0.005
NODE_TIMEOUT_MAX = 0.05


def node_timeout(ttl: float) -> float:
    return min(NODE_TIMEOUT_MAX, max(NODE_TIMEOUT_MIN, ttl / 200))


def socket_limit(configured: float | None) -> float:
    """What bounds every socket of a Redlock node, connecting included (the node timeout as
    configured, else the longest one a ttl derives): a hung node must cost a wait about that,
    even when a connection has to be made again."""
    return configured or NODE_TIMEOUT_MAX


def retry_jitter(max_poll: float | None) -> float:
    """A random pause before a Redlock re-try, so that contenders that split the nodes between
    them (nobody got a majority) do not collide again in lockstep."""
    return random.uniform(0.0, 0.05 if max_poll is None else min(max_poll, 0.05))


@dataclass(frozen=True, slots=True)
class Tally:
    """Answers of every node to "does this holder hold it (and did the action apply)?"."""

    yes: int
    no: int
    failed: int  # unreachable, timed out, or an error reply

    def outcome(self, nodes: int, what: str) -> bool:
        """True with a majority of yes; False when enough nodes said no that no majority could
        say yes; otherwise (too many nodes unreachable to know) ``LockConnectionError``."""
        need = quorum(nodes)
        if self.yes >= need:
            return True
        if self.no > nodes - need:
            return False
        raise LockConnectionError(
            f"{what}: {self.yes} of {nodes} nodes confirmed, {self.failed} unreachable "
            f"(a majority is {need})"
        )


def decided(answers: Sequence[bool | BaseException], what: str) -> bool:
    """Does the holder hold it (and did the action apply)? One server's answer (its failure
    raised), or ``Tally.outcome`` of several."""
    if len(answers) == 1:
        [answer] = answers
        if isinstance(answer, BaseException):
            raise answer
        return answer
    return tally(answers).outcome(len(answers), what)


def released(results: Sequence[Released | BaseException], what: str) -> Released:
    """What a release amounted to: one server's own reply (its failure raised); on several,
    ``RELEASED`` when a majority held the grant, ``NOT_HELD`` when enough did not that no
    majority could (``LockConnectionError`` when too few answered to tell)."""
    if len(results) == 1:
        [result] = results
        if isinstance(result, BaseException):
            raise result
        return result
    owned = [r if isinstance(r, BaseException) else r != Released.NOT_HELD for r in results]
    return Released.RELEASED if decided(owned, what) else Released.NOT_HELD


def owned_by_quorum(replies: Sequence[object], held: Sequence[int], what: str) -> bool:
    """``Tally.outcome`` of the nodes' replies to a script that answers one of ``held`` when the
    holder held the lock (the common case, a majority said so, is decided without the tally)."""
    if sum(1 for r in replies if r in held) >= quorum(len(replies)):
        return True
    return tally(owned_answers(replies, held)).outcome(len(replies), what)


def two_rounds(
    first: Sequence[Released | BaseException],
    again: Sequence[Released | BaseException],
    in_lease: bool,
) -> list[Released | BaseException]:
    """Per node, what two rounds of one release amount to (the second sent because the first
    left the outcome undecided). A node that answered the first keeps that answer (a release it
    applied answers "not held" to the second); one that failed it gets the second's answer, but
    for one case: a node the first round reached without an answer coming back (``unanswered``:
    it may have applied it), whose answer to the second is "not held", counts as released
    (``Released.RELEASED``) when the first round went out within the lease (``in_lease``:
    before its local deadline).

    Why that never reports a release for a lock another holder had taken: between the two
    rounds, on such a node, either the first round ran there (our grant deleted; another holder
    may have taken the freed node since, after our release), or it did not, and our grant was
    gone there before the second came (expired, or never granted there: "not held" cannot tell
    these apart). The lease settles it: its local deadline comes before any node can have
    expired our grant (drift allowed for), so when a first round went out before it, our grant
    still stood on the majority that granted or renewed it, and no other holder can have held
    a majority until then. Whoever holds such a node now took it after the release went out,
    when our hold had ended. A release sent after the local deadline gets no such allowance:
    another holder may have taken a majority once our lease ran out, and only the nodes' own
    answers count.
    (A node that loses its data, restarted without persistence, is outside what Redlock
    promises: its "not held" could hide that loss, as its grant to another holder could.)"""
    answers: list[Released | BaseException] = []
    for old, new in zip(first, again, strict=True):
        if not isinstance(old, BaseException):
            answers.append(old)
        elif in_lease and new == Released.NOT_HELD and unanswered(old):
            answers.append(Released.RELEASED)
        else:
            answers.append(new)
    return answers


def tally(answers: Sequence[bool | BaseException]) -> Tally:
    yes = sum(1 for a in answers if a is True)
    no = sum(1 for a in answers if a is False)
    return Tally(yes, no, len(answers) - yes - no)


def first_error(replies: Sequence[object]) -> BaseException | None:
    """The error to show when every node failed, preferring one that is not a connection
    failure (a wrong-type key says more than "connection refused")."""
    errors = [r for r in replies if isinstance(r, BaseException)]
    if len(errors) < len(replies) or not errors:
        return None
    for error in errors:
        if not isinstance(error, LockConnectionError):
            return error
    return errors[0]


# How far ahead of the client's clock a Redlock acquire proposes the grant's fencing token
# (acquire.lua's ARGV[5]): each node grants max(its last token + 1, its clock, the proposal), so
# when every node's clock is behind the proposal as the request runs there, the majority grants
# one token, which every node of it holds already: no write-back (docs/safety.md, "Fencing
# tokens"). The lead is the client's last acquire round (``proposal_lead``): each node ran its
# script within the round, so with clocks that agree, the nodes' clocks were behind the lead; a
# lead much longer would cost the lock's release, which keeps a token its node's clock has not
# passed in the counter (a command more, and the next grant there takes its slower path).
FIRST_LEAD_US = 1000  # before the client's first round
MIN_LEAD_US = 50
MAX_LEAD_US = 50_000  # (NODE_TIMEOUT_MAX: a round of a hung node; half the shortest lease)


def proposal_lead(elapsed: float) -> int:
    """The lead of the next proposal, in microseconds, after an acquire round of ``elapsed``
    seconds (from the send to the last node's answer)."""
    return min(MAX_LEAD_US, max(MIN_LEAD_US, round(elapsed * 1_000_000)))


def proposed_token(now_ns: int, lead_us: int) -> int:
    """The fencing token a Redlock acquire proposes, from the client's wall clock ``now_ns``
    (``time.time_ns()``) and the lead (``proposal_lead``)."""
    return now_ns // 1000 + lead_us


@dataclass(frozen=True, slots=True)
class QuorumAcquire:
    """What one round of acquire requests to every node amounts to."""

    result: Granted | Busy  # Granted: a majority granted in time (fence = their maximum)
    touched: bool  # some node may hold the grant: release everywhere unless granted


def acquire_outcome(
    results: Sequence[Granted | Busy | BaseException], ttl: float, elapsed: float
) -> QuorumAcquire:
    """Decide a Redlock acquire from every node's result (its kind's reading of its reply, or
    the exception it failed with, already translated).

    A grant needs a majority and a positive validity; its fencing token is the largest among the
    granting nodes. When a majority of the nodes granted that very token (the proposal,
    ``proposed_token``), every later majority shares one of them, whose token is past it: the
    grant is confirmed. Otherwise it still has to be written back to a majority before anyone
    may use it (``confirm``). ``LockConnectionError`` when fewer than a majority of nodes
    could be reached (``Busy`` is for a majority that answered without granting). A node whose
    reentrant hold count is not ours (``LockLost``) did not grant, and counts as failed.
    """
    need = quorum(len(results))
    # the common case first, without a pass per node: a majority granted
    fences = [r.fence for r in results if type(r) is Granted]
    if len(fences) >= need and validity(ttl, elapsed) > 0:
        top = max(fences)
        return QuorumAcquire(Granted(top, confirmed=fences.count(top) >= need), touched=True)
    pttls = [r.pttl for r in results if type(r) is Busy]
    lost = [r for r in results if isinstance(r, LockLost)]
    error = first_error([r for r in results if not isinstance(r, LockLost)] + [None] * len(lost))
    if error is not None:
        raise error
    down = [r for r in results if isinstance(r, LockConnectionError)]
    if len(results) - len(down) < need:
        # Without a majority answering, "busy" cannot be told from "down": an outage, which
        # acquire reports rather than waiting out its timeout as if the lock were held.
        raise LockConnectionError(
            f"{len(down)} of {len(results)} nodes unreachable, a majority is {need}: {down[0]}"
        )
    known = [p for p in pttls if p is not None]
    # the lock frees itself on a majority no later than the busy nodes' longest remaining lease
    # (none busy: the nodes that answered granted it, too late; given back, it is free at once)
    pttl = max(known, default=0.0) if len(known) == len(pttls) else None
    failed = len(results) - len(fences) - len(pttls)
    return QuorumAcquire(Busy(pttl), touched=bool(fences) or failed > 0)


def renew_outcome(
    replies: Sequence[object], ttls: Sequence[float], elapsed: float, what: str
) -> list[int | LockError]:
    """Per lease of a renewal batch sent to every node (``replies``: each node's reply to
    renew.lua, or its failure): renewed by a majority in time (``RENEWED``), refused by enough
    nodes that no majority can hold it (``GONE``: whether another holder has a majority is not
    told), or unknown (the ``LockConnectionError`` saying why)."""
    held: list[int | LockError] = []
    for ttl, answers in zip(ttls, renew_answers(replies, len(ttls)), strict=True):
        try:
            ok = tally(answers).outcome(len(replies), what)
        except LockConnectionError as exc:
            held.append(exc)
            continue
        if ok and validity(ttl, elapsed) <= 0:
            held.append(LockConnectionError(f"{what}: the nodes answered too late"))
        else:
            held.append(RENEWED if ok else GONE)
    return held


def owned_answers(replies: Sequence[object], held: Sequence[int]) -> list[bool | BaseException]:
    """Per node: did the script answer one of ``held`` (the holder held it), or not, or fail."""
    answers: list[bool | BaseException] = []
    for reply in replies:
        if isinstance(reply, BaseException):
            answers.append(reply)
        elif isinstance(reply, int):
            answers.append(reply in held)
        else:
            answers.append(LockError(f"unexpected reply {reply!r}"))
    return answers


def renew_answers(replies: Sequence[object], count: int) -> list[list[bool | BaseException]]:
    """Per lock of a renew batch of ``count`` locks, every node's answer (see ``tally``)."""
    per_lock: list[list[bool | BaseException]] = [[] for _ in range(count)]
    for reply in replies:
        if isinstance(reply, BaseException):
            flags: Sequence[bool | BaseException] = [reply] * count
        else:
            try:
                flags = [answer == RENEWED for answer in renew_reply(reply, count)]
            except LockError as exc:
                flags = [exc] * count
        for answers, flag in zip(per_lock, flags, strict=True):
            answers.append(flag)
    return per_lock
