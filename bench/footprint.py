"""What held locks, and names once idle, take in Redis: for ``bench.regress`` and
``bench.compare`` (issue 34's memory row), whatever keys a lock uses.

``footprint(url, locks, make)`` takes ``locks`` (10,000) locks of distinct 12-character names
(``job`` and 9 characters, as ``fencelock_tools.benchmark``'s P6) with ``acquire(timeout=0)``,
all held at once, then releases them all, and reads the server's ``INFO`` ``used_memory`` and
the ``DBSIZE`` of the client's database before, while held, and right after the last release:

* per held lock: the growth of ``used_memory`` / ``locks``, and of the keys / ``locks``;
* per idle name: what is left right after the release, the same two figures (fencelock's
  fencing counter stays until it expires; a lock that deletes its key leaves 0).

The keys are counted, not named, so the figure holds for any key layout (``bench.regress``'s old
and new trees may differ); at the end every key holding the names' marker is deleted (``SCAN``).
The leases are ``TTL`` (10 minutes) long, so that none runs out while 10,000 are taken and
given back on a loaded machine (at 250 a second each way, the first is held 80 s). Nothing else
may write to that database meanwhile. ``used_memory`` also moves with the server's own
allocations: client buffers (a few hundred bytes), and the key tables, which grow while the
locks are taken and may shrink once they are released (a few tens of bytes per name).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

import redis

from fencelock_tools.benchmark import BenchError, SyncLockLike

LOCKS: Final = 10_000
TTL: Final = 600.0


@dataclass(frozen=True, slots=True)
class Footprint:
    locks: int
    held_bytes: float  # used_memory growth per held lock
    held_keys: float  # keys per held lock
    idle_bytes: float  # used_memory growth per name right after every lock was released
    idle_keys: float  # keys per name then

    def __str__(self) -> str:
        return (
            f"{self.held_bytes:.0f} B and {self.held_keys:.2f} keys per held lock"
            f" ({self.locks:,} held); {self.idle_bytes:.0f} B and {self.idle_keys:.2f} keys"
            " per name right after the release"
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "locks": self.locks,
            "held_bytes": self.held_bytes,
            "held_keys": self.held_keys,
            "idle_bytes": self.idle_bytes,
            "idle_keys": self.idle_keys,
        }


def used(plain: redis.Redis) -> tuple[int, int]:
    """``used_memory`` and the keys of ``plain``'s database."""
    memory = int(plain.info("memory")["used_memory"])
    return memory, int(plain.dbsize())


def delete_matching(plain: redis.Redis, marker: str) -> None:
    keys = list(plain.scan_iter(match=f"*{marker}*", count=1000))
    for start in range(0, len(keys), 1000):
        plain.unlink(*keys[start : start + 1000])


def footprint(
    plain: redis.Redis, lock: Callable[[str], SyncLockLike], locks: int = LOCKS
) -> Footprint:
    """Hold ``locks`` locks made by ``lock(name)`` (each with a lease of ``TTL``, the caller's
    to give), then release them; measured on ``plain``'s server and database. A lock that is
    busy or not held at release raises ``BenchError`` (every lock is released, and every key
    of the names deleted, whatever happens)."""
    marker = secrets.token_hex(2)
    names = [f"job{marker}{i:05d}" for i in range(locks)]
    warm = lock(f"job{marker}warm")  # connections made, scripts cached
    if not warm.acquire(timeout=0):
        raise BenchError("the warm-up lock was busy")
    warm.release()
    delete_matching(plain, marker)
    held: list[SyncLockLike] = []
    try:
        memory0, keys0 = used(plain)
        for name in names:
            taken = lock(name)
            if not taken.acquire(timeout=0):
                raise BenchError(f"{name!r} was busy")
            held.append(taken)
        memory1, keys1 = used(plain)
        while held:
            held.pop().release()
        memory2, keys2 = used(plain)
    finally:
        for taken in held:
            with suppress(Exception):
                taken.release()
        delete_matching(plain, marker)
    return Footprint(
        locks=locks,
        held_bytes=(memory1 - memory0) / locks,
        held_keys=(keys1 - keys0) / locks,
        idle_bytes=(memory2 - memory0) / locks,
        idle_keys=(keys2 - keys0) / locks,
    )
