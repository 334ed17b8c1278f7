# GENERATED from src/fencelock/_async/semaphore.py by tools/gen_sync.py: edit that file instead.
"""A semaphore: at most ``limit`` permits of a name held at once, across processes.

It holds a lease engine over a ``Permits`` kind (_scripts/semaphore*.lua): the lifecycle, the
waits, the watchdog, the loss signals and the fencing tokens are the engine's. What differs:

* a permit is a holder entry with its own lease in a sorted set scored by its end on the
  server's clock; a crashed holder's permits come back when the lease ends, taken back inside
  every script of the semaphore (no sweeper);
* ``acquire(permits=n)`` takes n permits at once, all or none; waiters are served first come,
  first served (a queued waiter is never passed, so a large request is not starved by small
  ones);
* the limit is stored with the semaphore: the first acquire stores the one given, and
  ``set_limit`` changes it for every client (see ``set_limit`` for holders above a lowered
  limit);
* each semaphore object holds one grant (of n permits) at a time, like a lock object; permits
  are not handed between the objects of a client.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial, wraps
from typing import Any, Never, TypeVar, cast

from .._backend import sync_public_name
from .._core.inspection import LockInfo, SemaphoreState, permits_info, semaphore_state
from .._core.kinds import WRITE_PERMITS, Permits
from .._core.lease import Words
from .._core.options import DEFAULT, LeaseOptions
from .._keys import SemaphoreKeys
from .._scripts import SEMAPHORE_LIMIT, SEMAPHORE_STATE
from . import admin
from .engine import Lease, Wiring
from .leased import LeaseFacade, keyword_only
from .topology import SyncTopology

_F = TypeVar("_F", bound=Callable[..., Any])


def validate_permits(arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be an int, not {type(value).__name__}")
    if not 1 <= value <= 2**31:
        raise ValueError(f"{arg} must be from 1 to 2**31, got {value}")
    return value


WORDS = Words("semaphore")


class Semaphore(LeaseFacade):
    """At most ``limit`` permits of a name held at once (``LockClient.semaphore``)."""

    __slots__ = ("limit",)

    def __init__(self, wiring: Wiring, options: LeaseOptions, limit: int) -> None:
        self.limit = validate_permits("limit", limit)
        kind = Permits.semaphore(1, self.limit)
        spec = wiring.spec(kind, options, WORDS)
        self._lease = Lease(self, wiring, options, spec)

    def __repr__(self) -> str:
        public = sync_public_name(self)
        return f"<{public} {self.name!r} limit={self.limit} ttl={self.ttl}>"

    def acquire(
        self, *args: Never, permits: int = 1, timeout: float | object | None = DEFAULT
    ) -> bool:
        """Take ``permits`` permits, all or none. ``timeout``: None waits forever, 0 tries
        once, > 0 waits that long (default: the semaphore's own). ``LockError`` when more are
        asked than the stored limit can ever give."""
        keyword_only("acquire", args, "permits=, timeout=")
        permits = validate_permits("permits", permits)
        if self._lease.grant() is None:
            self._lease.use_kind(Permits.semaphore(permits, self.limit))
        return self._lease.acquire(timeout=timeout)

    @property
    def permits(self) -> int:
        """The permits the current (or last) grant asked for."""
        kind = self._lease.spec.kind
        assert isinstance(kind, Permits)
        return kind.take

    def state(self) -> SemaphoreState:
        """The stored limit, the permits held and by whom (one read)."""
        return read_state(self._lease)

    def holders(self) -> dict[tuple[str, str | None], int]:
        """Who holds permits now: (holder id, label) -> permits. The id is a digest of the
        holder token, as ``inspect`` shows it (the token itself would let anyone release the
        permits)."""
        return {(h.holder, h.label): h.permits for h in (self.state()).holders}

    def available(self) -> int:
        """Permits free now (the stored limit, or this object's if none is stored yet, less
        those held)."""
        state = self.state()
        return max(0, (state.limit or self.limit) - state.used)

    def set_limit(self, limit: int) -> None:
        """Store a new limit for every client of the semaphore. Raised, the queued waiters
        that now fit are granted at once; lowered, holders above it keep their permits until
        they release them (or their leases end), and nobody is granted until the permits held
        are under the new limit."""
        limit = validate_permits("limit", limit)
        lease = self._lease
        spec = lease.spec
        args = (limit, spec.keys.channel, lease.publish_command)
        lease.run(SEMAPHORE_LIMIT, spec.release_keys, args)
        self.limit = limit


def read_state(lease: Lease) -> SemaphoreState:
    """What the server shows of the semaphore (or read-write lock) of ``lease``."""
    keys = lease.spec.keys
    assert isinstance(keys, SemaphoreKeys)
    names = (keys.lock, keys.state, keys.fence, keys.queue)
    return semaphore_state(lease.read(SEMAPHORE_STATE, names))


def state_of(topology: SyncTopology, keys: SemaphoreKeys, what: str) -> SemaphoreState:
    """The semaphore (or read-write lock) at ``keys`` as the server shows it: one read-only
    script, sent without WAIT, within one request timeout."""
    names = (keys.lock, keys.state, keys.fence, keys.queue)
    [reply] = topology.run_all(SEMAPHORE_STATE, names, (), what, read=True)
    if isinstance(reply, Exception):
        raise reply
    return semaphore_state(reply)


def at_most(
    semaphore: Callable[..., Semaphore],
    limit: int,
    name: str,
    ttl: float,
    timeout: float | None,
) -> Callable[[_F], _F]:
    """``client.at_most``'s decorator: each run holds a permit of a semaphore made by
    ``semaphore`` (the client's factory), renewed while it runs."""

    def decorate(fn: _F) -> _F:
        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with semaphore(name, limit, ttl, timeout=timeout, auto_renew=True):
                return fn(*args, **kwargs)

        return cast(_F, run)

    return decorate


def _listed(topology: SyncTopology, prefix: str, name: str, family: str) -> LockInfo | None:
    """A semaphore ("sem") or read-write lock ("rw") of ``name`` as the operators see it."""
    keys = SemaphoreKeys.for_semaphore(name, prefix, family)
    noun = "semaphore" if family == "sem" else "read-write lock"
    state = state_of(topology, keys, f"{noun} {name!r}")
    return permits_info(name, family, state, WRITE_PERMITS)


for _family in ("sem", "rw"):
    admin.register(admin.View(_family, Permits(), partial(_listed, family=_family)))
