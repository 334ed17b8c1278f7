"""Countdown latches and double barriers, as plain values (no I/O): their keys, their kind (a
participant is a lease, kept in a sorted set scored by its end), their scripts and what their
replies mean. ``_async/latch.py`` does the I/O.

Unlike Redisson's RCountDownLatch (a bare counter decremented by DECR):

* a participant counts down once per generation, by its id, so a retried ``count_down`` (a
  reply lost, a request sent again) never counts twice;
* a participant may join with a lease that the watchdog renews: one that dies without counting
  down is then visible (``missing``) instead of silently never counting;
* waiters are woken by pub/sub and look again at least once per ttl, so a lost message costs a
  delay, never a wait for ever;
* ``reset`` starts a new generation: the latch can be used again, and a waiter of the old one
  hears that it will never open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from .._keys import DEFAULT_PREFIX, LockKeys, escape
from .._scripts import load
from ..errors import LockError
from .inspection import HolderInfo, LockInfo
from .kinds import LeaseSpec, ScoredLease
from .replies import split_holder

LATCH: Final = "latch"  # the metric label, and the family of its keys
BARRIER: Final = "barrier"

LATCH_JOIN: Final = load("latch_join", "prelude", "latch")
LATCH_LEAVE: Final = load("latch_leave", "prelude", "latch")
LATCH_COUNT_DOWN: Final = load("latch_count_down", "prelude", "latch")
LATCH_STATE: Final = load("latch_state")
LATCH_RESET: Final = load("latch_reset", "prelude", "latch")


class LatchReset(LockError):
    """The latch was reset while this call waited for it: the generation it waited for will
    never open."""


@dataclass(frozen=True, slots=True)
class LatchKeys(LockKeys):
    """The keys of one latch or barrier (_scripts/latch.lua): ``lock`` its participants' leases,
    ``state`` its count and generations, ``counted`` who counted down in this generation."""

    state: str
    counted: str

    @classmethod
    def for_latch(cls, name: str, prefix: str = DEFAULT_PREFIX) -> LatchKeys:
        base = f"{prefix}{{{escape(name)}}}:{LATCH}"  # (beside a lock of the same name, apart)
        return cls(
            lock=f"{base}:lock",
            fence=f"{base}:fence",
            channel=f"{base}:released",
            queue=f"{base}:waiters",  # (unused: nobody queues for a latch)
            state=f"{base}:state",
            counted=f"{base}:counted",
        )

    def scripted(self) -> tuple[str, str, str]:
        """KEYS of the latch's own scripts (count_down, leave, state, reset)."""
        return (self.lock, self.state, self.counted)


@dataclass(frozen=True, slots=True)
class Participant(ScoredLease):
    """A participant of a latch (``parties`` 0) or a barrier: a lease, never busy."""

    primitive: str = LATCH
    acquire_script: Any = LATCH_JOIN
    release_script: Any = LATCH_LEAVE
    why_scripts: str = "its count and its participants are kept by scripts"
    count: int = 1  # what a new latch counts down from
    parties: int = 0  # a barrier opens once this many participants hold live leases
    keep_ms: int = 86_400_000  # how long the latch's keys outlive their last write

    def keys(self, name: str, prefix: str) -> LatchKeys:
        return LatchKeys.for_latch(name, prefix)

    def acquire_keys(self, keys: LockKeys) -> tuple[str, ...]:
        assert isinstance(keys, LatchKeys)
        return (keys.lock, keys.fence, keys.state, keys.counted)

    def release_keys(self, keys: LockKeys) -> tuple[str, ...]:
        assert isinstance(keys, LatchKeys)
        return keys.scripted()

    def acquire_args(
        self, spec: LeaseSpec, holder: str, depth: int, block: int, entry: str, publish: str
    ) -> tuple[str | int, ...]:
        channel = spec.keys.channel
        return (holder, spec.ttl_ms, block, entry, self.count, self.parties, channel, publish,
                self.keep_ms)  # fmt: skip

    def release_args(
        self, spec: LeaseSpec, holder: str, leaving: str, publish: str, depth: int
    ) -> tuple[str | int, ...]:
        return (holder, spec.keys.channel, publish, self.keep_ms)

    def line_tag(self) -> str:
        return LATCH


