# GENERATED from src/fencelock/_async/lock.py by tools/gen_sync.py: edit that file instead.
"""One lock: a name, a lease length, and at most one grant per holder.

Failure timeline of a simple lease, and what each step guards against:

1. acquire: one script does ``SET lock holder NX PX ttl`` and ``INCR fence``, so the lease always
   has an expiry (no SETNX-then-EXPIRE gap) and every grant gets a larger fencing token. The holder
   token is 20 fresh random bytes, so no other holder can match it.
2. The request times out: the library sends it again with the *same* holder token; if the first
   one had succeeded the script recognises the holder and re-extends instead of refusing it.
3. The caller is cancelled (or interrupted) while the request is in flight: it may have been
   granted, so a shielded release with that holder token runs before the error propagates.
4. The work outlives the lease: ``extend`` resets it; a lease that expired meanwhile is reported
   (``LockNotOwned``/``lost``), never silently re-taken.
5. release: one script compares the holder token and deletes, so an expired holder can never
   delete its successor's lock; it then publishes a wake-up for waiters.
6. Meanwhile ``check()`` compares the monotonic clock with the local lease deadline (counted from
   when the request was sent, minus a drift allowance): a holder paused past its lease learns it
   before it can act, even if Redis is unreachable.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final

from redis.exceptions import RedisError, TimeoutError

from .._backend import SyncOwnerSlot, sync_checkpoint, sync_shield
from .._core.replies import (
    Busy,
    Granted,
    acquire_reply,
    new_holder_token,
    owned_reply,
    translate_error,
)
from .._core.timing import lease_deadline, remaining, retry_delay
from ..errors import LockError, LockLost, LockNotOwned, LockTimeout
from ..keys import LockKeys, ttl_to_ms, validate_name, validate_timeout, validate_ttl
from ..scripts import ACQUIRE, EXTEND, RELEASE

if TYPE_CHECKING:
    from .client import LockClient

# A request that timed out is sent once more with the same holder token (see step 2).
ACQUIRE_ATTEMPTS: Final = 2


class _Default:
    pass


_DEFAULT: Final = _Default()


@dataclass(slots=True)
class Grant:
    """What this process knows about one grant of the lock."""

    holder: str  # the random holder token stored in Redis
    fence: int  # the fencing token of this grant
    pid: int  # a forked child must not act on its parent's grant
    deadline: float  # monotonic time until which the lease is certainly ours
    lost: bool = False


class Lock:
    def __init__(
        self, client: LockClient, name: str, ttl: float, *, timeout: float | None
    ) -> None:
        self.name = validate_name(name)
        self.ttl = validate_ttl(ttl)
        self.timeout = validate_timeout(timeout)
        self._client = client
        self._keys = LockKeys.for_name(self.name, client.prefix)
        # built once: the uncontended cycle is a hot path
        self._ttl_ms = ttl_to_ms(self.ttl)
        self._acquire_keys = (self._keys.lock, self._keys.fence)
        self._lock_key = (self._keys.lock,)
        self._slot: SyncOwnerSlot[Grant] = SyncOwnerSlot()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl}>"

    def _grant(self) -> Grant | None:
        grant = self._slot.get()
        if grant is not None and grant.pid != os.getpid():
            return None  # the parent's grant, inherited through fork(): not ours
        return grant

    def _owned_grant(self, action: str) -> Grant:
        grant = self._grant()
        if grant is None:
            raise LockNotOwned(f"cannot {action} {self.name!r}: this lock does not hold it")
        return grant

    # -- acquire --------------------------------------------------------------------------

    def acquire(self, timeout: float | _Default | None = _DEFAULT) -> bool:
        """Take the lock. ``timeout``: None waits forever, 0 tries once, > 0 waits that long
        (default: the lock's own timeout). Returns whether the lock was acquired."""
        wait = self.timeout if isinstance(timeout, _Default) else validate_timeout(timeout)
        if self._grant() is not None:
            raise LockError(f"{self.name!r} is already held by this lock (it is not reentrant)")
        holder = new_holder_token()
        deadline = None if wait is None else time.monotonic() + wait
        try:
            grant = self._acquire(holder, deadline)
        except BaseException:
            # Cancelled, interrupted or failed with a request in flight: it may have been granted.
            sync_shield(self._release_quietly(holder))
            raise
        if grant is None:
            return False
        self._slot.set(grant)
        return True

    def _acquire(self, holder: str, deadline: float | None) -> Grant | None:
        sent_at = time.monotonic()
        result = self._try(holder)
        if isinstance(result, Busy) and remaining(deadline, time.monotonic()) != 0:
            waiter = self._client._waiter
            with waiter.watch(self._keys.channel) as wake:
                while isinstance(result, Busy):
                    left = remaining(deadline, time.monotonic())
                    if left == 0:
                        break
                    # Subscribed (and confirmed) before this re-try: a release after it wakes us.
                    wake.clear()
                    sent_at = time.monotonic()
                    result = self._try(holder)
                    if isinstance(result, Granted):
                        break
                    left = remaining(deadline, time.monotonic())
                    waiter.wait(wake, retry_delay(result.pttl, left, self._client.max_poll))
        if isinstance(result, Busy):
            return None
        return Grant(holder, result.fence, os.getpid(), lease_deadline(sent_at, self.ttl))

    def _try(self, holder: str) -> Granted | Busy:
        args = (holder, self._ttl_ms)
        for attempt in range(1, ACQUIRE_ATTEMPTS + 1):
            try:
                reply = self._client.run(ACQUIRE, self._acquire_keys, args)
                sync_checkpoint()
                return acquire_reply(reply)
            except TimeoutError as exc:
                if attempt == ACQUIRE_ATTEMPTS:
                    raise translate_error(exc, self._keys.lock) from exc
            except RedisError as exc:
                raise translate_error(exc, self._keys.lock) from exc
        raise AssertionError("unreachable")

    def _release_quietly(self, holder: str) -> bool:
        try:
            return self._release_script(holder)
        except (RedisError, LockError):
            return False  # the server is unreachable: the lease expires on its own

    # -- release / extend ------------------------------------------------------------------

    def _release_script(self, holder: str) -> bool:
        args = (holder, self._keys.channel, self._client.publish_command)
        try:
            return owned_reply(self._client.run(RELEASE, self._lock_key, args))
        except RedisError as exc:
            raise translate_error(exc, self._keys.lock) from exc

    def release(self) -> None:
        """Give the lock up. Raises ``LockNotOwned`` (deleting nothing) if this lock does not hold
        it, including when its lease has expired meanwhile."""
        grant = self._owned_grant("release")
        # Forget the grant first: whatever happens below, this object no longer holds it.
        self._slot.set(None)
        if not sync_shield(self._release_script(grant.holder)):
            raise LockLost(f"{self.name!r} was no longer held when released: its lease had expired")

    def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining lease to ``ttl`` seconds (default: the lock's ttl)."""
        new_ttl = self.ttl if ttl is None else validate_ttl(ttl)
        grant = self._owned_grant("extend")
        sent_at = time.monotonic()
        try:
            reply = self._client.run(
                EXTEND, self._lock_key, (grant.holder, ttl_to_ms(new_ttl))
            )
        except RedisError as exc:
            raise translate_error(exc, self._keys.lock) from exc
        if not owned_reply(reply):
            grant.lost = True
            raise LockLost(f"cannot extend {self.name!r}: its lease had already expired")
        grant.deadline = lease_deadline(sent_at, new_ttl)

    # -- state -----------------------------------------------------------------------------

    def held(self) -> bool:
        """Ask the server whether this lock still holds the lease."""
        grant = self._grant()
        if grant is None:
            return False
        try:
            value = self._client.redis.get(self._keys.lock)
        except RedisError as exc:
            raise translate_error(exc, self._keys.lock) from exc
        if isinstance(value, bytes):
            value = value.decode()
        if value != grant.holder:
            grant.lost = True
            return False
        return True

    @property
    def token(self) -> int:
        """The fencing token of the current grant (kept after the lease is lost, until release)."""
        return self._owned_grant("read the token of").fence

    @property
    def lost(self) -> bool:
        """True once this process knows, or must assume, that the lease is gone."""
        grant = self._grant()
        if grant is None:
            return False
        if not grant.lost and time.monotonic() >= grant.deadline:
            grant.lost = True
        return grant.lost

    def check(self) -> None:
        """Return if the lease is still certainly held, else raise ``LockLost`` (``LockNotOwned``
        if this lock never held it). Local and instant: no request to the server."""
        self._owned_grant("check")
        if self.lost:
            raise LockLost(f"{self.name!r}: the lease is lost (expired or taken over)")

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockTimeout(f"{self.name!r} not acquired within {self.timeout} s")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockNotOwned as loss:
            if exc is None:
                raise
            # The body's own error is the one to see; the loss rides along as a note.
            exc.add_note(f"fencelock: {loss}")
