"""What an operator sees of a lock (``client.inspect``, ``client.locks``, the CLI), and what an
administrator's release did: the replies of _scripts/inspect.lua and force_release.lua read as
plain values, and the Redlock majority's view of them."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._keys import escape
from ..errors import LockConnectionError, LockError
from .quorum import quorum
from .replies import split_holder

# waiters listed per name (the queue's length is reported whole): an operator's screen, and a
# bound on the script's reply
MAX_WAITERS_LISTED = 100


@dataclass(frozen=True, slots=True)
class WaiterInfo:
    """A waiter queued in Redis (wake="one"), first to be served first."""

    id: str  # the waiter's id (its wake-up channel is the lock's channel + ':' + id)
    age: float  # seconds since it queued, on the server's clock
    label: str | None  # its holder label, when its entry carries its holder token


@dataclass(frozen=True, slots=True)
class HolderInfo:
    """One holder of a semaphore's permits or of a read-write lock."""

    holder: str  # an opaque id of its holder token, as ``LockInfo.holder``
    label: str | None
    permits: int  # (a writer of a read-write lock holds every permit: 2**31)
    ttl: float  # seconds left of its lease


@dataclass(frozen=True, slots=True)
class LockInfo:
    """One held lock (or semaphore, read-write lock, latch or barrier), as the server shows
    it."""

    name: str
    holder: str  # an opaque id of the grant's holder token (not the token itself); "": none
    label: str | None  # the holder's label, if it set one
    # seconds left of the lease (None: the key has no expiry; a latch or barrier: no
    # participant has joined)
    ttl: float | None
    # The grant's fencing token, or the last of a block reserved with it for local hand-offs of
    # one process (those holders' own tokens are at most this): a simple lock's key holds it,
    # the other kinds' counter (None when that is gone). None for a latch or barrier, which
    # hand out no fencing token.
    token: int | None
    # "simple" or "reentrant"; "semaphore"; "read_lock" or "write_lock" (a read-write lock held
    # by readers or by its writer); "latch" or "barrier"
    kind: str
    # hold count (1 for a simple lock); permits held (semaphore); holders (read_lock); what is
    # left to count down (latch); participants with a live lease (barrier)
    count: int
    waiters: tuple[WaiterInfo, ...]  # the first MAX_WAITERS_LISTED queued waiters, in order
    queued: int  # how many waiters are queued in all
    # semaphores, read-write locks, latches and barriers: every holder (a latch's: every
    # participant that joined, ttl 0 once its lease ended; holder, label and ttl above are
    # those of the one whose lease ends last), and a semaphore's stored limit, the count a
    # latch counts down from, a barrier's parties
    holders: tuple[HolderInfo, ...] = ()
    limit: int | None = None
    # a latch or barrier: the ids of the participants whose lease ended before they counted
    # down (most likely dead)
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeView:
    """One server's inspect.lua reply: ``holder`` is the raw holder token ('' if not held)."""

    kind: str
    holder: str
    count: int
    pttl: int
    counter: int | None
    queued: int
    waiters: tuple[WaiterInfo, ...]

    def info(self, name: str) -> LockInfo | None:
        if not self.holder:
            return None
        holder, label = split_holder(self.holder)
        return LockInfo(
            name=name,
            holder=holder,
            label=label,
            ttl=self.pttl / 1000 if self.pttl >= 0 else None,
            token=self.counter,
            kind="reentrant" if self.kind == "hash" else "simple",
            count=self.count,
            waiters=self.waiters,
            queued=self.queued,
        )


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def inspect_reply(reply: object) -> NodeView:
    if not isinstance(reply, list) or len(reply) < 7 or len(reply) % 2 == 0:
        raise LockError(f"unexpected inspect reply {reply!r}")
    kind, holder, count, pttl, counter, now, queued = (_text(v) for v in reply[:7])
    entries = reply[7:]
    waiters = []
    for entry, score in zip(entries[::2], entries[1::2], strict=True):
        # 'id', 'id ttl block token' (acquire.lua) or '>channel:id' (a multi-lock's waiter,
        # multi_acquire.lua); ages in the server's microseconds
        text = _text(entry)
        parts = text.split(" ")
        label = split_holder(parts[3])[1] if len(parts) == 4 else None
        waiter = text.rpartition(":")[2] if text.startswith(">") else parts[0]
        age = max(0.0, (int(now) - float(_text(score))) / 1e6)
        waiters.append(WaiterInfo(waiter, age, label))
    return NodeView(
        kind,
        holder,
        int(count),
        int(pttl),
        int(counter) if counter else None,
        int(queued),
        tuple(waiters),
    )


@dataclass(frozen=True, slots=True)
class SemaphoreState:
    """What the server shows of a semaphore (or a read-write lock) now (semaphore_state.lua)."""

    limit: int  # the stored limit (0: none stored yet: no acquire has run)
    holders: tuple[HolderInfo, ...]  # by lease end, the last last
    counter: int | None  # the last fencing token handed out (None: the counter is gone)
    queued: int

    @property
    def used(self) -> int:
        """Permits held."""
        return sum(h.permits for h in self.holders)


def semaphore_state(reply: object) -> SemaphoreState:
    if not isinstance(reply, list) or len(reply) != 5 or len(reply[1]) % 3:
        raise LockError(f"unexpected semaphore state reply {reply!r}")
    limit, found, now, counter, queued = reply
    holders = []
    for i in range(0, len(found), 3):
        holder, label = split_holder(found[i])
        ttl = max(0.0, (int(found[i + 2]) - int(now)) / 1000)
        holders.append(HolderInfo(holder, label, int(found[i + 1]), ttl))
    counter = _text(counter)
    return SemaphoreState(
        int(limit), tuple(holders), int(counter) if counter else None, int(queued)
    )


