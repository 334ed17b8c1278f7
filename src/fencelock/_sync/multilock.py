# GENERATED from src/fencelock/_async/multilock.py by tools/gen_sync.py: edit that file instead.
"""A multi-lock: several names held together, all or none, with no deadlock between callers.

It composes the lock (lock.py): one lock object per name, each with its own lease, holder token,
fencing token, watchdog renewal and loss signal. What it adds:

* canonical order: the names are deduplicated and sorted, and always taken in that order,
  whatever order the caller gave. Two multi-locks wanting overlapping names therefore wait for
  each other on the *first* name they share, never on each other's later names, so no cycle of
  waits (a deadlock) can form, on one server, across Cluster slots or with Redlock alike;
* all or none: the names are taken one by one within one shared deadline; if one cannot be had
  in time, or the caller is cancelled or an error arrives, those already taken are released
  (shielded from cancellation) before ``acquire`` returns False or raises. Only this object's
  own grants are ever released.

Between the first grant and the last, a reader may see some names held and not others: that is
a wait, never a hold (the multi-lock's work starts only once all are held).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import replace
from types import TracebackType
from typing import Never

from .._backend import sync_call_scope, sync_cancelled, sync_shield
from .._core.options import DEFAULT, LeaseOptions
from .._keys import validate_name
from ..errors import LockError, LockLost, LockNotOwned, LockTimeout
from .engine import Wiring
from .leased import keyword_only
from .lock import Lock


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
    def __init__(self, wiring: Wiring, names: tuple[str, ...], options: LeaseOptions) -> None:
        self.names = names  # (canonical_names: sorted, deduplicated)
        self._options = options
        self._locks: tuple[Lock, ...] = tuple(
            Lock(wiring, replace(options, name=name), reentrant=False) for name in names
        )
        self._holding = False
        self._detached = wiring.topology.detached

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
        return f"<{type(self).__name__} {list(self.names)!r} ttl={self.ttl}>"

    @property
    def locks(self) -> tuple[Lock, ...]:
        """The lock of each name, in canonical order."""
        return self._locks

    def acquire(self, *args: Never, timeout: float | object | None = DEFAULT) -> bool:
        """Take every name, all or none, in canonical order (sorted, deduplicated: never the
        caller's order, so two multi-locks cannot deadlock). ``timeout``: None waits forever,
        0 tries each name once, > 0 is one deadline shared by all the names (a name reached
        after it is still tried once: the call is bounded by the deadline plus one request per
        name) (default: the multi-lock's own timeout). Returns whether all were acquired; on
        False, on an error or on cancellation the names already taken have been released."""
        keyword_only("acquire", args, "timeout=")
        wait = self._options.wait(timeout)
        if self._holding:
            raise LockError(f"{list(self.names)!r} are already held by this multi-lock")
        deadline = None if wait is None else time.monotonic() + wait
        taken: list[Lock] = []
        with sync_call_scope():
            try:
                for lock in self._locks:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not lock.acquire(timeout=left):
                        break
                    taken.append(lock)
            except BaseException as error:
                # (a release that fails too leaves a lease that ends by itself: the error to
                # see, a cancellation above all, is the one that stopped the acquire; a
                # cancelled caller gets control back at once, the releases go on meanwhile)
                releasing = _release_quietly(taken)
                if sync_cancelled(error):
                    self._detached.add(releasing)
                else:
                    sync_shield(releasing)
                raise
            if len(taken) < len(self._locks):
                sync_shield(_release_all(taken))
                return False
        self._holding = True
        return True

    def release(self) -> None:
        """Release every name (in reverse order). ``LockNotOwned`` if this multi-lock does not
        hold them; ``LockLost`` (after releasing all the others) if any lease was lost."""
        if not self._holding:
            raise LockNotOwned(
                f"cannot release {list(self.names)!r}: this multi-lock does not hold them"
            )
        self._holding = False
        with sync_call_scope():
            lost = sync_shield(_release_all(self._locks))
        if lost:
            raise LockLost(f"{lost!r} were no longer held when released")

    @property
    def tokens(self) -> dict[str, int]:
        """The fencing token of each name's grant."""
        self._owned("read the tokens of")
        return {lock.name: lock.token for lock in self._locks}

    @property
    def lost(self) -> bool:
        """True once any name's lease is known, or must be assumed, lost."""
        return self._holding and any(lock.lost for lock in self._locks)

    def check(self) -> None:
        """Return if every lease is still certainly held, else raise ``LockLost``. Local and
        instant: no request to the server."""
        self._owned("check")
        for lock in self._locks:
            lock.check()

    def held(self) -> bool:
        """Whether every name is still held (asks the server, one request per name)."""
        if not self._holding:
            return False
        for lock in self._locks:
            if not lock.held():
                return False
        return True

    def _owned(self, action: str) -> None:
        if not self._holding:
            raise LockNotOwned(f"cannot {action} {list(self.names)!r}: not held by this multi-lock")

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
        if not self._holding:
            return  # released inside the block
        try:
            self.release()
        except LockLost as loss:
            if exc is None:
                raise
            exc.add_note(f"fencelock: {loss}")  # the body's own error is the one to see


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
