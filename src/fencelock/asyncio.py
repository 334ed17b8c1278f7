"""The asyncio API: ``fencelock.asyncio.LockClient`` takes ``redis.asyncio`` clients."""

from ._async.client import AsyncLockClient as LockClient
from ._async.lock import AsyncLock as Lock
from ._core.stats import Statistics
from .errors import (
    LockConnectionError,
    LockError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    NotReplicated,
    StaleToken,
)

__all__ = [
    "Lock",
    "LockClient",
    "LockConnectionError",
    "LockError",
    "LockLost",
    "LockNotOwned",
    "LockTimeout",
    "NotReplicated",
    "StaleToken",
    "Statistics",
]
