"""fencelock: distributed locks on Redis with fencing tokens.

The sync API lives here; ``fencelock.asyncio`` has the same names for asyncio.
"""

from ._core.stats import Statistics
from ._sync.client import LockClient
from ._sync.lock import Lock
from .errors import (
    LockConnectionError,
    LockError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    NotReplicated,
    StaleToken,
)

__version__ = "0.1.0"

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
    "__version__",
]
