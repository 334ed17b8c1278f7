# GENERATED from src/fencelock/_async/watchdog.py by tools/gen_sync.py: edit that file instead.
"""One watchdog per client renews every auto-renewed lease, and declares the lost ones lost.

Failure timeline it guards against: the work outlives the lease. Every lease is renewed when a
third of it has passed (Redisson's schedule), so two renewals can fail before it runs out; all
leases due together go to the server in one script call per batch of up to 100. A renewal that
finds the lock gone or held by another holder declares it lost at once. When renewals fail
(server down, network cut) the lease is declared lost at its local deadline, counted on this
host's monotonic clock from when the last successful renewal was *sent*, minus a drift allowance:
no later than the moment another client could acquire it. One task (asyncio) or one thread
(sync) serves every lease of the client: 10,000 leases are not 10,000 timers.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from .._backend import SyncBackground, SyncEvent, SyncStateLock, sync_sleep
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
    from .client import LockClient
    from .lock import Lock, Grant


logger = logging.getLogger("fencelock")


@dataclass(eq=False, slots=True)
class Lease:
    lock: Lock
    grant: Grant
    renew_at: float  # monotonic


@dataclass
class RenewStats:
    calls: int = 0  # renew script calls sent
    renewed: int = 0  # leases extended
    lost: int = 0  # leases declared lost


class Watchdog:
    def __init__(self, client: LockClient) -> None:
        self._client = client
        self._guard = SyncStateLock()
        self._wake = SyncEvent()
        self._worker = SyncBackground("fencelock-watchdog")
        self._pid = os.getpid()
        self._closing = False
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
            self._guard = SyncStateLock()
            self._wake = SyncEvent()
            self._worker = SyncBackground("fencelock-watchdog")
            self._sleep_until = math.inf

    def track(self, lock: Lock, grant: Grant) -> None:
        self._reset_after_fork()
        renew_at = next_renewal(time.monotonic(), lock.ttl)
        with self._guard:
            self._leases[grant] = Lease(lock, grant, renew_at)
            # Wake the worker only if it sleeps past this lease's first renewal: waking it for
            # every acquire would make it rescan all leases each time.
            wake = renew_at < self._sleep_until
        if not self._worker.running():
            self._closing = False
            self._worker.start(self._run)
        elif wake:
            self._wake.set()

    def untrack(self, grant: Grant) -> None:
        with self._guard:
            self._leases.pop(grant, None)

    def _run(self) -> None:
        while not self._closing:
            try:
                self._round()
            except Exception:  # a bug here must not silently end renewals for every lock
                logger.exception("fencelock watchdog round failed")
                sync_sleep(RENEW_RETRY)

    def _round(self) -> None:
        self._wake.clear()  # before looking: a lease tracked from now on wakes the next wait
        now = time.monotonic()
        slot_of = self._client.slot_of
        by_slot: dict[int, list[Lease]] = {}
        later: dict[int, list[Lease]] = {}
        with self._guard:
            for le in self._leases.values():
                # a Cluster runs a multi-key script only on keys of one slot
                group = by_slot if renewal_due(le.renew_at, le.lock.ttl, now) else later
                group.setdefault(slot_of(le.lock._keys.lock), []).append(le)
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
                self._renew(due[start : start + RENEW_BATCH])
        self._expire(ends)
        with self._guard:
            times = [min(le.renew_at, le.grant.deadline) for le in self._leases.values()]
            self._sleep_until = min(times, default=math.inf)
        left = self._sleep_until - time.monotonic()
        self._wake.wait(None if math.isinf(left) else max(0.0, left))

    def _expire(self, ends: list[tuple[float, int, Lease]]) -> None:
        """Declare lost the leases whose deadline has passed (``ends``: a heap of the round's
        deadlines; a lease renewed since is skipped)."""
        now = time.monotonic()
        while ends and ends[0][0] <= now:
            lease = heapq.heappop(ends)[2]
            if now >= lease.grant.deadline:
                self._lose(lease, "its lease ran out before a renewal was confirmed")

    def _renew(self, batch: list[Lease]) -> None:
        with self._guard:  # not the ones declared lost or released meanwhile
            batch = [lease for lease in batch if lease.grant in self._leases]
        if not batch:
            return
        keys = [lease.lock._keys.lock for lease in batch]
        args: list[str | int] = []
        for lease in batch:
            args += (lease.grant.holder, ttl_to_ms(lease.lock.ttl))
        sent_at = time.monotonic()
        # A server that hangs must not hold the worker past a lease's deadline, at which its
        # loss is to be signalled (and the socket timeout may be longer than the whole ttl).
        left = min(lease.grant.deadline for lease in batch) - sent_at
        self.stats.calls += 1
        held: Sequence[bool | None]
        try:
            if self._client.nodes:
                held = self._renew_quorum(batch, keys, args, sent_at, left)
            else:
                reply, acked = self._client.run_replicated(RENEW, keys, args, left)
                held = renew_reply(reply, len(batch))
                # unacknowledged renewals are not confirmed: a failover could undo them
                check_replicated(acked, self._client.min_replicas, "renewal")
        except (RedisError, LockError):
            held = [None] * len(batch)
        now = time.monotonic()
        for lease, ok in zip(batch, held, strict=True):
            if ok is None:  # not confirmed, not refused: try again soon
                lease.renew_at = renewal_retry(now, lease.lock.ttl)
            elif ok:
                self.stats.renewed += 1
                lease.grant.deadline = lease_deadline(sent_at, lease.lock.ttl)
                lease.renew_at = next_renewal(sent_at, lease.lock.ttl)
            else:
                self._lose(lease, "the lock was gone or held by another holder at renewal")

    def _renew_quorum(
        self,
        batch: list[Lease],
        keys: list[str],
        args: list[str | int],
        sent_at: float,
        left: float,
    ) -> list[bool | None]:
        """Redlock: per lease, renewed by a majority in time (True), refused by enough nodes
        that no majority can hold it (False), or unknown (None)."""
        timeout = min(left, *(lease.lock._node_timeout for lease in batch))
        replies = self._client.fan_out_script(RENEW, keys, args, timeout)
        elapsed = time.monotonic() - sent_at
        held: list[bool | None] = []
        for lease, answers in zip(batch, renew_answers(replies, len(batch)), strict=True):
            try:
                ok = tally(answers).outcome(len(replies), "renewal")
            except LockConnectionError:
                held.append(None)
                continue
            held.append(None if ok and validity(lease.lock.ttl, elapsed) <= 0 else ok)
        return held

    def _lose(self, lease: Lease, reason: str) -> None:
        with self._guard:
            if self._leases.pop(lease.grant, None) is None:
                return  # released meanwhile: a renewal answered after release is no loss
        self.stats.lost += 1
        lease.lock._declare_lost(lease.grant, reason)

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._worker.stop(2.0)
        with self._guard:
            self._leases.clear()
