"""Fences where the writes land: the fencing token checked by the user's own database
(``sql``), files (``files``), object store (``s3``) and HTTP services (``http``).
docs/fencing.md says which to use and what each promises.

Each submodule is imported on first use (``fences.sql``...), and imports nothing but the
standard library and fencelock itself: the connection or client the caller passes brings its
library with it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import files, http, s3, sql

__all__ = ["files", "http", "s3", "sql"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
