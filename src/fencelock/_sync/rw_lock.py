# GENERATED from src/fencelock/_async/rw_lock.py by tools/gen_sync.py: edit that file instead.
"""A read-write lock, phase-fair: readers share, writers exclude, and arrival order is kept.

It is a semaphore (semaphore.py) of ``WRITE_PERMITS`` permits on keys of its own: a reader takes
one permit, a writer all of them. The semaphore's first come, first served queue gives the
phase-fair order:

* a reader that arrives while a writer waits queues behind it (writers are not starved);
* the readers queued behind a writer are admitted together when it releases: the first is
  woken, and each grant wakes the next while it fits, up to the next queued writer (readers
  are not starved either);
* every holder has its own lease: a reader that dies gives its permit back alone, at its
  lease's end;
* every grant, of either side, gets a fencing token larger than every earlier grant's.

A writer may downgrade to a reader (``downgrade()``): one script gives back all permits but one
and serves the queue, so no writer can slip in between. An upgrade (read -> write) is refused:
two readers upgrading at once would each wait for the other's read permit for ever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .._core.lease import EXPLAINED
from ..errors import LockLost
from ..keys import validate_name
from ..labels import Label
from ..scripts import RW_DOWNGRADE
from .lock import _DEFAULT, Lock, Parts, _Default
from .semaphore import Permits

WRITE_PERMITS: Final = 2**31  # a writer's share: every permit (a reader takes one)


class ReadWriteLock:
    """``LockClient.rw_lock(name)``: ``read()`` and ``write()`` make the lock objects."""

    def __init__(
        self,
        client: object,
        parts: Parts,
        name: str,
        ttl: float,
        *,
        timeout: float | None,
        auto_renew: bool,
        on_lost: Callable[[Lock], object] | None,
        on_lost_policy: str,
        label: Label | _Default,
    ) -> None:
        self.name = validate_name(name)
        self._make = lambda permits: RWSide(
            client,
            parts,
            self.name,
            ttl,
            permits,
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )
        self._make(1)  # the arguments are checked now, not at the first read()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def read(self) -> RWSide:
        """A reader's lock object: shares the name with other readers."""
        return self._make(1)

    def write(self) -> RWSide:
        """A writer's lock object: excludes readers and writers."""
        return self._make(WRITE_PERMITS)


class RWSide(Permits):
    """One side of a read-write lock: a lock object (with, acquire, release, token, lost...)."""

    _noun = "side of the read-write lock"

    def __init__(
        self,
        client: object,
        parts: Parts,
        name: str,
        ttl: float,
        permits: int,
        *,
        timeout: float | None,
        auto_renew: bool = False,
        on_lost: Callable[[Lock], object] | None = None,
        on_lost_policy: str = "raise",
        label: Label | _Default = _DEFAULT,
    ) -> None:
        super().__init__(
            client,
            parts,
            name,
            WRITE_PERMITS,
            ttl,
            kind="rw",
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            on_lost_policy=on_lost_policy,
            label=label,
        )
        self._side = permits  # (a downgraded grant holds 1; the next acquire takes this again)
        self._spec = self._spec_for(permits)

    def __repr__(self) -> str:
        side = "write" if self.writer else "read"
        return f"<{type(self).__name__} {self.name!r} {side} ttl={self.ttl}>"

    @property
    def writer(self) -> bool:
        """Whether this object is the write side (even while it holds a downgraded grant)."""
        return self._side == WRITE_PERMITS

    def acquire(  # type: ignore[override]  # (the side decides the permits)
        self, timeout: float | _Default | None = _DEFAULT
    ) -> bool:
        """Take this side of the lock; ``timeout`` as ``Lock.acquire``."""
        return super().acquire(self._side, timeout)

    def downgrade(self) -> None:
        """Turn this writer's grant into a reader's, atomically: readers queued up to the next
        writer are granted at once, and no writer can come in between. The lease and the
        fencing token stay; ``release()`` then gives back the read permit, and the next
        ``acquire()`` of this object takes the write side again. ``LockLost`` if the lease had
        ended; ``TypeError`` on a read side or a grant already downgraded."""
        grant = self._owned_grant("downgrade")
        if self._spec.permits != WRITE_PERMITS:
            raise TypeError(f"{self!r} holds a read grant: only a write grant can be downgraded")
        args = (grant.holder, self._spec.keys.channel, self._parts.topology.publish_command)
        if self._script(RW_DOWNGRADE, self._spec.release_keys, args) == 0:
            why = self._declare_lost(grant, "at downgrade")
            raise LockLost(f"cannot downgrade {self.name!r}: {EXPLAINED[why]}")
        self._spec = self._spec_for(1)
