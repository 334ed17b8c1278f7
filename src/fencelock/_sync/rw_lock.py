# GENERATED from src/fencelock/_async/rw_lock.py by tools/gen_sync.py: edit that file instead.
"""A read-write lock, phase-fair: readers share, writers exclude, and arrival order is kept.

Its two sides are lease engines over one pool of ``WRITE_PERMITS`` permits on keys of its own
(``Permits.rw_side``): a reader takes one permit, a writer all of them. The semaphore's first
come, first served queue gives the phase-fair order:

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

from typing import Never

from .._backend import sync_public_name
from .._core.kinds import WRITE_PERMITS, Permits
from .._core.lease import EXPLAINED, Words
from .._core.options import DEFAULT, LeaseOptions
from .._scripts import RW_DOWNGRADE
from ..errors import LockLost
from .engine import Lease, Wiring, refuse_unmade
from .leased import LeaseFacade, keyword_only

READ = Permits.rw_side(1)
WRITE = Permits.rw_side(WRITE_PERMITS)
WORDS = Words("side of the read-write lock", holding="held by this side")


class ReadWriteLock:
    """``LockClient.rw_lock(name)``: ``read()`` and ``write()`` make the lock objects."""

    def __init__(self, wiring: Wiring, options: LeaseOptions) -> None:
        refuse_unmade(wiring, READ, WORDS, options.name)
        self._wiring = wiring
        self._options = options
        self.name = options.name

    def __repr__(self) -> str:
        public = sync_public_name(self)
        return f"<{public} {self.name!r}>"

    def read(self) -> RWSide:
        """A reader's lock object: shares the name with other readers."""
        return RWSide(self._wiring, self._options, writer=False)

    def write(self) -> RWSide:
        """A writer's lock object: excludes readers and writers."""
        return RWSide(self._wiring, self._options, writer=True)


class RWSide(LeaseFacade):
    """One side of a read-write lock: a lock object (with, acquire, release, token, lost...)."""

    __slots__ = ("writer",)

    def __init__(self, wiring: Wiring, options: LeaseOptions, *, writer: bool) -> None:
        # whether this is the write side (even while it holds a downgraded grant)
        self.writer = writer
        spec = wiring.spec(WRITE if writer else READ, options, WORDS)
        self._lease = Lease(self, wiring, options, spec)

    def __repr__(self) -> str:
        side = "write" if self.writer else "read"
        public = sync_public_name(self)
        return f"<{public} {self.name!r} {side} ttl={self.ttl}>"

    def acquire(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Take this side of the lock. ``timeout``: None waits forever, 0 tries once, > 0
        waits that long (default: the read-write lock's own)."""
        keyword_only("acquire", args, "timeout=")
        if self._lease.grant() is None:  # (a downgraded writer takes the write side again)
            self._lease.use_kind(WRITE if self.writer else READ)
        return self._lease.acquire(timeout=timeout)

    def downgrade(self) -> None:
        """Turn this writer's grant into a reader's, atomically: readers queued up to the next
        writer are granted at once, and no writer can come in between. The lease and the
        fencing token stay; ``release()`` then gives back the read permit, and the next
        ``acquire()`` of this object takes the write side again. ``LockLost`` if the lease had
        ended; ``TypeError`` on a read side or a grant already downgraded."""
        lease = self._lease
        grant = lease.owned_grant("downgrade")
        if lease.spec.kind != WRITE:
            raise TypeError(f"{self!r} holds a read grant: only a write grant can be downgraded")
        spec = lease.spec
        args = (grant.holder, spec.keys.channel, lease.publish_command)
        if lease.run(RW_DOWNGRADE, spec.release_keys, args) == 0:
            why = lease.declare_lost(grant, "at downgrade")
            raise LockLost(f"cannot downgrade {spec.what}: {EXPLAINED[why]}")
        lease.use_kind(READ)
