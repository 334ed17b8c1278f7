"""redis-py's ``Lock`` on fencelock: ``from fencelock.compat.redis_py import Lock`` in place of
``from redis.lock import Lock``, ``lock(r, name, ...)`` in place of ``r.lock(name, ...)`` (or
``r.lock(name, lock_class=Lock)``). The same constructor, methods and exceptions; what differs
on purpose: docs/migrating.md. asyncio: ``fencelock.compat.redis_py_asyncio``."""

from __future__ import annotations

from typing import Any

import redis

from .._keys import validate_ttl
from ._redis_py_errors import (
    LockConnectionError,
    LockError,
    LockLostError,
    LockNotOwnedError,
    LockTimeoutError,
)
from ._sync.redis_py import RENEWED_LEASE, SyncRedisPyLock, client_for, close_client

__all__ = [
    "RENEWED_LEASE",
    "Lock",
    "LockConnectionError",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "LockTimeoutError",
    "client_for",
    "close_client",
    "lock",
]


class Lock(SyncRedisPyLock):
    __doc__ = SyncRedisPyLock.__doc__

    def acquire(  # type: ignore[override]  # redis-py's sync order: sleep first
        self,
        sleep: float | None = None,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: str | bytes | None = None,
    ) -> bool:
        """redis-py's ``acquire(sleep, blocking, blocking_timeout, token)``: ``sleep`` is
        accepted and unused (a release wakes the waiters), the rest as
        ``SyncRedisPyLock.acquire``."""
        if sleep is not None:
            validate_ttl(sleep, "sleep", minimum=0.0)
        return super().acquire(blocking, blocking_timeout, token)


def lock(
    redis: redis.Redis | redis.RedisCluster,
    name: str,
    timeout: float | None = None,
    sleep: float = 0.1,
    blocking: bool = True,
    blocking_timeout: float | None = None,
    lock_class: Any = None,
    thread_local: bool = True,
    raise_on_release_error: bool = True,
) -> Any:
    """``redis.lock(name, ...)``, made by fencelock: a ``Lock`` (or ``lock_class``)."""
    return (lock_class or Lock)(
        redis,
        name,
        timeout=timeout,
        sleep=sleep,
        blocking=blocking,
        blocking_timeout=blocking_timeout,
        thread_local=thread_local,
        raise_on_release_error=raise_on_release_error,
    )
