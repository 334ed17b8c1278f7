"""Leader election: a candidate holds a lease engine over a ``Mutex`` on the election's name;
the holder is the leader, and the fencing token is the leader's term (docs/election.md).

What it fixes or adds to a lock:

* leadership is always an auto-renewed lease: the client's watchdog renews it, and when it
  cannot, the leader hears of it by the engine's signals (``on_lost``, ``lost``, ``check()``;
  under asyncio the default policy "cancel" cancels the leader's ``async with`` block);
* every candidate campaigns alone in Redis, never by a local hand-off: a hand-off keeps the
  holder token in Redis and may take its token from a reserved block, so ``leader()`` would
  show neither the new leader nor its term;
* a new leader announces its term on the name's wake-up channel (best effort), so that
  ``observe()`` sees it at once. A resignation with no candidate queued publishes there too
  (its kind's release does, ``CANDIDATE``); one that serves a queued candidate wakes (or
  grants) that candidate alone, on its own channel, and observers learn of the change from
  the new leader's announcement (``ELECTED``). An
  expiry publishes nothing, so an observer also looks again when the leader's lease would end,
  and at least once per ttl: every change is seen within about one ttl, lost messages or not.

Failure timeline: a leader frozen (SIGSTOP, a GC pause) past its lease is deposed when the
lease ends; the next leader's term is larger, so the old leader's fenced writes are refused;
when it runs again its local deadline has passed, so ``check()`` raises and ``on_lost`` runs
before it can act on a stale belief (the watchdog's renewal is refused too).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final, Never

from .._backend import ASYNC_CAN_CANCEL, async_shield
from .._core.election import Leader, leader_of, next_look, same_term
from .._core.inspection import MAX_WAITERS_LISTED
from .._core.kinds import Mutex
from .._core.lease import Words
from .._core.options import DEFAULT, LeaseOptions
from .._keys import LockKeys
from ..errors import LockError, LockTimeout
from . import admin
from .engine import AsyncLease, AsyncWiring
from .leased import AsyncLeaseFacade, keyword_only

logger = logging.getLogger("fencelock.election")

# The announcement of a new term on the lock's channel (a waiter woken by it just re-tries; it
# must not start with "g", a grant by a release, waiter.py)
ELECTED: Final = "elected"
# A leader must stop acting at once: under asyncio its block is cancelled (threads cannot be)
DEFAULT_POLICY: Final = "cancel" if ASYNC_CAN_CANCEL else "raise"
# what its messages say: a candidate campaigns, leads (is elected) and resigns
WORDS: Final = Words("candidate", "leading", "campaign", "resign", "elected")
# a lock whose release publishes on its channel when no candidate is queued: observers listen
# there unqueued (a queued candidate is woken alone, and announces its own election)
CANDIDATE: Final = Mutex(announces=True)


class _Unseen:
    pass


async def _resign_quietly(lease: AsyncLease) -> None:
    with contextlib.suppress(LockError):
        await lease.release()


class AsyncElection(AsyncLeaseFacade):
    """``LockClient.election(name)``: ``campaign()`` to lead, ``resign()``, ``leader()``,
    ``observe()``; ``async with`` campaigns on entry and resigns on exit. It also has
    ``acquire()`` (a campaign that returns whether it won), ``lost``, ``check()``, ``held()``
    and ``token`` (the term)."""

    __slots__ = ()

    def __init__(self, wiring: AsyncWiring, options: LeaseOptions) -> None:
        spec = wiring.spec(CANDIDATE, options, WORDS)
        self._lease = AsyncLease(self, wiring, options, spec, alone=True)

    async def acquire(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Campaign: wait to lead up to ``timeout`` (None: as long as it takes, 0: one try;
        default: the election's). Returns whether elected; a win is announced to observers."""
        keyword_only("acquire", args, "timeout=")
        lease = self._lease
        if not await lease.acquire(timeout=timeout):
            return False
        try:
            await async_shield(self._announce())
        except BaseException as error:
            # cancelled or interrupted just as it won: it did not win, as far as the caller knows
            await lease.clean_up(_resign_quietly(lease), error)
            raise
        return True

    async def campaign(self, *args: Never, timeout: float | object | None = DEFAULT) -> int:
        """Wait to lead and return the term (the grant's fencing token: guard the leader's
        writes with it, ``fenced_set``). ``timeout``: as ``acquire``; ``LockTimeout`` after
        it."""
        keyword_only("campaign", args, "timeout=")
        if not await self.acquire(timeout=timeout):
            waited = self._lease.options.wait(timeout)
            raise LockTimeout(f"candidate {self.name!r} not elected within {waited} s")
        return self.token

    async def resign(self) -> None:
        """Stop leading; the next candidate is served at once. ``LockNotOwned`` if not leading,
        ``LockLost`` (a subclass) if the leadership was lost already."""
        await self._lease.release()

    @property
    def term(self) -> int:
        """The current (or, once lost, the last) term of this candidate: ``token``."""
        return self.token

    @property
    def leading(self) -> bool:
        """Whether this candidate leads, by what this process knows (no request): elected,
        not resigned, and the lease neither lost nor past its local deadline."""
        lease = self._lease
        grant = lease.grant()
        return grant is not None and not lease.is_lost(grant)

    async def leader(self) -> Leader | None:
        """Who leads now as the server shows it (Redlock: a majority): label, term, ttl left;
        None when nobody does. One request, within one request timeout."""
        lease = self._lease
        keys = lease.spec.keys
        assert isinstance(keys, LockKeys)
        view = await lease.view(admin.inspected(keys), MAX_WAITERS_LISTED)
        return leader_of(None if view is None else view.info(self.name))

    async def observe(self) -> AsyncIterator[Leader | None]:
        """The leadership now, then each change of it (a new term, or nobody leading), as it
        happens: at once for a resignation or an election, within the leader's remaining lease
        for an expiry, and within a ttl if a message is lost. Changes between two looks are
        seen as one (the terms yielded increase). Runs until closed: use ``aclosing``/``break``.
        """
        lease = self._lease
        last: Leader | _Unseen | None = _Unseen()
        # a first look before subscribing: a redis.asyncio RedisCluster learns its slots (which
        # say which node to subscribe on) from its first command
        await self.leader()
        # subscribed (and confirmed) before the looks that count: any change after it wakes us
        async with lease.watch(lease.spec.keys.channel) as watch:
            while True:
                watch.event.clear()
                now = await self.leader()
                if isinstance(last, _Unseen) or not same_term(now, last):
                    last = now
                    yield now
                await watch.event.wait(next_look(now, self.ttl))

    async def _announce(self) -> None:
        """Publish the new term on the lock's channel (best effort: observers look again within
        a ttl anyway), within one request timeout."""
        try:
            await self._lease.publish(self._lease.spec.keys.channel, ELECTED)
        except (LockError, OSError) as exc:
            logger.debug("fencelock: could not announce the election of %r: %s", self.name, exc)
