"""python-redis-lock's ``Lock`` on fencelock: ``from fencelock.compat.redis_lock import Lock`` in
place of ``from redis_lock import Lock``. The same constructor, methods and exceptions (each also
fencelock's matching one where there is one); what differs on purpose: docs/migrating.md.

Underneath, as for ``fencelock.compat.redis_py``: one fencelock lock per ``Lock`` object, on the
fencelock client of the application's redis client (``redis_py.client_for``), so no BLPOP on a
signal list, no renewal thread per lock, and a fencing token per grant (``fencing_token``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType

import redis

from .. import errors
from .._core.replies import lock_value
from .._keys import LockKeys, validate_name
from .._sync.lock import Lock as _FencelockLock
from ._redis_py_errors import LockConnectionError
from ._sync.redis_py import RENEWED_LEASE, client_for

__all__ = [
    "AlreadyAcquired",
    "AlreadyStarted",
    "InvalidTimeout",
    "Lock",
    "LockConnectionError",
    "NotAcquired",
    "NotExpirable",
    "TimeoutNotUsable",
    "TimeoutTooLarge",
    "reset_all",
]


class AlreadyAcquired(RuntimeError, errors.LockError):
    pass


class NotAcquired(RuntimeError, errors.LockNotOwned):
    pass


class AlreadyStarted(RuntimeError):
    """Kept for ``except`` clauses: fencelock has no renewal thread per lock to start twice."""


class TimeoutNotUsable(RuntimeError):
    pass


class InvalidTimeout(RuntimeError):
    pass


class TimeoutTooLarge(RuntimeError):
    pass


class NotExpirable(RuntimeError):
    pass


@contextlib.contextmanager
def _translated(name: str) -> Iterator[None]:
    """fencelock's errors as python-redis-lock's (a server that cannot be reached: redis-py's
    ``ConnectionError``, as python-redis-lock lets it through)."""
    try:
        yield
    except errors.LockNotOwned as exc:
        raise NotAcquired(f"Lock({name}) is not acquired or it already expired.") from exc
    except errors.LockConnectionError as exc:
        raise LockConnectionError(str(exc)) from exc


class Lock:
    """python-redis-lock's ``Lock(redis_client, name, expire=None, id=None, ...)``. ``expire``:
    the lease in whole seconds (None: a lease of ``RENEWED_LEASE`` renewed while held);
    ``auto_renewal`` renews it while held; ``signal_expire`` is accepted and unused (a release
    wakes the waiters by pub/sub, not by a list). ``id``: a holder token from elsewhere, to
    release or extend that grant (an acquire makes its own)."""

    def __init__(
        self,
        redis_client: redis.Redis,
        name: str,
        expire: float | None = None,
        id: str | bytes | None = None,
        auto_renewal: bool = False,
        strict: bool = True,
        signal_expire: int = 1000,
        blocking: bool = True,
    ) -> None:
        if strict and not isinstance(redis_client, redis.StrictRedis):
            raise ValueError(
                "redis_client must be instance of StrictRedis. "
                "Use strict=False if you know what you're doing."
            )
        if auto_renewal and expire is None:
            raise ValueError("Expire may not be None when auto_renewal is set")
        if expire:
            expire = int(expire)
            if expire < 0:
                raise ValueError("A negative expire is not acceptable.")
        else:
            expire = None
        if isinstance(id, bytes):
            id = id.decode("ascii", "replace")
        elif id is not None and not isinstance(id, str):
            raise TypeError(f"Incorrect type for `id`. Must be bytes/str not {type(id)}.")
        self._client = redis_client
        self._name = validate_name(name)
        self._expire = expire
        self._signal_expire = signal_expire
        self._auto_renewal = bool(auto_renewal)
        self.blocking = blocking
        self._id = id
        self._made: _FencelockLock | None = None

    @property
    def _lock(self) -> _FencelockLock:
        """The fencelock lock behind this object, made at the first call that needs the server
        (python-redis-lock's constructor sends nothing either). One grant at a time: the object
        is the holder."""
        if self._made is None:
            ttl = RENEWED_LEASE if self._expire is None else float(self._expire)
            auto_renew = self._expire is None or self._auto_renewal
            self._made = client_for(self._client).lock(self._name, ttl, auto_renew=auto_renew)
        return self._made

    def _holder(self) -> str | None:
        """The holder token of this object's grant (None: none)."""
        return None if self._made is None else self._made.holder

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} expire={self._expire}>"

    @property
    def id(self) -> str | None:
        """The holder token: of this object's grant once acquired, else the ``id`` given (else
        None: fencelock makes the token when it grants the lock)."""
        holder = self._holder()
        return holder if holder is not None else self._id

    @property
    def fencing_token(self) -> int:
        """The fencing token of this object's grant (larger with every grant of the name)."""
        with _translated(self._name):
            return self._lock.token

    def get_owner_id(self) -> str | None:
        """The holder token of whoever holds the lock now (None: nobody)."""
        owner = self._client.get(LockKeys.for_name(self._name).lock)
        return None if owner is None else lock_value(owner)[0]

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; True once taken. ``timeout``: the longest wait in seconds (None or 0:
        for ever, as python-redis-lock's BLPOP takes 0)."""
        if (self._holder() is not None and not self._lock.lost) or self._held_by_id():
            raise AlreadyAcquired("Already acquired from this Lock instance.")
        if not blocking and timeout is not None:
            raise TimeoutNotUsable("Timeout cannot be used if blocking=False")
        if timeout:
            timeout = float(timeout)  # python-redis-lock takes "10" too (and int()s it)
            if timeout < 0:
                raise InvalidTimeout(f"Timeout ({timeout}) cannot be less than or equal to 0")
            if self._expire and not self._auto_renewal and timeout > self._expire:
                raise TimeoutTooLarge(
                    f"Timeout ({timeout}) cannot be greater than expire ({self._expire})"
                )
        wait = (timeout or None) if blocking else 0
        with _translated(self._name):
            return self._lock.acquire(timeout=wait)

    def extend(self, expire: float | None = None) -> None:
        """Reset the lease to ``expire`` seconds (default: the lock's ``expire``)."""
        if expire:
            expire = int(expire)
            if expire < 0:
                raise ValueError("A negative expire is not acceptable.")
        elif self._expire is not None:
            expire = self._expire
        else:
            raise TypeError(
                "To extend a lock 'expire' must be provided as an argument to extend() method "
                "or at initialization time."
            )
        if self._holder() is not None:
            if self._expire is None:  # renewed while held: python-redis-lock's has no TTL
                raise NotExpirable(f"Lock {self._name} has no assigned expiration time")
            with _translated(self._name):
                self._lock.extend(float(expire))
            return
        if self._id is None or not self._renewed_by_id(self._id, float(expire)):
            raise NotAcquired(f"Lock {self._name} is not acquired or it already expired.")

    def _held_by_id(self) -> bool:
        """Whether the ``id`` given holds the lock (a grant made elsewhere: an acquire would
        wait for itself)."""
        if self._id is None or self._holder() is not None:
            return False
        with _translated(self._name):
            return self._lock.held_by(self._id)

    def _renewed_by_id(self, holder: str, expire: float) -> bool:
        """Reset the lease of a grant made elsewhere, named by its holder token, to ``expire``
        seconds; False if that token does not hold the lock."""
        with _translated(self._name):
            return self._lock.extend_by(holder, expire)

    def release(self) -> None:
        """Give the lock up: ``NotAcquired`` if this object (or the ``id`` given) does not hold
        it, or its lease expired."""
        with _translated(self._name):
            if self._holder() is not None:
                self._lock.release()
                return
            # a grant made elsewhere, named by its holder token
            if self._id is not None and self._lock.release_by(self._id):
                return
        raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")

    def locked(self) -> bool:
        """Whether anyone holds the lock now."""
        with _translated(self._name):
            return client_for(self._client).inspect(self._name) is not None

    def reset(self) -> None:
        """Forcibly release the lock, whoever holds it (fencelock's ``force_release``: the
        waiters are woken, and the next grant's fencing token fences the old holder out)."""
        with _translated(self._name):
            client_for(self._client).force_release(self._name)

    def __enter__(self) -> Lock:
        if not self.acquire(blocking=self.blocking):
            if self.blocking:
                raise AssertionError(
                    f"Lock({self._name}) wasn't acquired, but blocking=True was used!"
                )
            raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.release()


def reset_all(redis_client: redis.Redis) -> None:
    """Forcibly release every fencelock lock on the server of ``redis_client`` (python-redis-lock
    deletes its ``lock:*`` keys)."""
    client = client_for(redis_client)
    with _translated("*"):
        for info in client.locks():
            client.force_release(info.name)
