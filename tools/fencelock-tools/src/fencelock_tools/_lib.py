"""fencelock's internals the benchmarks use, wherever the fencelock being measured keeps them:
``python -m bench.regress`` runs the working tree's benchmarks against an older ref too, whose
modules had other names (before the internal modules took a leading underscore)."""

try:
    from fencelock._keys import LockKeys
    from fencelock._scripts import ACQUIRE, RELEASE
except ImportError:  # an older fencelock: bench.regress's old side
    from fencelock.keys import LockKeys  # type: ignore[import-not-found,no-redef]
    from fencelock.scripts import ACQUIRE, RELEASE  # type: ignore[import-not-found,no-redef]

__all__ = ["ACQUIRE", "RELEASE", "LockKeys"]
