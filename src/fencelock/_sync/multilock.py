# GENERATED from src/fencelock/_async/multilock.py by tools/gen_sync.py: edit that file instead.
"""A multi-lock: several names held together, all or none, with no deadlock between callers.

Where its names share a server (one master, also under Sentinel, or one slot of a Cluster) it is
one lease of the engine over an ``AllOf`` kind (``_core/kinds.py``): one script takes every name
or none, with one holder token and a fencing token per name; one script releases them all and
serves each name's waiters, as a lock's release does; the watchdog renews every key of it;
``held()`` reads them all in one request. Busy, it queues on the name it found busy and re-tries
the whole set when that name is released (scripts/multi_acquire.lua). Holding nothing while it
waits, it can neither deadlock nor keep another caller waiting for a name it does not use yet.

It takes no turn in the local queues of its names (singleflight.py), and need not. A local queue
lines up the lock objects of this client that share one name's grant, under one holder token in
Redis, so that only its head asks Redis and a grant can pass from one to the next without it.
The multi-lock's grant is a holder token of its own on every name, so Redis alone decides
between it and everyone else, this client's locks included: a plain lock holding a name, or
handing it on locally, keeps the multi-lock out (the key holds that lock's token), and the
multi-lock holding a name keeps the queue's head out just as it keeps another client out, until
its release serves the name's queue in Redis, where that head waits. Exclusion never rested on
the local queue; what the multi-lock forgoes is waiting behind those locks without a request
(it re-tries when woken, as another client does) and a local hand-off to or from them, which a
grant of one name could not give anyway. Its own concurrent acquires wait in a queue of its own.

Elsewhere (a Cluster whose names fall in several slots, where one script cannot reach them all,
and Redlock) it composes one lock per name, each with its own lease, holder token and fencing
token:

* canonical order: the names are deduplicated and sorted, and always taken in that order,
  whatever order the caller gave. Two multi-locks wanting overlapping names therefore wait for
  each other on the *first* name they share, never on each other's later names, so no cycle of
  waits (a deadlock) can form;
* all or none: the names are taken one by one within one shared deadline; if one cannot be had
  in time, or the caller is cancelled or an error arrives, those already taken are released
  (shielded from cancellation) before ``acquire`` returns False or raises. Only this object's
  own grants are ever released. Between the first grant and the last, a reader may see some
  names held and not others: that is a wait, never a hold.

Either way ``on_lost`` is called with the multi-lock (composed: once per name lost).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import TracebackType
from typing import Any, Never

from .._backend import sync_call_scope, sync_public_name, sync_shield
from .._core.kinds import AllOf
from .._core.lease import Words
from .._core.options import DEFAULT, LeaseOptions
from .._keys import validate_name
from ..errors import LockError, LockLost, LockNotOwned, LockTimeout
from .engine import Lease, Wiring, clean_up, fits_one_lease
from .leased import end_lost_block, keyword_only
from .lock import Lock

WORDS = Words("multi-lock")


def canonical_names(names: Iterable[str]) -> tuple[str, ...]:
    """The order every multi-lock takes its names in: deduplicated and sorted."""
    if isinstance(names, (str, bytes)):
        raise TypeError("names must be an iterable of names, not a single str")
    try:
        given = list(names)
    except TypeError:
        raise TypeError(f"names must be an iterable of str, not {type(names).__name__}") from None
    if not given:
        raise ValueError("names must name at least one lock")
    return tuple(sorted({validate_name(name) for name in given}))


class MultiLock:
    """``LockClient.multi_lock(names)``: acquire/release, ``with``, ``tokens``, ``lost``,
    ``check()``, ``held()`` over all its names at once."""

    __slots__ = ("__weakref__", "_options", "_way", "names")

    def __init__(self, wiring: Wiring, names: tuple[str, ...], options: LeaseOptions) -> None:
        self.names = names  # (canonical_names: sorted, deduplicated)
        self._options = options
        kind = AllOf(names=names)
        spec = wiring.spec(kind, options, WORDS)
        self._way: _OneScript | _Composed
        if fits_one_lease(wiring, kind, spec.renewed_keys):
            self._way = _OneScript(Lease(self, wiring, options, spec), names)
        else:
            self._way = _Composed(wiring, names, options, weakref.ref(self))

    @property
    def ttl(self) -> float:
        return self._options.ttl

    @property
    def timeout(self) -> float | None:
        return self._options.timeout

    @property
    def auto_renew(self) -> bool:
        return self._options.auto_renew

    def __repr__(self) -> str:
        public = sync_public_name(self)
        return f"<{public} {list(self.names)!r} ttl={self.ttl}>"

    def acquire(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Take every name, all or none (in canonical order, sorted and deduplicated: never the
        caller's, so two multi-locks cannot deadlock). ``timeout``: None waits forever, 0 tries
        once, > 0 is one deadline for all the names (default: the multi-lock's own timeout).
        Returns whether all were acquired; on False, on an error or on cancellation nothing
        is left held."""
        keyword_only("acquire", args, "timeout=")
        return self._way.acquire(timeout)

    def release(self) -> None:
        """Release every name. ``LockNotOwned`` if this multi-lock does not hold them;
        ``LockLost`` (after releasing all the others) if any name's lease was lost."""
        self._way.release()

    @property
    def tokens(self) -> dict[str, int]:
        """The fencing token of each name's grant."""
        return self._way.tokens()

    @property
    def lost(self) -> bool:
        """True once any name's lease is known, or must be assumed, lost."""
        return self._way.lost

    def check(self) -> None:
        """Return if every lease is still certainly held, else raise ``LockLost``. Local and
        instant: no request to the server."""
        self._way.check()

    def remaining(self) -> float:
        """Seconds left of the first lease to end, by this process's clock (0: not held, or
        one lost): ``check()`` passes until then. Local and instant."""
        return self._way.remaining()

    def held(self) -> bool:
        """Whether every name is still held (asks the server: one request, or one per name
        where they do not share a server)."""
        return self._way.held()

    def __enter__(self) -> MultiLock:
        if not self.acquire():
            raise LockTimeout(f"{list(self.names)!r} not all acquired within {self.timeout} s")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._way.holding:
            return  # released inside the block
        try:
            self.release()
        except LockLost as loss:
            # as every block over a lost lease ends, by the one policy a multi-lock has
            end_lost_block(loss, exc, "raise", by_us=False)


