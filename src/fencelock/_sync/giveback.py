# GENERATED from src/fencelock/_async/giveback.py by tools/gen_sync.py: edit that file instead.
"""Grants a silent server may still hold, given back by the client's watchdog worker (the rule:
``_core/giveback.py``).

An acquire whose request got no reply is handed here with its holder token once its call has
ended (``contention.py``), and so is a grant whose release got none (``handoff.py``): the token
is never used again, so a release by it can only delete what that token was granted. The worker
tries, between its renewals, every give-back due: the kind's release, on each server the name
lives on (``AsyncGrants.release_at``), until that server answered three times in a row,
backing off while it stays silent. They live as long as the client: ``close()`` gives them one
request timeout more, then forgets them, and a grant the server makes after that lasts its ttl.
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import TYPE_CHECKING

from redis.exceptions import TimeoutError

from .. import _events as events
from .._backend import SyncStateLock
from .._core.giveback import LateGiveBack
from .._core.kinds import LeaseSpec, Released
from .._core.stats import Counters
from ..errors import LockConnectionError, LockError

if TYPE_CHECKING:
    from .watchdog import SyncRenewalGrants

logger = logging.getLogger("fencelock.release")


class LateGiveBacks:
    """The give-backs left of one client, by holder token and server."""

    def __init__(self, grants: SyncRenewalGrants, counters: Counters) -> None:
        self._grants = grants
        self._counters = counters
        self._guard = SyncStateLock()
        self._pending: dict[tuple[str, int], LateGiveBack] = {}
        self._end = math.inf  # monotonic time after which none is tried (close())

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, spec: LeaseSpec, holder: str) -> bool:
        """Give back what ``holder`` may still hold, on every server of the name, from now on;
        False once the client has closed (it is not given back)."""
        now = time.monotonic()
        if now >= self._end:
            return False
        with self._guard:
            before = len(self._pending)
            for node in range(self._grants.node_count):
                self._pending.setdefault((holder, node), LateGiveBack(spec, holder, node, now))
            self._counters.add(giving_back=len(self._pending) - before)
        return True

    def next_due(self) -> float:
        """When the next try is due, or those left are forgotten (inf: none is left)."""
        with self._guard:
            if not self._pending:
                return math.inf
            return min(self._end, *(late.due for late in self._pending.values()))

    def end_by(self, end: float) -> None:
        """The client closes: the tries stop at ``end``, and what is left then is forgotten."""
        self._end = end

    def try_due(self, until: float) -> None:
        """One try of every give-back due, each within one request timeout and ended by
        ``until`` (the next renewal: a try must not hold it up)."""
        now = time.monotonic()
        with self._guard:
            if now >= self._end:  # forgotten: what the server grants after this lasts its ttl
                self._counters.add(giving_back=-len(self._pending))
                self._pending.clear()
                return
            due = [late for late in self._pending.values() if late.due <= now]
        grants = self._grants
        for late in due:
            timeout = min(grants.request_timeout, min(until, self._end) - time.monotonic())
            if timeout <= 0:
                return  # (the rest at the next round)
            try:
                released = grants.release_at(late.spec, late.holder, late.node, timeout)
            except LockConnectionError as exc:
                if self._end < math.inf and not isinstance(exc.__cause__, TimeoutError):
                    # closing, and the server is not silent but gone (refused): what waited in
                    # its sockets went with it, no use waiting for it
                    self._forget(late)
                else:
                    late.unanswered(time.monotonic(), random.random())
                continue
            except LockError:  # an error reply: the server read the try, which is what counts
                released = None
            if released is not None and released.freed:
                self._reached(late)
            if released is Released.STILL_HELD:
                continue  # a reentrant grant's holds come off one a try: at once, again
            if late.answered(time.monotonic()):
                self._forget(late)

    def _forget(self, late: LateGiveBack) -> None:
        with self._guard:
            if self._pending.pop((late.holder, late.node), None) is not None:
                self._counters.add(giving_back=-1)

    def _reached(self, late: LateGiveBack) -> None:
        """A try released a grant: made after its request went unanswered, or whose release
        got no answer."""
        spec = late.spec
        self._counters.add(given_back=1)
        if events.on:
            events.emit(events.GivenBack(spec.primitive, spec.name))
        logger.debug("%r: a grant given back once the server answered again", spec.name)
