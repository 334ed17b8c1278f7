# GENERATED from src/fencelock/compat/_async/redis_py.py by tools/gen_sync.py: edit that file instead.
"""redis-py's ``Lock``, on fencelock: the asyncio source (``redis.asyncio.lock.Lock``'s API); the
sync twin, ``redis.lock.Lock``'s, is generated from it. The public modules are
``fencelock.compat.redis_py`` and ``fencelock.compat.redis_py_asyncio``; docs/migrating.md lists
what differs on purpose.

Each grant is a fencelock lock: Lua scripts, pub/sub wake-ups instead of polling, a fencing token
per grant, a lease even without ``timeout`` (then renewed automatically). The fencelock
``LockClient`` underneath is made once per application redis client, and closed when that client
is collected (every compat lock holds its redis client, so none is left by then).
"""

from __future__ import annotations

import logging
import threading
import weakref
from types import SimpleNamespace, TracebackType
from typing import Any, Literal

from ..._sync.client import LockClient
from ..._sync.lock import Lock
from ..._backend import sync_running_loop
from ..._keys import MIN_LEASE, described, validate_name, validate_timeout, validate_ttl
from ..._transport import SyncRedis, SyncRedisCluster
from .._redis_py_errors import LockError, LockNotOwnedError, LockTimeoutError, translated

# The lease of a lock made without ``timeout`` (redis-py: no expiry), renewed while it is held:
# a holder that dies frees it within this long instead of never.
RENEWED_LEASE = 30.0

logger = logging.getLogger("fencelock.compat")

# id of the application's redis client -> ours, with the event loop it serves
_clients: dict[int, tuple[object, LockClient]] = {}
_clients_guard = threading.Lock()


def _check(redis: object) -> None:
    if not isinstance(redis, SyncRedis | SyncRedisCluster):
        expected = SyncRedis.__module__ + ".Redis"
        raise TypeError(f"redis must be a {expected} or a RedisCluster, not {described(redis)}")


def client_for(redis: SyncRedis | SyncRedisCluster) -> LockClient:
    """The fencelock client that serves the compat locks of ``redis`` (made at the first call,
    closed when ``redis`` is collected or by ``close_client``), for its ``fenced_set`` and the
    like. asyncio: one per event loop (inside it), as ``redis`` may serve one loop after
    another (``asyncio.run`` twice); the client of a loop gone by is closed."""
    _check(redis)
    loop = sync_running_loop()
    with _clients_guard:
        made = _clients.get(id(redis))
        if made is not None and made[0] is loop:
            return made[1]
        client = LockClient(redis)
        _clients[id(redis)] = (loop, client)
        if made is None:
            weakref.finalize(redis, _retire, id(redis))
    if made is not None:
        made[1].retire()
    return client


def close_client(redis: SyncRedis | SyncRedisCluster) -> None:
    """Close the fencelock client of ``redis`` now rather than when ``redis`` is collected (with
    asyncio, before the event loop ends: a client collected after it leaves its sockets to the
    OS). A compat lock of ``redis`` used later makes a new one."""
    made = _clients.pop(id(redis), None)
    if made is not None and made[0] is sync_running_loop():
        made[1].close()
    elif made is not None:  # a loop gone by: its connections cannot be closed from this one
        made[1].retire()


def _retire(key: int) -> None:
    # a finalizer: it may run in any thread, even one inside client_for (so no guard here)
    made = _clients.pop(key, None)
    if made is not None:
        made[1].retire()


class _ThreadToken(threading.local):
    # a class attribute: every thread starts without a token (redis-py's plain threading.local
    # raises AttributeError in a thread other than the lock's creator until it acquires)
    token: bytes | None = None


