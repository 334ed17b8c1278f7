"""One watchdog per client renews every auto-renewed lease, and declares the lost ones lost.

Failure timeline it guards against: the work outlives the lease. Every lease is renewed when a
third of it has passed (Redisson's schedule), so two renewals can fail before it runs out; all
leases due together go to the server in one script call per batch of up to 100. A renewal that
finds the lock gone or held by another holder declares it lost at once. When renewals fail
(server down, network cut) the lease is declared lost at its local deadline, counted on this
host's monotonic clock from when the last successful renewal was *sent*, minus a drift allowance:
no later than the moment another client could acquire it. One task (asyncio) or one thread
(sync) serves every lease of the client: 10,000 leases are not 10,000 timers.

Nothing here keeps a lock or the client alive: a lease record holds its lock object through a weak
reference, the worker holds the client weakly and runs only while there are leases. A lock object
dropped while held is no longer renewed (a ResourceWarning says so) and its lease runs out on the
server by its ttl; it is not deleted: the drop may have been a mistake elsewhere, and expiry is
the outcome the server guarantees anyway.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import sys
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from .._backend import AsyncBackground, AsyncEvent, AsyncStateLock
from .._core.quorum import renew_answers, tally, validity
from .._core.replies import check_replicated, renew_reply
from .._core.timing import (
    RENEW_BATCH,
    RENEW_RETRY,
    lease_deadline,
    next_renewal,
    renewal_due,
    renewal_retry,
)
from ..errors import LockConnectionError, LockError
from ..keys import ttl_to_ms
from ..scripts import RENEW

if TYPE_CHECKING:
    from .client import AsyncLockClient
    from .lock import AsyncLock, Grant


logger = logging.getLogger("fencelock")


@dataclass(eq=False, slots=True)
class Lease:
    """What renewing one grant takes, read once at track(); the lock only weakly."""

    lock: weakref.ref[AsyncLock]
    grant: Grant
    key: str
    ttl: float
    slot: int  # its Cluster slot (0 elsewhere)
    node_timeout: float
    renew_at: float  # monotonic


@dataclass
class RenewStats:
    calls: int = 0  # renew script calls sent
    renewed: int = 0  # leases extended
    lost: int = 0  # leases declared lost


class AsyncWatchdog:
    def __init__(self, client: AsyncLockClient) -> None:
        # weakly: the worker must not keep a dropped client (and its connections) alive
        self._client = weakref.ref(client)
        self._guard = AsyncStateLock()
        self._wake = AsyncEvent()
        self._worker = AsyncBackground("fencelock-watchdog")
        self._pid = os.getpid()
        self._closing = False
        self._running = False  # a worker runs, or has been started (under _guard)
        self._leases: dict[Grant, Lease] = {}
        self._sleep_until = math.inf  # monotonic time the worker sleeps until
        self.stats = RenewStats()

    def __len__(self) -> int:
        return len(self._leases)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            # A forked child: the parent's leases are the parent's to renew, its watchdog
            # thread does not exist here, and its locks may have been held by that thread.
            self._pid = os.getpid()
            self._leases = {}
            self._guard = AsyncStateLock()
            self._wake = AsyncEvent()
            self._worker = AsyncBackground("fencelock-watchdog")
            self._running = False
            self._sleep_until = math.inf

    def track(self, lock: AsyncLock, grant: Grant) -> None:
        self._reset_after_fork()
        renew_at = next_renewal(time.monotonic(), lock.ttl)
        key = lock._keys.lock
        dropped = partial(_dropped, self._leases, grant, lock.name)
        lease = Lease(
            weakref.ref(lock, dropped),
            grant,
            key,
            lock.ttl,
            lock._client.slot_of(key),
            lock._node_timeout,
            renew_at,
        )
        with self._guard:
            self._leases[grant] = lease
            # Wake the worker only if it sleeps past this lease's first renewal: waking it for
            # every acquire would make it rescan all leases each time.
            wake = renew_at < self._sleep_until
            start, self._running = not self._running, True
        if start:
            self._closing = False
            self._worker.start(self._run)
        elif wake:
            self._wake.set()

    def untrack(self, grant: Grant) -> None:
        with self._guard:
            self._leases.pop(grant, None)

    async def _run(self) -> None:
        while True:
            client = self._client()
            with self._guard:
                # leases of lock objects that were dropped: no longer renewed (see _dropped)
                for grant in [g for g, le in self._leases.items() if le.lock() is None]:
                    del self._leases[grant]
                if self._closing or client is None or not self._leases:
                    # Done: a lease tracked from now on starts a new worker. Ending here lets a
                    # dropped client go, with no thread or task of it left behind.
                    self._running = False
                    self._sleep_until = math.inf
                    return
            try:
                await self._round(client)
            except Exception:  # a bug here must not silently end renewals for every lock
                logger.exception("fencelock watchdog round failed")
                self._sleep_until = time.monotonic() + RENEW_RETRY
            del client  # not held while asleep
            left = self._sleep_until - time.monotonic()
            if not math.isinf(left):  # (else no lease is left: the worker ends above)
                await self._wake.wait(max(0.0, left))

    async def _round(self, client: AsyncLockClient) -> None:
        self._wake.clear()  # before looking: a lease tracked from now on wakes the next wait
        now = time.monotonic()
        by_slot: dict[int, list[Lease]] = {}
        later: dict[int, list[Lease]] = {}
        with self._guard:
            for le in self._leases.values():
                # a Cluster runs a multi-key script only on keys of one slot
                group = by_slot if renewal_due(le.renew_at, le.ttl, now) else later
                group.setdefault(le.slot, []).append(le)
            ends = [(le.grant.deadline, id(le), le) for le in self._leases.values()]
        heapq.heapify(ends)
        for slot, due in by_slot.items():
            # Fill the last batch with the leases due soonest: renewing them early costs nothing,
            # and leases taken at scattered times end up sharing full batches.
            room = -len(due) % RENEW_BATCH
            if room and slot in later:
                due += heapq.nsmallest(room, later[slot], key=lambda le: le.renew_at)
            for start in range(0, len(due), RENEW_BATCH):
                # between batches too: a lease must be declared lost at its deadline, not when
                # the round ends (each batch may take until its earliest deadline)
                self._expire(ends)
                await self._renew(client, due[start : start + RENEW_BATCH])
        self._expire(ends)
        with self._guard:
            times = [min(le.renew_at, le.grant.deadline) for le in self._leases.values()]
            self._sleep_until = min(times, default=math.inf)

    def _expire(self, ends: list[tuple[float, int, Lease]]) -> None:
        """Declare lost the leases whose deadline has passed (``ends``: a heap of the round's
        deadlines; a lease renewed since is skipped)."""
        now = time.monotonic()
        while ends and ends[0][0] <= now:
            lease = heapq.heappop(ends)[2]
            if now >= lease.grant.deadline:
                self._lose(lease, "its lease ran out before a renewal was confirmed")

    async def _renew(self, client: AsyncLockClient, batch: list[Lease]) -> None:
        with self._guard:  # not the ones declared lost, released or dropped meanwhile
            batch = [le for le in batch if le.grant in self._leases and le.lock() is not None]
        if not batch:
            return
        keys = [lease.key for lease in batch]
        args: list[str | int] = []
        for lease in batch:
            args += (lease.grant.holder, ttl_to_ms(lease.ttl))
        sent_at = time.monotonic()
        # A server that hangs must not hold the worker past a lease's deadline, at which its
        # loss is to be signalled (and the socket timeout may be longer than the whole ttl).
        left = min(lease.grant.deadline for lease in batch) - sent_at
        self.stats.calls += 1
        held: Sequence[bool | None]
        try:
            if client.nodes:
                held = await self._renew_quorum(client, batch, keys, args, sent_at, left)
            else:
                reply, acked = await client.run_replicated(RENEW, keys, args, left)
                held = renew_reply(reply, len(batch))
                # unacknowledged renewals are not confirmed: a failover could undo them
                check_replicated(acked, client.min_replicas, "renewal")
        except (RedisError, LockError):
            held = [None] * len(batch)
        now = time.monotonic()
        for lease, ok in zip(batch, held, strict=True):
            if ok is None:  # not confirmed, not refused: try again soon
                lease.renew_at = renewal_retry(now, lease.ttl)
            elif ok:
                self.stats.renewed += 1
                lease.grant.deadline = lease_deadline(sent_at, lease.ttl)
                lease.renew_at = next_renewal(sent_at, lease.ttl)
            else:
                self._lose(lease, "the lock was gone or held by another holder at renewal")

    async def _renew_quorum(
        self,
        client: AsyncLockClient,
        batch: list[Lease],
        keys: list[str],
        args: list[str | int],
        sent_at: float,
        left: float,
    ) -> list[bool | None]:
        """Redlock: per lease, renewed by a majority in time (True), refused by enough nodes
        that no majority can hold it (False), or unknown (None)."""
        timeout = min(left, *(lease.node_timeout for lease in batch))
        replies = await client.fan_out_script(RENEW, keys, args, timeout)
        elapsed = time.monotonic() - sent_at
        held: list[bool | None] = []
        for lease, answers in zip(batch, renew_answers(replies, len(batch)), strict=True):
            try:
                ok = tally(answers).outcome(len(replies), "renewal")
            except LockConnectionError:
                held.append(None)
                continue
            held.append(None if ok and validity(lease.ttl, elapsed) <= 0 else ok)
        return held

    def _lose(self, lease: Lease, reason: str) -> None:
        with self._guard:
            if self._leases.pop(lease.grant, None) is None:
                return  # released meanwhile: a renewal answered after release is no loss
        self.stats.lost += 1
        lock = lease.lock()
        if lock is not None:  # else dropped: nobody is left to hear of it
            lock._declare_lost(lease.grant, reason)

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        await self._worker.stop(2.0)
        with self._guard:
            self._leases.clear()
            self._running = False


def _dropped(leases: dict[Grant, Lease], grant: Grant, name: str, _: object) -> None:
    """A lock object was collected: warn if it still held a renewed lease. (Called by the garbage
    collector, in whatever thread, maybe inside a section under the watchdog's guard: so it only
    reads, and the worker drops the lease at its next round.)"""
    if sys.is_finalizing():
        return  # the process is ending: so are its leases' renewals, as expected
    if grant in leases and not grant.lost and grant.pid == os.getpid():
        warnings.warn(
            f"lock {name!r} was dropped while held; its lease is no longer renewed",
            ResourceWarning,
            stacklevel=2,
        )
