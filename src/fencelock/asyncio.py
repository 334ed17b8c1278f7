"""The asyncio API: ``fencelock.asyncio.LockClient`` takes ``redis.asyncio`` clients."""

from ._async.client import AsyncLockClient as LockClient
from ._async.lock import AsyncLock as Lock
from ._async.semaphore import AsyncSemaphore as Semaphore
from ._core.inspection import ForceOutcome, ForceReleased, LockInfo, WaiterInfo
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
from .labels import holder_label

__all__ = [
    "ForceOutcome",
    "ForceReleased",
    "Lock",
    "LockClient",
    "LockConnectionError",
    "LockError",
    "LockInfo",
    "LockLost",
    "LockNotOwned",
    "LockTimeout",
    "NotReplicated",
    "Semaphore",
    "StaleToken",
    "Statistics",
    "WaiterInfo",
    "holder_label",
]
