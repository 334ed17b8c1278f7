"""A grant a silent server may still hold, and how it is given back: the rule, as plain values
(no I/O; the tries are ``_async/giveback.py``'s).

A server that stops answering (paused, overloaded, cut off) may still run a request that was
sent to it: a paused server runs what waits in its sockets as soon as it resumes. An acquire
whose request got no reply may so grant its holder the name later than anything the caller sent
meanwhile, with nobody left to release it; and a release that got no reply may not have gone out
at all. Their give-back is left to the client's background worker: a release by the holder
token (the kind's own, which deletes only what that token holds), tried until the server (each
Redlock node, on its own) has answered three times in a row.

Why three: a server that resumes reads, in its first round of events, every connection that was
readable then; a connection still in its listen backlog is accepted in that round and read in
the next. So a first answer may come from a round that precedes the late request, but a request
sent after that answer is read after it (Redis 7 and Valkey 9 paused with SIGSTOP: a first read
after resuming may miss a request from the backlog, the second one nearly never does:
``tests/engine/test_late_grant_order.py``). Nearly: once, on a loaded machine, Valkey 9 ran a
late request after a second answer, so a third answer is asked for too (one round trip more,
in the background).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .backoff import backoff_delay
from .kinds import LeaseSpec

ANSWERS: Final = 3  # answers in a row that end a give-back
# The wait between tries while the server stays silent: full jitter, its cap doubling from
# BACKOFF to MAX_BACKOFF (a try that gets no answer has taken its own timeout already; a server
# that refuses connections answers at once).
BACKOFF: Final = 0.05
MAX_BACKOFF: Final = 1.0


@dataclass(eq=False, slots=True)
class LateGiveBack:
    """The give-back of what ``holder`` may still be granted on one server (``node``: a Redlock
    node's index; 0 elsewhere, the server of the name's keys)."""

    spec: LeaseSpec
    holder: str
    node: int
    due: float  # monotonic time of the next try
    answers: int = 0  # answers in a row so far
    silences: int = 0  # tries in a row without an answer

    def answered(self, now: float) -> bool:
        """A try got an answer (any reply, an error reply too: the server read it). Whether the
        give-back is done; else the next try goes at once (sent after this answer)."""
        self.answers += 1
        self.silences = 0
        self.due = now
        return self.answers >= ANSWERS

    def unanswered(self, now: float, draw: float) -> None:
        """A try got no answer (``draw``, in [0, 1): the jitter of the wait before the next)."""
        self.answers = 0
        self.silences += 1
        self.due = now + backoff_delay(self.silences, BACKOFF, MAX_BACKOFF, draw)
