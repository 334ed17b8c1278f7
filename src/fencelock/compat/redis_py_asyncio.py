"""``redis.asyncio``'s ``Lock`` on fencelock: ``from fencelock.compat.redis_py_asyncio import
Lock`` in place of ``from redis.asyncio.lock import Lock``, ``lock(r, name, ...)`` in place of
``r.lock(name, ...)``. What differs on purpose: docs/migrating.md."""

from __future__ import annotations

from typing import Any

import redis.asyncio

from ._async.redis_py import RENEWED_LEASE, AsyncRedisPyLock, client_for, close_client
from ._redis_py_errors import (
    LockConnectionError,
    LockError,
    LockLostError,
    LockNotOwnedError,
    LockTimeoutError,
)

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


class Lock(AsyncRedisPyLock):
    __doc__ = AsyncRedisPyLock.__doc__

    async def acquire(
        self,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: str | bytes | None = None,
    ) -> bool:
        """redis.asyncio's ``acquire(blocking, blocking_timeout, token)``: take the lock; True
        once taken. ``blocking`` False: one try. ``blocking_timeout``: the longest wait in
        seconds (None: for ever); both default to the lock's own. ``token`` is not supported:
        fencelock makes each grant's holder token itself (read it from ``local.token``)."""
        return await self._acquire(blocking, blocking_timeout, token)


def lock(
    redis: redis.asyncio.Redis | redis.asyncio.RedisCluster,
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