class _OneScript:
    """A multi-lock as one lease over an ``AllOf`` kind (see the module's docstring)."""

    __slots__ = ("lease", "names")

    def __init__(self, lease: Lease, names: tuple[str, ...]) -> None:
        self.lease = lease
        self.names = names

    @property
    def holding(self) -> bool:
        return self.lease.grant() is not None

    def acquire(self, timeout: object) -> bool:
        return self.lease.acquire(timeout)

    def release(self) -> None:
        self.lease.release()

    def tokens(self) -> dict[str, int]:
        grant = self.lease.owned_grant("read the tokens of")
        return dict(zip(self.names, (grant.fence, *grant.more_fences), strict=True))

    @property
    def lost(self) -> bool:
        return self.lease.lost

    def check(self) -> None:
        self.lease.check()

    def remaining(self) -> float:
        return self.lease.remaining()

    def held(self) -> bool:
        return self.lease.held()


class _Composed:
    """A multi-lock as one lock per name (see the module's docstring)."""

    __slots__ = ("holding", "locks", "names", "options", "wiring")

    def __init__(
        self,
        wiring: Wiring,
        names: tuple[str, ...],
        options: LeaseOptions,
        multi: weakref.ref[MultiLock],
    ) -> None:
        self.names = names
        self.options = options
        on_lost = options.on_lost
        if on_lost is not None:
            options = replace(options, on_lost=_for_multi(on_lost, multi))
        self.locks = tuple(
            Lock(wiring, replace(options, name=name), reentrant=False, fair=True)
            for name in names
        )
        self.holding = False
        self.wiring = wiring  # (no lease of its own: one per lock)

    def acquire(self, timeout: object) -> bool:
        wait = self.options.wait(timeout)
        if self.holding:
            raise LockError(f"{list(self.names)!r} are already held by this multi-lock")
        deadline = None if wait is None else time.monotonic() + wait
        taken: list[Lock] = []
        with sync_call_scope():
            try:
                for lock in self.locks:
                    # (a name reached after the deadline is still tried once: the call is
                    # bounded by the deadline plus one request per name)
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not lock.acquire(timeout=left):
                        break
                    taken.append(lock)
            except BaseException as error:
                # (a release that fails too leaves a lease that ends by itself: the error to
                # see, a cancellation above all, is the one that stopped the acquire; a
                # cancelled caller gets control back at once, the releases go on meanwhile)
                clean_up(self.wiring, _release_quietly(taken), error)
                raise
            if len(taken) < len(self.locks):
                sync_shield(_release_all(taken))
                return False
        self.holding = True
        return True

    def release(self) -> None:
        if not self.holding:
            raise LockNotOwned(
                f"cannot release {list(self.names)!r}: this multi-lock does not hold them"
            )
        self.holding = False
        with sync_call_scope():
            lost = sync_shield(_release_all(self.locks))
        if lost:
            raise LockLost(f"{lost!r} were no longer held when released")

    def tokens(self) -> dict[str, int]:
        self._owned("read the tokens of")
        return {lock.name: lock.token for lock in self.locks}

    @property
    def lost(self) -> bool:
        return self.holding and any(lock.lost for lock in self.locks)

    def check(self) -> None:
        self._owned("check")
        for lock in self.locks:
            lock.check()

    def remaining(self) -> float:
        if not self.holding:
            return 0.0
        return min(lock.remaining() for lock in self.locks)

    def held(self) -> bool:
        if not self.holding:
            return False
        for lock in self.locks:
            if not lock.held():
                return False
        return True

    def _owned(self, action: str) -> None:
        if not self.holding:
            raise LockNotOwned(f"cannot {action} {list(self.names)!r}: not held by this multi-lock")


def _for_multi(
    on_lost: Callable[[Any], object], multi: weakref.ref[MultiLock]
) -> Callable[[Any], object]:
    """A member lock's ``on_lost``: the user's, called with the multi-lock."""

    def lost(_: object) -> object:
        owner = multi()
        return None if owner is None else on_lost(owner)

    return lost


def _release_quietly(locks: Iterable[Lock]) -> None:
    with contextlib.suppress(Exception):
        _release_all(locks)


def _release_all(locks: Iterable[Lock]) -> list[str]:
    """Release every lock given, the last taken first, whatever fails on the way; the names
    found lost. Anything other than a loss is raised once all were tried."""
    lost: list[str] = []
    error: BaseException | None = None
    for lock in reversed(tuple(locks)):
        try:
            lock.release()
        except LockLost:
            lost.append(lock.name)
        except Exception as exc:  # (a server error: the lease still ends by itself)
            error = error or exc
    if error is not None:
        raise error
    return lost