class SyncRedisPyLock:
    """redis-py's ``Lock(redis, name, timeout=None, ...)`` on fencelock. ``timeout``: the lease
    in seconds (None: a lease of ``RENEWED_LEASE`` renewed while held); ``sleep`` is accepted
    and unused (a release wakes the waiters); ``blocking``, ``blocking_timeout``,
    ``thread_local`` and ``raise_on_release_error`` are redis-py's."""

    def __init__(
        self,
        redis: SyncRedis | SyncRedisCluster,
        name: str | bytes,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
    ) -> None:
        if isinstance(name, bytes):
            try:
                name = name.decode()
            except UnicodeDecodeError as exc:
                raise ValueError(f"name is not UTF-8: {exc.reason}") from None
        self.redis = redis
        self.name = validate_name(name)
        self.timeout = None if timeout is None else validate_ttl(timeout, "timeout", MIN_LEASE)
        self.sleep = validate_ttl(sleep, "sleep", minimum=0.0)
        self.blocking = bool(blocking)
        self.blocking_timeout = validate_timeout(blocking_timeout, "blocking_timeout")
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = bool(raise_on_release_error)
        # redis-py's: ``local.token`` is the holder token of this thread's grant (or of the
        # lock's, thread_local=False), as stored in Redis
        self.local: Any = _ThreadToken() if self.thread_local else SimpleNamespace(token=None)
        # the fencelock lock behind each holder token this object was granted (the latest per
        # thread: a token replaced by a later grant was no longer held)
        self._grants: dict[bytes, Lock] = {}
        _check(redis)  # (the fencelock client is made at the first call that needs it)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} timeout={self.timeout}>"

    def _client(self) -> LockClient:
        return client_for(self.redis)

    def _new_lock(self, wait: float | None) -> Lock:
        ttl = RENEWED_LEASE if self.timeout is None else self.timeout
        return self._client().lock(self.name, ttl, timeout=wait, auto_renew=self.timeout is None)

    # -- acquire ---------------------------------------------------------------------------

    def acquire(
        self,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: str | bytes | None = None,
    ) -> bool:
        """Take the lock; True once taken. ``blocking`` False: one try. ``blocking_timeout``:
        the longest wait in seconds (None: for ever); both default to the lock's own.
        ``token`` is not supported: fencelock makes each grant's holder token itself (read it
        from ``local.token``)."""
        if token is not None:
            raise TypeError(
                "token= is not supported: fencelock makes each grant's holder token "
                "(it is in lock.local.token once acquired)"
            )
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            wait = self.blocking_timeout
        else:
            wait = validate_timeout(blocking_timeout, "blocking_timeout")
        fencelock = self._new_lock(wait if blocking else 0)
        with translated(self.name):
            if not fencelock.acquire():
                return False
        holder = fencelock.holder
        assert holder is not None
        new = holder.encode()
        old, self.local.token = self.local.token, new
        self._grants.pop(old, None)  # (another grant since: that one was gone)
        self._grants[new] = fencelock
        return True

    # -- state -----------------------------------------------------------------------------

    def locked(self) -> bool:
        """Whether anyone holds the lock now (one request)."""
        with translated(self.name):
            return self._client().inspect(self.name) is not None

    def owned(self) -> bool:
        """Whether this lock (this thread's token) holds it now: asks the server; False once
        the lease is lost, whatever the server still shows."""
        token = self.local.token
        if token is None:
            return False
        fencelock = self._grants.get(token)
        with translated(self.name):
            if fencelock is not None:
                return fencelock.held()
            # a token set by hand (redis-py lets one thread release another's grant so)
            holder = _holder(token)
            if holder is None:
                return False
            return self._new_lock(0).held_by(holder)

    @property
    def fencing_token(self) -> int:
        """The fencing token of this thread's grant: larger with every grant of the name, for
        the fenced writes of ``client_for(redis)`` (``fenced_set``...)."""
        with translated(self.name):
            return self._held("read the fencing token of").token

    def _held(self, action: str) -> Lock:
        """The fencelock lock behind this thread's token."""
        token = self.local.token
        if token is None:
            # (redis-py's words; thread_local=True hides a grant from the other threads)
            hint = " by this thread (thread_local=True)" if self.thread_local else ""
            raise LockError(f"Cannot {action} an unlocked lock{hint}", lock_name=self.name)
        fencelock = self._grants.get(token)
        if fencelock is None:
            raise LockError(
                f"Cannot {action} a lock by a token this Lock object was not granted",
                lock_name=self.name,
            )
        return fencelock

    # -- release ---------------------------------------------------------------------------

    def release(self) -> None:
        """Give the lock up: ``LockError`` if this lock (thread) holds no token,
        ``LockNotOwnedError`` if the lease was lost meanwhile. The token is cleared either way."""
        expected_token = self.local.token
        if expected_token is None:
            raise LockError(
                "Cannot release a lock that's not owned or is already unlocked.",
                lock_name=self.name,
            )
        self.local.token = None
        self.do_release(expected_token)

    def do_release(self, expected_token: str | bytes) -> None:
        """Release the grant of ``expected_token`` (a holder token, as in ``local.token``)."""
        token = expected_token.encode() if isinstance(expected_token, str) else expected_token
        fencelock = self._grants.pop(token, None)
        with translated(self.name):
            if fencelock is not None:
                fencelock.release()
                return
            # not granted to this object: released by the token alone, as redis-py does
            holder = _holder(token)
            if holder is not None and self._new_lock(0).release_by(holder):
                return
        raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    # -- extend ----------------------------------------------------------------------------

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Literal[True]:
        """Add ``additional_time`` seconds to the lease left (``replace_ttl``: make the lease
        that long). ``LockError`` for a lock made without ``timeout`` (renewed already)."""
        self._held("extend")
        if self.timeout is None:
            raise LockError(
                "Cannot extend a lock with no timeout (its lease is renewed automatically)",
                lock_name=self.name,
            )
        return self.do_extend(additional_time, replace_ttl)

    def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        added = validate_ttl(additional_time, "additional_time", MIN_LEASE)
        fencelock = self._held("extend")
        ttl = added
        if not replace_ttl:
            # the lease left as this process counts it: never more than the server's, so the
            # result is at most what redis-py's PTTL-based addition gives
            ttl += fencelock.remaining()
        with translated(self.name):
            fencelock.extend(ttl)
        return True

    def reacquire(self) -> Literal[True]:
        """Reset the lease to ``timeout`` seconds."""
        self._held("reacquire")
        if self.timeout is None:
            raise LockError(
                "Cannot reacquire a lock with no timeout (its lease is renewed automatically)",
                lock_name=self.name,
            )
        return self.do_reacquire()

    def do_reacquire(self) -> Literal[True]:
        fencelock = self._held("reacquire")
        with translated(self.name):
            fencelock.extend(self.timeout)
        return True

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> SyncRedisPyLock:
        if self.acquire():
            return self
        raise LockTimeoutError(
            "Unable to acquire lock within the time specified", lock_name=self.name
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")


def _holder(token: bytes) -> str | None:
    """``token`` as a fencelock holder token (None: it cannot be one)."""
    try:
        return token.decode("ascii")
    except UnicodeDecodeError:
        return None
