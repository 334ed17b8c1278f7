"""fencelock: distributed locks on Redis with fencing tokens.

The sync API lives here; ``fencelock.asyncio`` has the same names for asyncio.
"""

import logging

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
from ._sync.client import LockClient
from ._sync.election import Election
from ._sync.latch import Barrier, Latch
from ._sync.lock import Lock
from ._sync.multilock import MultiLock
from ._sync.periodic import OncePer
from ._sync.rw_lock import ReadWriteLock
from ._sync.semaphore import Semaphore
from ._sync.versioned import Versioned
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

__version__ = "0.1.0"

# A library's loggers stay silent until the application configures logging: without this,
# Python's last-resort handler prints every warning to stderr, on top of the exception the
# caller gets for the same event (LockLost, StaleToken).
logging.getLogger("fencelock").addHandler(logging.NullHandler())

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
    "__version__",
    "current_token",
    "holder_label",
]
