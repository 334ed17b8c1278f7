"""What a client has done, for ``client.statistics()``, the benchmarks and the tests."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Statistics:
    """A snapshot of one client's counters (``LockClient.statistics()``)."""

    held: int = 0  # grants its lock objects hold now (a lost one until it is released)
    waiting: int = 0  # acquires waiting now for a wake-up from the server
    queued: int = 0  # acquires waiting now behind another lock object of this client
    acquired: int = 0  # grants taken, from the server or handed over locally
    wakeups: int = 0  # waits ended by a release message
    polls: int = 0  # waits ended by their timer (the holder's lease end, max_poll, timeout)
    handoffs: int = 0  # grants handed from one lock object of this client to the next
    renewal_calls: int = 0  # renewal requests the watchdog sent (one per batch of leases)
    renewals: int = 0  # leases the watchdog renewed
    renewal_failures: int = 0  # leases whose renewal got no answer (tried again soon)
    losses: int = 0  # leases declared lost
    # compute_once and idempotent calls (docs/compute_once.md)
    compute_hits: int = 0  # answered by a fresh stored result
    compute_stale_hits: int = 0  # answered by a stale result (another caller refreshes it)
    compute_builds: int = 0  # builds run (``compute`` called), takeovers included
    compute_waits: int = 0  # calls that waited for another caller's build
    compute_takeovers: int = 0  # builds by a caller whose builder's lease ended without a result
    compute_queued: int = 0  # calls waiting now for a call of this client that asked first
    # give-backs waiting now for a server to answer again: an acquire got no answer (it may
    # still grant), or a release did (Redlock: per node; _async/giveback.py)
    giving_back: int = 0
    given_back: int = 0  # grants those give-backs found, and released


_NAMES = frozenset(f.name for f in fields(Statistics))


class Counters:
    """The live counters behind ``Statistics``, shared by a client's parts (the lock objects,
    the watchdog, the wake-up waits), in threads or tasks. ``guard`` is held for an addition,
    never across I/O: a mutex for threads; under asyncio, where a section without ``await`` is
    atomic already, the client passes a no-op one (the hand-off path adds on every grant)."""

    def __init__(self, guard: AbstractContextManager[object] | None = None) -> None:
        self._guard = threading.Lock() if guard is None else guard
        self._values = dict.fromkeys(_NAMES, 0)

    def add(self, **deltas: int) -> None:
        with self._guard:
            for name, delta in deltas.items():
                self._values[name] += delta

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def snapshot(self, **now: int) -> Statistics:
        """The counters, with the gauges in ``now`` (computed by the caller) filled in."""
        with self._guard:
            values = dict(self._values)
        values.update(now)
        return Statistics(**values)
