"""What every primitive object that holds a lease offers, each method the engine's: one meaning
for ``release``, ``extend``, ``held``, ``token``, ``lost``, ``check``, ``remaining`` and ``with``
on the lock, the semaphore, the read-write sides and the election. Each primitive brings its own
``acquire`` (keyword-only, its own options) and nothing here is overridden.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from .._backend import async_current_task, async_public_name, async_uncancel
from .._core.lease import EXPLAINED, Exit, exit_action
from ..errors import LockError, LockLost, LockNotOwned, LockTimeout
from .engine import AsyncLease


def keyword_only(method: str, given: tuple[object, ...], names: str) -> None:
    """Refuse positional arguments with a message that names the keywords (they meant other
    things in other libraries, and in fencelock before 0.2: ``sem.acquire(5)`` took 5
    permits, ``lock.acquire(5)`` waited 5 s)."""
    if given:
        shown = ", ".join(repr(arg) for arg in given)
        raise TypeError(f"{method}() takes keyword arguments only ({names}), got {shown}")


def end_lost_block(loss: LockError, exc: BaseException | None, policy: str, by_us: bool) -> None:
    """The end of a ``with`` block over a lease that ``loss`` says was lost, by its exit policy
    (``_core/lease.exit_action``): raise the loss (chained to the body's ``exc``), note it on
    ``exc``, or nothing. ``by_us``: the body was cancelled by the loss."""
    action = exit_action(True, policy, exc is not None, by_us)
    if action is Exit.RAISE:
        raise loss from exc
    if action is Exit.NOTE:  # the body's own error is the one to see; the loss rides along
        assert exc is not None
        exc.add_note(f"fencelock: {loss}")


class AsyncLeaseFacade:
    """The API of a primitive object over its lease engine (``self._lease``)."""

    __slots__ = ("__weakref__", "_lease")

    _lease: AsyncLease

    def __repr__(self) -> str:
        public = async_public_name(self)
        return f"<{public} {self.name!r} ttl={self.ttl}>"

    @property
    def name(self) -> str:
        return self._lease.options.name

    @property
    def ttl(self) -> float:
        return self._lease.options.ttl

    @property
    def timeout(self) -> float | None:
        """The wait of ``acquire()`` and ``with`` (None: as long as it takes)."""
        return self._lease.options.timeout

    @property
    def auto_renew(self) -> bool:
        return self._lease.options.auto_renew

    async def release(self) -> None:
        """Give the grant up (a reentrant lock: leave one hold). Raises ``LockNotOwned``
        (deleting nothing) if this object does not hold it, ``LockLost`` if its lease expired."""
        await self._lease.release()

    async def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining lease to ``ttl`` seconds (default: the object's ttl)."""
        await self._lease.extend(ttl)

    async def held(self) -> bool:
        """Whether this object holds the lease and may rely on it: asks the server, and is
        False once the lease is lost or has run out by the local deadline, whatever the server
        still shows."""
        return await self._lease.held()

    @property
    def token(self) -> int:
        """The fencing token of the current grant (kept after the lease is lost, until release).

        Redlock, where the nodes granted different tokens: the first read raises a majority's
        counters to the token (one round trip), so that every later grant gets a larger one;
        ``LockLost`` if the lease is gone by then."""
        return self._lease.token()

    @property
    def lost(self) -> bool:
        """True once this process knows, or must assume, that the lease is gone."""
        return self._lease.lost

    def check(self) -> None:
        """Return if the lease is still certainly held, else raise ``LockLost`` (``LockNotOwned``
        if this object never held it). Local and instant: no request to the server."""
        self._lease.check()

    def remaining(self) -> float:
        """Seconds of the current lease left, by this process's clock (0: none held, or lost):
        ``check()`` passes until then. Local and instant: no request to the server."""
        return self._lease.remaining()

    async def __aenter__(self) -> Self:
        """Acquire within the object's timeout, else ``LockTimeout``."""
        lease = self._lease
        if not await lease.acquire():
            acquired, wait = lease.spec.words.acquired, lease.options.timeout
            raise LockTimeout(f"{lease.what()} not {acquired} within {wait} s")
        grant = lease.grant()
        if grant is not None and grant.depth == 1:
            grant.entered_block(async_current_task())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release, and apply the exit policy to a loss (``_core/lease.exit_action``)."""
        lease = self._lease
        grant = lease.grant()
        if grant is None:
            return  # released inside the block
        by_us = grant.cancelled and grant.depth == 1
        if by_us:
            async_uncancel(grant.task)  # our cancellation becomes LockLost below
        loss: LockNotOwned | None = None
        try:
            await lease.release()
        except LockNotOwned as error:
            loss = error
        except LockError:
            if not grant.lost:
                raise
            # the server could not be reached to release: the loss is what the block must hear
        if loss is None and grant.lost:
            why = EXPLAINED[grant.loss]
            loss = LockLost(f"{lease.what()}: the lease was lost while the block ran: {why}")
        if loss is not None:
            end_lost_block(loss, exc, lease.options.on_lost_policy, by_us)
