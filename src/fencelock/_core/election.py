"""Leader election's plain decisions: who leads, as the server shows it, and when an observer
looks again (``_async/election.py`` does the I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .inspection import LockInfo

# An observer looks again this long after the leader's lease would end: its expiry publishes
# nothing, and the server's clock may be a little behind ours.
EXPIRY_SLACK: Final = 0.05
# ... and never sooner than this after the last look (a lease read as about to end).
MIN_LOOK: Final = 0.01


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads an election now, as the server shows it."""

    label: str | None  # the label the leader published with its grant (None: none)
    term: int | None  # its term: the fencing token of its grant (None: the counter is gone)
    ttl: float | None  # seconds left of its lease when read (None: the key has no expiry)
    holder: str  # an opaque id of the leader's grant (as ``inspect`` shows it)


def leader_of(info: LockInfo | None) -> Leader | None:
    """The leader an inspection of the election's lock shows (None: nobody leads)."""
    if info is None:
        return None
    return Leader(info.label, info.token, info.ttl, info.holder)


def same_term(a: Leader | None, b: Leader | None) -> bool:
    """Whether two looks show one leadership: the same grant (a renewal changes the ttl only)."""
    if a is None or b is None:
        return a is b
    return (a.holder, a.term) == (b.holder, b.term)


def next_look(leader: Leader | None, ttl: float) -> float:
    """How long an observer waits for a message before it looks again: until just after the
    leader's lease would end unrenewed (an expiry publishes nothing), and at most the
    election's ``ttl`` (a message lost with a broken connection is made up for within that)."""
    if leader is None or leader.ttl is None:
        return ttl
    return max(MIN_LOOK, min(ttl, leader.ttl + EXPIRY_SLACK))