@dataclass(frozen=True, slots=True)
class LatchState:
    """A latch (or barrier) as the server shows it (latch_state.lua)."""

    gen: int  # 0: the latch does not exist (yet, or any more: its keys expired)
    count: int  # what this generation counts down from
    opened: int  # the last generation that opened (0: none)
    parties: int  # a barrier's (0: a latch)
    now_ms: int  # the server's clock
    participants: tuple[tuple[str, int], ...]  # (holder token, lease end ms), by lease end
    counted: frozenset[str]  # the ids of the participants counted down in this generation

    def left(self, default: int) -> int:
        """What is left to count down (``default``: a latch that does not exist yet)."""
        return default if self.gen == 0 else max(0, self.count - len(self.counted))

    def live(self) -> int:
        """Participants whose lease has not ended."""
        return sum(1 for _, end in self.participants if end > self.now_ms)

    def missing(self) -> tuple[str, ...]:
        """The ids of participants that joined, did not count down, and whose lease ended: they
        stopped renewing it without leaving, and so have most likely died."""
        ids = (split_holder_id(h) for h, end in self.participants if end <= self.now_ms)
        return tuple(i for i in ids if i not in self.counted)

    def next_look(self, ttl: float) -> float:
        """How long a waiter waits for a message before it looks again: until the first live
        participant's lease would end (an expiry publishes nothing), and at most ``ttl``."""
        ends = [(end - self.now_ms) / 1000 for _, end in self.participants if end > self.now_ms]
        return max(0.001, min([ttl, *ends]))

    def info(self, name: str) -> LockInfo | None:
        """What ``inspect`` and ``fencelock ls`` show of it (None: no latch): what is left to
        count down of the count (a barrier: the parties in of its parties), every participant
        that joined with the lease it has left (0: ended), and the missing. No fencing token:
        a latch counts its participants by id."""
        if self.gen == 0:
            return None
        holders = tuple(
            HolderInfo(*split_holder(holder), 1, max(0.0, (end - self.now_ms) / 1000))
            for holder, end in self.participants
        )
        last = holders[-1] if holders else None  # (by lease end)
        return LockInfo(
            name=name,
            holder="" if last is None else last.holder,
            label=None if last is None else last.label,
            ttl=None if last is None else last.ttl,
            token=None,
            kind=BARRIER if self.parties else LATCH,
            count=self.live() if self.parties else self.left(self.count),
            waiters=(),
            queued=0,
            holders=holders,
            limit=self.parties or self.count,
            missing=self.missing(),
        )


def split_holder_id(holder: str) -> str:
    """A participant's id: the label its holder token carries."""
    return split_holder(holder)[1] or ""


def latch_state(reply: object) -> LatchState:
    if not isinstance(reply, list) or len(reply) != 7 or not isinstance(reply[5], list):
        raise LockError(f"unexpected latch state reply {reply!r}")
    gen, count, opened, parties, now, found, counted = reply
    return LatchState(
        int(gen),
        int(count),
        int(opened),
        int(parties),
        int(now),
        tuple(_pairs(found)),
        frozenset(_text(c) for c in counted),
    )


def _pairs(found: Sequence[Any]) -> list[tuple[str, int]]:
    """(member, score) pairs of a ZRANGE WITHSCORES reply (RESP2 flat, or RESP3 pairs)."""
    if found and isinstance(found[0], list):
        return [(_text(m), int(float(s))) for m, s in found]
    return [(_text(found[i]), int(float(found[i + 1]))) for i in range(0, len(found), 2)]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def count_down_reply(reply: object) -> tuple[int, bool, int]:
    """(left, counted by this call, generation) from latch_count_down.lua."""
    if not isinstance(reply, list) or len(reply) != 3:
        raise LockError(f"unexpected count_down reply {reply!r}")
    left, added, gen = (int(v) for v in reply)
    return left, bool(added), gen
