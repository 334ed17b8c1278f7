"""The public names of ``fencelock`` (the sync API) and ``fencelock.asyncio``, and where each
comes from: the one list from which ``python tools/gen_exports.py`` writes both modules' imports
and ``__all__``. mypy reads only a literal ``__all__``, so each module spells its own out; CI
(``tools/gen_exports.py --check``) fails when they no longer match this list.

Read by the generator as a file, not imported by the package: only the standard library here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True, slots=True)
class Twin:
    """A class of each API: ``fencelock.<Name>`` is ``_sync.<module>.<Name>``, and
    ``fencelock.asyncio.<Name>`` is ``_async.<module>.Async<Name>`` (the source of the other,
    tools/gen_sync.py)."""

    module: str


@dataclass(frozen=True, slots=True)
class Shared:
    """One object in both APIs: ``fencelock.<module>.<Name>``."""

    module: str


EXPORTS: Final[Mapping[str, Twin | Shared]] = MappingProxyType(
    {
        "Barrier": Twin("latch"),
        "ClientClosed": Shared("errors"),
        "ComputeFailed": Shared("errors"),
        "Conflict": Shared("errors"),
        "DatabaseRefused": Shared("errors"),
        "Election": Twin("election"),
        "FingerprintMismatch": Shared("errors"),
        "ForceOutcome": Shared("_core.inspection"),
        "ForceReleased": Shared("_core.inspection"),
        "HolderInfo": Shared("_core.inspection"),
        "Latch": Twin("latch"),
        "LatchReset": Shared("_core.latch"),
        "Leader": Shared("_core.election"),
        "Lock": Twin("lock"),
        "LockClient": Twin("client"),
        "LockConnectionError": Shared("errors"),
        "LockError": Shared("errors"),
        "LockInfo": Shared("_core.inspection"),
        "LockLost": Shared("errors"),
        "LockNotOwned": Shared("errors"),
        "LockTimeout": Shared("errors"),
        "MultiLock": Twin("multilock"),
        "NotReplicated": Shared("errors"),
        "OncePer": Twin("periodic"),
        "ReadWriteLock": Twin("rw_lock"),
        "ResultError": Shared("errors"),
        "Semaphore": Twin("semaphore"),
        "SemaphoreState": Shared("_core.inspection"),
        "ScriptsRequired": Shared("errors"),
        "StaleToken": Shared("errors"),
        "Statistics": Shared("_core.stats"),
        "TooManyConflicts": Shared("errors"),
        "Versioned": Twin("versioned"),
        "WaiterInfo": Shared("_core.inspection"),
        "current_token": Shared("_context"),
        "holder_label": Shared("_labels"),
    }
)

# Defined in ``fencelock/__init__.py`` itself and listed in its ``__all__`` only.
PACKAGE_ONLY: Final = ("__version__",)
