# GENERATED from src/fencelock/_async/election.py by tools/gen_sync.py: edit that file instead.
"""Leader election: a lock on the election's name whose holder is the leader, and whose fencing
token is the leader's term (docs/election.md).

It is the lock (lock.py) with three things fixed or added:

* leadership is always an auto-renewed lease: the client's watchdog renews it, and when it
  cannot, the leader hears of it by the lock's signals (``on_lost``, ``lost``, ``check()``; under
  asyncio the default policy "cancel" cancels the leader's ``async with`` block);
* every election object campaigns alone in Redis, never by a local hand-off: a hand-off keeps
  the holder token in Redis and may take its token from a reserved block, so ``leader()`` would
  show neither the new leader nor its term;
* a new leader announces its term on the lock's wake-up channel (best effort), so that
  ``observe()`` sees it at once. A resignation publishes there already (a release does); an
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
from collections.abc import Iterator, Callable
from typing import Final, cast

from redis.exceptions import RedisError

from .._backend import SYNC_CAN_CANCEL, sync_shield
from .._core.election import Leader, leader_of, next_look, same_term
from .._core.lease import LockSpec
from .._core.replies import new_waiter_id
from ..errors import LockError, LockTimeout
from ..labels import Label
from . import admin
from .lock import _DEFAULT, Lock, Parts, _Default
from .redlock import SyncQuorum
from .topology import SyncOneServer

logger = logging.getLogger("fencelock.election")

# The announcement of a new term on the lock's channel (a waiter woken by it just re-tries; it
# must not start with "g", a grant by a release, waiter.py)
ELECTED: Final = "elected"
# A leader must stop acting at once: under asyncio its block is cancelled (threads cannot be)
DEFAULT_POLICY: Final = "cancel" if SYNC_CAN_CANCEL else "raise"


class _Unseen:
    pass


class Election(Lock):
    """``LockClient.election(name)``: ``campaign()`` to lead, ``resign()``, ``leader()``,
    ``observe()``; ``async with`` campaigns on entry and resigns on exit. Being a lock, it also
    has ``lost``, ``check()``, ``held()`` and ``token`` (the term)."""

    def __init__(
        self,
        client: object,
        parts: Parts,
        name: str,
        ttl: float,
        *,
        timeout: float | None,
        on_lost: Callable[[Election], object] | None = None,
        on_lost_policy: str | None = None,
        label: Label | _Default = _DEFAULT,
    ) -> None:
        super().__init__(
            client,
            parts,
            name,
            ttl,
            timeout=timeout,
            auto_renew=True,
            # (called with the lock object: this election)
            on_lost=cast(Callable[[Lock], object] | None, on_lost),
            on_lost_policy=DEFAULT_POLICY if on_lost_policy is None else on_lost_policy,
            label=label,
        )
        self._spec = LockSpec(self.name, self._spec.keys, self.ttl, False, owner=new_waiter_id())

    def acquire(self, timeout: float | _Default | None = _DEFAULT) -> bool:
        """Campaign: as ``Lock.acquire``; a win is announced to observers."""
        if not super().acquire(timeout):
            return False
        try:
            sync_shield(self._announce())
        except BaseException:
            # cancelled or interrupted just as it won: it did not win, as far as the caller knows
            with contextlib.suppress(LockError):
                sync_shield(self.release())
            raise
        return True

    def campaign(self, timeout: float | _Default | None = _DEFAULT) -> int:
        """Wait to lead and return the term (the grant's fencing token: guard the leader's
        writes with it, ``fenced_set``). ``timeout``: None waits as long as it takes, 0 tries
        once, > 0 waits that long (default: the election's); ``LockTimeout`` after it."""
        if not self.acquire(timeout):
            raise LockTimeout(f"not elected leader of {self.name!r} in time")
        return self.token

    _noun = "candidate"

    def resign(self) -> None:
        """Stop leading; the next candidate is served at once. ``LockNotOwned`` if not leading,
        ``LockLost`` (a subclass) if the leadership was lost already."""
        self.release()

    @property
    def term(self) -> int:
        """The current (or, once lost, the last) term of this candidate: ``token``."""
        return self.token

    @property
    def leading(self) -> bool:
        """Whether this candidate leads, by what this process knows (no request): elected,
        not resigned, and the lease neither lost nor past its local deadline."""
        grant = self._grant()
        return grant is not None and not self._is_lost(grant)

    def leader(self) -> Leader | None:
        """Who leads now as the server shows it (Redlock: a majority): label, term, ttl left;
        None when nobody does. One request, within one request timeout."""
        topology = self._parts.topology
        return leader_of(admin.inspect(topology, self._parts.prefix, self.name))

    def observe(self) -> Iterator[Leader | None]:
        """The leadership now, then each change of it (a new term, or nobody leading), as it
        happens: at once for a resignation or an election, within the leader's remaining lease
        for an expiry, and within a ttl if a message is lost. Changes between two looks are
        seen as one (the terms yielded increase). Runs until closed: use ``aclosing``/``break``.
        """
        topology = self._parts.topology
        last: Leader | _Unseen | None = _Unseen()
        # a first look before subscribing: a redis.asyncio RedisCluster learns its slots (which
        # say which node to subscribe on) from its first command
        self.leader()
        # subscribed (and confirmed) before the looks that count: any change after it wakes us
        with topology.watch(self._spec.keys.channel) as watch:
            while True:
                watch.event.clear()
                now = self.leader()
                if isinstance(last, _Unseen) or not same_term(now, last):
                    last = now
                    yield now
                watch.event.wait(next_look(now, self.ttl))

    def _announce(self) -> None:
        """Publish the new term on the lock's channel (best effort: observers look again within
        a ttl anyway), within one request timeout."""
        topology, channel = self._parts.topology, self._spec.keys.channel
        command = (topology.publish_command, channel, ELECTED)
        try:
            if isinstance(topology, SyncQuorum):
                topology.fan_out(command, topology.node_timeout(self.ttl), channel)
            else:
                assert isinstance(topology, SyncOneServer)
                topology.requester.request(
                    topology.redis, [command], topology.request_timeout, channel
                )
        except (RedisError, LockError) as exc:
            logger.debug("fencelock: could not announce the election of %r: %s", self.name, exc)
