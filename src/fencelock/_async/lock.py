"""One lock: a name, a lease length, and at most one grant per holder.

Failure timeline of a simple lease, and what each step guards against:

1. acquire: one script sets ``lock = holder`` with ``PX ttl`` if the name is free and hands out
   the next fencing token (scripts/tokens.lua), so the lease always has an expiry (no
   SETNX-then-EXPIRE gap) and every grant gets a larger token. The holder token is 20 fresh
   random bytes, so no other holder can match it.
2. The request times out: the library sends it again with the *same* holder token; if the first
   one had succeeded the script recognises the holder and re-extends instead of refusing it.
3. The caller is cancelled (or interrupted) while the request is in flight: it may have been
   granted, so a shielded release with that holder token runs before the error propagates.
4. The work outlives the lease: ``extend`` resets it; a lease that expired meanwhile is reported
   (``LockNotOwned``/``lost``), never silently re-taken.
5. release: one script compares the holder token and deletes, so an expired holder can never
   delete its successor's lock; it then serves the next waiter: on one master it grants the
   first queued waiter the lock in the same script (wake="one"), else it publishes a wake-up.
6. Meanwhile ``check()`` compares the monotonic clock with the local lease deadline (counted from
   when the request was sent, minus a drift allowance): a holder paused past its lease learns it
   before it can act, even if Redis is unreachable.
7. With ``auto_renew`` the client's watchdog renews the lease; when it cannot, the lock is
   declared lost once, and the business code hears of it: ``on_lost(lock)``, ``lost``,
   ``check()``, and on leaving the block per ``on_lost_policy`` ("raise": LockLost, "ignore":
   carry on, "cancel": asyncio only, the task in the block is cancelled and the block ends with
   LockLost).
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from .._backend import (
    ASYNC_CAN_CANCEL,
    AsyncStateLock,
    async_blocking,
    async_call_scope,
    async_current_task,
    async_shield,
    async_spawn,
    async_uncancel,
)
from .._core import events
from .._core.lease import (
    EXPLAINED,
    Exit,
    Grant,
    LockSpec,
    Released,
    exit_action,
    loss_reason,
    should_cancel,
)
from .._core.replies import RENEWED, TAKEN
from .._core.stats import Counters
from ..errors import LockError, LockLost, LockNotOwned, LockTimeout
from ..keys import (
    MIN_LEASE,
    LockKeys,
    ttl_to_ms,
    validate_flag,
    validate_name,
    validate_on_lost,
    validate_timeout,
    validate_ttl,
)
from ..labels import Label, check_label
from . import contention, handoff
from .singleflight import AsyncLocalQueues
from .topology import AsyncTopology
from .watchdog import AsyncWatchdog

logger = logging.getLogger("fencelock.lease")


class _Default:
    pass


_DEFAULT: Final = _Default()


@dataclass(frozen=True, slots=True)
class Parts:
    """What the lock objects of one client share, handed to each by the client."""

    topology: AsyncTopology
    queues: AsyncLocalQueues
    watchdog: AsyncWatchdog
    counters: Counters
    prefix: str
    wake_one: bool  # wake="one": waiters queue in Redis and a release wakes the first
    max_poll: float | None
    label: Label = None  # the client's holder label (labels.py)


class AsyncLock:
    _noun = "lock"  # what error messages call this object ("this semaphore does not hold it")

    def __init__(
        self,
        client: object,
        parts: Parts,
        name: str,
        ttl: float,
        *,
        timeout: float | None,
        auto_renew: bool = False,
        reentrant: bool = False,
        on_lost: Callable[[AsyncLock], object] | None = None,
        on_lost_policy: str = "raise",
        label: Label | _Default = _DEFAULT,
    ) -> None:
        self.name = validate_name(name)
        self.label = parts.label if isinstance(label, _Default) else check_label(label)
        self.ttl = validate_ttl(ttl, minimum=MIN_LEASE)
        self.timeout = validate_timeout(timeout)
        validate_on_lost(on_lost, on_lost_policy, threads=not ASYNC_CAN_CANCEL)
        self.auto_renew = validate_flag("auto_renew", auto_renew)
        self.reentrant = validate_flag("reentrant", reentrant)
        self.on_lost = on_lost
        self.on_lost_policy = on_lost_policy
        self._client = client  # not used: kept so that the client lives as long as its locks
        self._parts = parts
        self._spec = LockSpec(self.name, LockKeys.for_name(name, parts.prefix), self.ttl, reentrant)
        # The lock object is the holder, in both APIs: whichever task or thread acquired, any may
        # use the grant and release it (asyncio.Lock, threading.Lock and redis-py's Lock agree).
        self._held: Grant | None = None
        self._guard = AsyncStateLock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl}>"

    def _grant(self) -> Grant | None:
        grant = self._held
        if grant is not None and grant.pid != os.getpid():
            return None  # the parent's grant, inherited through fork(): not ours
        return grant

    def _owned_grant(self, action: str) -> Grant:
        grant = self._grant()
        if grant is None:
            raise LockNotOwned(f"cannot {action} {self.name!r}: this {self._noun} does not hold it")
        return grant

    # -- acquire --------------------------------------------------------------------------

    async def acquire(self, timeout: float | _Default | None = _DEFAULT) -> bool:
        """Take the lock. ``timeout``: None waits forever, 0 tries once, > 0 waits that long
        (default: the lock's own timeout). Returns whether the lock was acquired."""
        wait = self.timeout if isinstance(timeout, _Default) else validate_timeout(timeout)
        with async_call_scope():
            held = self._grant()
            if held is not None:
                if self.reentrant:
                    await contention.reenter(self, held)
                    return True
                if not self._is_lost(held):
                    raise LockError(f"{self.name!r} is already held by this lock (not reentrant)")
                if held.in_block:
                    # the block's end must still hear of the loss, and release nothing newer
                    raise LockError(
                        f"{self.name!r}: its lease was lost inside a with block of this lock; "
                        "leave the block first"
                    )
                self._forget(held)  # a lost lease holds nothing: take the name afresh
            started = time.monotonic()
            deadline = None if wait is None else started + wait
            try:
                grant = await contention.take(self, deadline)
            except BaseException:
                if events.on:
                    self._acquire_ended(events.ERROR, started, None)
                raise
            if grant is None:
                if events.on:
                    self._acquire_ended(events.TIMEOUT, started, None)
                return False
            self._install(grant)
            if events.on:
                grant.since = self._acquire_ended(events.GRANTED, started, grant.fence)
            return True

    def _acquire_ended(self, outcome: str, started: float, token: int | None) -> float:
        now = time.monotonic()
        primitive = self._spec.primitive
        events.emit(events.AcquireEnded(primitive, self.name, outcome, now - started, token))
        return now

    def _install(self, grant: Grant) -> None:
        self._held = grant
        self._parts.counters.add(held=1, acquired=1)
        if self.auto_renew:
            self._parts.watchdog.track(grant, self._spec, self._declare_lost)

    def _forget(self, grant: Grant) -> None:
        """This object no longer holds ``grant`` (lost, and taken afresh)."""
        self._held = None
        self._parts.counters.add(held=-1)
        self._parts.watchdog.untrack(grant)
        if events.on:
            self._hold_ended(grant)
        self._parts.queues.pass_turn(self._spec.line, grant)

    def _hold_ended(self, grant: Grant) -> None:
        if grant.since:  # (0: taken while nobody listened)
            seconds = time.monotonic() - grant.since
            events.emit(events.HoldEnded(self._spec.primitive, self.name, seconds, grant.fence))

    # -- release / extend ------------------------------------------------------------------

    async def release(self) -> None:
        """Give the lock up (a reentrant lock: leave one hold). Raises ``LockNotOwned``
        (deleting nothing) if this lock does not hold it, ``LockLost`` if its lease expired."""
        grant = self._owned_grant("release")
        with async_call_scope():
            if grant.depth > 1:
                grant.depth -= 1
                topology = self._parts.topology
                released = await async_shield(topology.release(self._spec, grant.holder))
                if released == Released.NOT_HELD:
                    why = self._declare_lost(grant, "at release")
                    raise LockLost(f"{self.name!r} was no longer held: {EXPLAINED[why]}")
                return
            # Forget the grant first: whatever happens below, this object no longer holds it.
            # (The hot path: written out, not shared with _forget, to spare a call.)
            self._held = None
            self._parts.counters.add(held=-1)
            self._parts.watchdog.untrack(grant)
            if events.on:
                self._hold_ended(grant)
            if not await handoff.give_up(self, grant):
                # found gone: a loss like any other (counted, logged and signalled once)
                why = self._declare_lost(grant, "at release")
                raise LockLost(f"{self.name!r} was no longer held when released: {EXPLAINED[why]}")

    async def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining lease to ``ttl`` seconds (default: the lock's ttl)."""
        new_ttl = self.ttl if ttl is None else validate_ttl(ttl, minimum=MIN_LEASE)
        grant = self._owned_grant("extend")
        sent_at = time.monotonic()
        key, timeout = self._spec.keys.lock, self._parts.topology.request_timeout
        args = (grant.holder, ttl_to_ms(new_ttl))
        [held] = await self._parts.topology.renew([key], args, [new_ttl], timeout)
        if isinstance(held, LockError):
            raise held
        if held != RENEWED:
            why = self._declare_lost(grant, "at extend", other_holder=held == TAKEN)
            raise LockLost(f"cannot extend {self.name!r}: {EXPLAINED[why]}")
        grant.renewed(sent_at, new_ttl)

    # -- loss --------------------------------------------------------------------------------

    def _declare_lost(self, grant: Grant, found: str, *, other_holder: bool = False) -> str:
        """Mark ``grant`` lost and signal it, once (from the watchdog or from the caller);
        ``found`` says how it was found, ``other_holder`` whether the server showed another
        holder. Returns why it is lost (one of ``LOSS_REASONS``, for LockLost's message)."""
        reason = loss_reason(grant, time.monotonic(), other_holder=other_holder)
        with self._guard:
            if not grant.mark_lost():
                return reason
        self._parts.counters.add(losses=1)
        self._parts.watchdog.untrack(grant)
        if events.on:
            events.emit(events.LeaseLost(self._spec.primitive, self.name, grant.fence, reason))
        logger.warning(
            "fencelock: lock %r lost (token %d): %s, found %s",
            self.name,
            grant.fence,
            reason,
            found,
            extra={
                "event": "lease_lost",
                "lock_name": self.name,
                "token": grant.fence,
                "reason": reason,
            },
        )
        if self.on_lost is not None:
            try:
                outcome = self.on_lost(self)
                if inspect.isawaitable(outcome):  # an async def: awaited in a task of its own
                    async_spawn(outcome, f"on_lost callback of {self.name!r}")
            except Exception:
                logger.exception("fencelock: on_lost callback of %r raised", self.name)
        if should_cancel(self.on_lost_policy, grant.task, async_current_task()):
            grant.cancelled = True
            grant.task.cancel()
        return reason

    # -- state -----------------------------------------------------------------------------

    async def held(self) -> bool:
        """Whether this lock holds the lease and may rely on it: asks the server, and is False
        once the lease is lost or has run out by the local deadline, whatever the server still
        shows."""
        grant = self._grant()
        if grant is None or self._is_lost(grant):
            return False
        ok = await self._parts.topology.held(self._spec, grant.holder)
        if not ok:
            self._declare_lost(grant, "by held()")
        return ok and not self._is_lost(grant)  # the deadline may have passed meanwhile

    @property
    def token(self) -> int:
        """The fencing token of the current grant (kept after the lease is lost, until release).

        Redlock: the first read raises a majority's counters to the token (one round trip), so
        that every later grant gets a larger one; ``LockLost`` if the lease is gone by then."""
        grant = self._owned_grant("read the token of")
        if not grant.confirmed:
            return async_blocking(self._confirm_token, grant)
        return grant.fence

    async def _confirm_token(self, grant: Grant) -> int:
        if not self._is_lost(grant):
            # the lease must still be ours once the write-back is done, not only before
            topology = self._parts.topology
            confirmed = await topology.confirm(self._spec, grant.holder, grant.fence)
            if confirmed and not self._is_lost(grant):
                grant.confirmed = True
                return grant.fence
            self._declare_lost(grant, "when its token was read (a majority no longer held it)")
        # a later grant may have been computed without this token: it must never be used
        raise LockLost(f"{self.name!r}: the lease was lost before its fencing token was read")

    def _is_lost(self, grant: Grant) -> bool:
        if not grant.lost and grant.expired(time.monotonic()):
            self._declare_lost(grant, "by its local deadline")
        return grant.lost

    @property
    def lost(self) -> bool:
        """True once this process knows, or must assume, that the lease is gone."""
        grant = self._grant()
        return grant is not None and self._is_lost(grant)

    def check(self) -> None:
        """Return if the lease is still certainly held, else raise ``LockLost`` (``LockNotOwned``
        if this lock never held it). Local and instant: no request to the server."""
        if self._is_lost(self._owned_grant("check")):
            raise LockLost(f"{self.name!r}: the lease is lost (expired or taken over)")

    # -- context manager -------------------------------------------------------------------

    async def __aenter__(self) -> AsyncLock:
        if not await self.acquire():
            raise LockTimeout(f"{self.name!r} not acquired within {self.timeout} s")
        grant = self._grant()
        if grant is not None and grant.depth == 1:
            grant.task = async_current_task()
            grant.in_block = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        grant = self._grant()
        if grant is None:
            return  # released inside the block
        by_us = grant.cancelled and grant.depth == 1
        if by_us:
            async_uncancel(grant.task)  # our cancellation becomes LockLost below
        loss: LockNotOwned | None = None
        try:
            await self.release()
        except LockNotOwned as error:
            loss = error
        except LockError:
            if not grant.lost:
                raise
            # the server could not be reached to release: the loss is what the block must hear
        if loss is None and grant.lost:
            loss = LockLost(f"{self.name!r}: the lease was lost while the block ran")
        action = exit_action(loss is not None, self.on_lost_policy, exc is not None, by_us)
        if action is Exit.RAISE:
            assert loss is not None
            raise loss from exc
        if action is Exit.NOTE:  # the body's own error is the one to see; the loss rides along
            assert exc is not None
            exc.add_note(f"fencelock: {loss}")