def permits_info(
    name: str, kind: str, state: SemaphoreState, write_permits: int
) -> LockInfo | None:
    """A semaphore (``kind`` "sem") or read-write lock ("rw") as ``locks()`` lists it; None
    when nobody holds it. ``write_permits``: a writer's share of a read-write lock."""
    if not state.holders:
        return None
    last = state.holders[-1]
    if kind == "sem":
        shown, count, limit = "semaphore", state.used, state.limit
    else:
        writing = any(h.permits >= write_permits for h in state.holders)
        shown, count, limit = "write_lock" if writing else "read_lock", len(state.holders), None
    return LockInfo(
        name=name,
        holder=last.holder,
        label=last.label,
        ttl=last.ttl,
        token=state.counter,
        kind=shown,
        count=count,
        waiters=(),
        queued=state.queued,
        holders=state.holders,
        limit=limit,
    )


def majority_view(replies: Sequence[NodeView | BaseException]) -> NodeView | None:
    """Redlock: the lock as a majority of nodes hold it, or None when no holder has a majority.
    Its ttl is how long a majority still holds it (the majority-th longest), its token the
    largest counter among them (a grant's token is the largest of its nodes'), its waiters those
    of any of them (by id, the longest age). ``LockConnectionError`` when too few nodes answered
    to tell."""
    need = quorum(len(replies))
    views = [r for r in replies if isinstance(r, NodeView)]
    if len(views) < need:
        failed = next(r for r in replies if isinstance(r, BaseException))
        raise LockConnectionError(
            f"only {len(views)} of {len(replies)} nodes answered: {failed}"
        ) from failed
    holders = [v.holder for v in views if v.holder]
    top = max(set(holders), key=holders.count, default="")
    agreeing = [v for v in views if top and v.holder == top]
    if len(agreeing) < need:
        return None
    ttls = sorted((v.pttl if v.pttl >= 0 else 2**63 for v in agreeing), reverse=True)
    pttl = ttls[need - 1]
    counters = [v.counter for v in agreeing if v.counter is not None]
    waiters: dict[str, WaiterInfo] = {}
    for view in views:
        for w in view.waiters:
            if w.id not in waiters or waiters[w.id].age < w.age:
                waiters[w.id] = w
    ordered = sorted(waiters.values(), key=lambda w: -w.age)[:MAX_WAITERS_LISTED]
    return NodeView(
        agreeing[0].kind,
        top,
        min(v.count for v in agreeing),
        -1 if pttl == 2**63 else pttl,
        max(counters, default=None),
        max(v.queued for v in views),
        tuple(ordered),
    )


class ForceOutcome(enum.StrEnum):
    RELEASED = "released"  # deleted, and the waiters served as by a release
    NOT_HELD = "not_held"  # nothing to release
    TOKEN_MISMATCH = "token_mismatch"  # another grant holds it now: nothing was touched


@dataclass(frozen=True, slots=True)
class ForceReleased:
    """What ``force_release`` did, and the grant it found."""

    name: str
    outcome: ForceOutcome
    holder: str | None  # the opaque holder id of the grant found (None: none)
    label: str | None
    token: int | None  # the grant's token found (as LockInfo.token)


def force_reply(name: str, reply: object) -> ForceReleased:
    if not isinstance(reply, list) or len(reply) != 3:
        raise LockError(f"unexpected force_release reply {reply!r}")
    status, holder, counter = (_text(v) for v in reply)
    outcome = {"1": ForceOutcome.RELEASED, "0": ForceOutcome.NOT_HELD}.get(
        status, ForceOutcome.TOKEN_MISMATCH
    )
    holder_id, label = split_holder(holder) if holder else (None, None)
    return ForceReleased(name, outcome, holder_id, label, int(counter) if counter else None)


def unescape(escaped: str) -> str:
    """The lock name of an escaped key part: the inverse of ``_keys.escape`` (which only ever
    writes these three sequences, and every '%' as %25)."""
    return re.sub("%(25|7B|7D)", lambda m: {"25": "%", "7B": "{", "7D": "}"}[m.group(1)], escaped)


_GLOB = re.compile(r"([*?\[\]\\])")


def scan_pattern(prefix: str, pattern: str) -> str:
    """SCAN MATCH for the keys of the names ``pattern`` matches (a Redis glob over names): the
    prefix taken literally, the pattern escaped as names are (braces and '%' in a name). It
    matches every key of those names ('{name}:lock', '{name}:sem:lock', '{name}:latch:state'...):
    ``name_of`` picks the ones a name is found by."""
    literal = _GLOB.sub(r"\\\1", prefix)
    return f"{literal}{{{escape(pattern)}}}:*"


def name_of(key: str | bytes, prefix: str, families: Mapping[str, str]) -> tuple[str, str] | None:
    """The name of a key found by SCAN, and its family: "lock", or one of ``families`` (a
    primitive whose keys are ``{name}:<family>:...``: "sem", "rw", "latch"...), each mapped to
    the key it is found by ("lock": the one a holder makes; a latch's "state", which exists
    before anyone joins). None: not the key a name of this prefix is found by."""
    text = _text(key)
    start = prefix + "{"
    if not text.startswith(start):
        return None
    suffixes = {"lock": "}:lock"} | {f: f"}}:{f}:{key}" for f, key in families.items()}
    for family, suffix in suffixes.items():
        if text.endswith(suffix):
            inner = text[len(start) : -len(suffix)]
            if "{" in inner or "}" in inner:
                return None
            return unescape(inner), family
    return None
