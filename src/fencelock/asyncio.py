"""The asyncio API: ``fencelock.asyncio.LockClient`` takes ``redis.asyncio`` clients."""

from ._async.client import AsyncLockClient as LockClient
from ._async.election import AsyncElection as Election
from ._async.latch import AsyncBarrier as Barrier
from ._async.latch import AsyncLatch as Latch
from ._async.lock import AsyncLock as Lock
from ._async.multilock import AsyncMultiLock as MultiLock
from ._async.periodic import AsyncOncePer as OncePer
from ._async.rw_lock import AsyncReadWriteLock as ReadWriteLock
from ._async.semaphore import AsyncSemaphore as Semaphore
from ._async.versioned import AsyncVersioned as Versioned
from ._context import current_token
from ._core.election import Leader
from ._core.inspection import (
    ForceOutcome,
    ForceReleased,
    HolderInfo,
    LockInfo,
    SemaphoreState,
    WaiterInfo,
)
from ._core.latch import LatchReset
from ._core.stats import Statistics
from ._labels import holder_label
from .errors import (
    ClientClosed,
    Conflict,
    DatabaseRefused,
    LockConnectionError,
    LockError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    NotReplicated,
    StaleToken,
    TooManyConflicts,
)

__all__ = [
    "Barrier",
    "ClientClosed",
    "Conflict",
    "DatabaseRefused",
    "Election",
    "ForceOutcome",
    "ForceReleased",
    "HolderInfo",
    "Latch",
    "LatchReset",
    "Leader",
    "Lock",
    "LockClient",
    "LockConnectionError",
    "LockError",
    "LockInfo",
    "LockLost",
    "LockNotOwned",
    "LockTimeout",
    "MultiLock",
    "NotReplicated",
    "OncePer",
    "ReadWriteLock",
    "Semaphore",
    "SemaphoreState",
    "StaleToken",
    "Statistics",
    "TooManyConflicts",
    "Versioned",
    "WaiterInfo",
    "current_token",
    "holder_label",
]
