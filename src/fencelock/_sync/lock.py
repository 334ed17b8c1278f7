# GENERATED from src/fencelock/_async/lock.py by tools/gen_sync.py: edit that file instead.
"""A lock: a name, a lease length, and at most one grant per lock object.

The lifecycle (taking, waiting, handing on, renewing, losing) is the lease engine's
(``engine.py``); a lock holds one over a ``Mutex`` or ``Reentrant`` kind and brings its
``acquire`` and the by-holder calls the compat layers need.
"""

from __future__ import annotations

from typing import Never

from .._core.kinds import Mutex, Reentrant
from .._core.lease import LOCK_WORDS
from .._core.options import DEFAULT, LeaseOptions
from .._core.replies import RENEWED
from .._keys import MIN_LEASE, validate_ttl
from ..errors import LockError
from .engine import Lease, Wiring
from .leased import LeaseFacade, keyword_only

MUTEX = Mutex()
BARGING = Mutex(fair=False)
REENTRANT = Reentrant()


class Lock(LeaseFacade):
    """``LockClient.lock(name)``: acquire/release/extend, ``with``, ``token``, ``lost``,
    ``check()``, ``held()``; a grant belongs to the object, whichever task or thread took it."""

    __slots__ = ("reentrant",)

    def __init__(
        self, wiring: Wiring, options: LeaseOptions, *, reentrant: bool, fair: bool
    ) -> None:
        self.reentrant = reentrant
        kind = REENTRANT if reentrant else MUTEX if fair else BARGING
        self._lease = Lease(self, wiring, options, wiring.spec(kind, options, LOCK_WORDS))

    @property
    def label(self) -> object:
        """The holder label stored with each grant (a str, a callable run at each acquire, or
        None)."""
        return self._lease.options.label

    def acquire(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Take the lock. ``timeout``: None waits forever, 0 tries once, > 0 waits that long
        (default: the lock's own). Returns whether the lock was acquired."""
        keyword_only("acquire", args, "timeout=")
        return self._lease.acquire(timeout=timeout)

    # -- for adapters that name grants by holder token (fencelock.compat) --------------------

    @property
    def holder(self) -> str | None:
        """The holder token of the current grant (None: none). It releases the lock: keep it
        as secret as the lock itself."""
        grant = self._lease.grant()
        return None if grant is None else grant.holder

    def held_by(self, holder: str) -> bool:
        """Whether the server shows the grant of ``holder`` (a holder token) holding the lock."""
        return self._lease.held_by(holder)

    def release_by(self, holder: str) -> bool:
        """Release the grant of ``holder``, made by another lock object; False if it has none."""
        return self._lease.release_by(holder)

    def extend_by(self, holder: str, ttl: float) -> bool:
        """Reset the lease of ``holder``'s grant to ``ttl`` seconds; False if it has none."""
        held = self._lease.renew_by(holder, validate_ttl(ttl, minimum=MIN_LEASE))
        if isinstance(held, LockError):
            raise held
        return held == RENEWED
