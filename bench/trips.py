"""What a benchmark's cycle costs beyond its rate: the requests the client wrote (round trips),
and the servers' CPU time and commands, for ``bench.regress`` and ``bench.compare``.

* Round trips: the requests redis-py's connections, sync and asyncio, write
  (``send_packed_command``: one per command, one per pipeline; what a script runs inside the
  server is no request of the client's), counted per server port. A library that writes to its
  sockets some other way (aioredlock's aioredis) is not counted: its figure is unknown, never 0.
* Server CPU: ``used_cpu_sys + used_cpu_user`` and the commands run (``INFO commandstats``, the
  commands inside scripts included), read with ``fencelock_tools.benchmark``'s ``server_info``
  before and after a run and summed over the servers given (5 for Redlock).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection

from fencelock_tools.benchmark import (
    BATCH,
    Sample,
    SyncFactory,
    SyncLockLike,
    Target,
    Variant,
    server_delta,
    server_info,
)


class RequestCounter:
    """Requests written by redis-py's connections, sync and asyncio, by server port, while
    installed."""

    def __init__(self) -> None:
        self.by_port: Counter[int] = Counter()
        self._saved: list[tuple[type, Any]] = []

    def install(self) -> None:
        by_port = self.by_port
        sync_class = redis.connection.AbstractConnection
        async_class = redis.asyncio.connection.AbstractConnection
        sync_send: Callable[..., Any] = sync_class.send_packed_command  # (untyped in redis-py)
        async_send = async_class.send_packed_command

        def send(conn: Any, *args: Any, **kwargs: Any) -> Any:
            by_port[getattr(conn, "port", 0)] += 1
            return sync_send(conn, *args, **kwargs)

        async def async_send_counted(conn: Any, *args: Any, **kwargs: Any) -> Any:
            by_port[getattr(conn, "port", 0)] += 1
            return await async_send(conn, *args, **kwargs)

        self._saved = [(sync_class, sync_send), (async_class, async_send)]
        setattr(sync_class, "send_packed_command", send)  # noqa: B010 (a method, patched)
        setattr(async_class, "send_packed_command", async_send_counted)  # noqa: B010

    def uninstall(self) -> None:
        for cls, method in self._saved:
            setattr(cls, "send_packed_command", method)  # noqa: B010
        self._saved = []

    @property
    def total(self) -> int:
        return sum(self.by_port.values())

    @contextmanager
    def counting(self) -> Iterator[Counter[int]]:
        self.by_port.clear()
        self.install()
        try:
            yield self.by_port
        finally:
            self.uninstall()


def round_trips(measure: Callable[[float], Any]) -> float | None:
    """Requests per cycle on the busiest server, over one batch of cycles (a timing loop asked
    for 0 s runs exactly one batch, ``BATCH`` cycles), so that a Redlock round written to 5
    servers at once counts 1. None when nothing went through redis-py's connections."""
    counter = RequestCounter()
    with counter.counting() as by_port:
        measure(0.0)
    return max(by_port.values()) / BATCH if by_port else None


class Counted:
    """A contender's client (``make(target, ttl)``) whose process counts the requests it writes
    and reports them with its CPU time (microseconds) as ``wait_counts``, which ``handoff_run``
    sums over its window: P2's round trips and client CPU per grant. (The inner client's own
    counts, fencelock's wake-ups and polls, are left out: ``bench.regress``'s older trees have
    none.) The counter stays installed for the life of the process (a spawned P2 worker)."""

    def __init__(self, target: Target, ttl: float, *, make: SyncFactory) -> None:
        self.counter = RequestCounter()
        self.counter.install()
        self.inner = make(target, ttl)

    def lock(self, name: str) -> SyncLockLike:
        return self.inner.lock(name)

    def wait_counts(self) -> dict[str, int]:
        return {"requests": self.counter.total, "cpu_us": round(1e6 * time.process_time())}

    def close(self) -> None:
        self.inner.close()


# -- the servers' side -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Costs:
    """One run: cycles/s and client CPU (``Sample``), and per cycle the servers' CPU and the
    commands they ran."""

    rate: float
    cpu_us: float
    server_us: float
    commands: float

    def as_list(self) -> list[float]:
        return [self.rate, self.cpu_us, self.server_us, self.commands]


class ServerWatch:
    """The CPU time and commands of ``servers`` (one client each) between two readings."""

    def __init__(self, servers: Sequence[redis.Redis]) -> None:
        self.servers = list(servers)

    def read(self) -> list[dict[str, Any]]:
        return [server_info(server) for server in self.servers]

    def since(self, before: list[dict[str, Any]]) -> tuple[float, int]:
        """Server CPU seconds and commands since ``before`` (``read()``), over every server."""
        deltas = [server_delta(b, a) for b, a in zip(before, self.read(), strict=True)]
        return sum(d.cpu for d in deltas), sum(d.total for d in deltas)

    def measure(self, run: Callable[[float], Sample], seconds: float) -> Costs:
        """``run(seconds)``, a timing loop of ``time_sync``/``time_async``, with the servers'
        costs per cycle. The cycles it made: its CPU time over its CPU per cycle, to whole
        batches (the loops count in batches of ``BATCH``); unlike the wall-clock time around
        it, the CPU time is not stretched while the process waits for a CPU."""
        before = self.read()
        started = time.process_time()
        sample = run(seconds)
        cpu = time.process_time() - started
        server, commands = self.since(before)
        batches = round(1e6 * cpu / sample.cpu_us / BATCH) if sample.cpu_us > 0 else 0
        if not batches:
            return Costs(sample.rate, sample.cpu_us, math.nan, math.nan)
        cycles = BATCH * batches
        return Costs(sample.rate, sample.cpu_us, 1e6 * server / cycles, commands / cycles)


def watched(variant: Variant, watch: ServerWatch) -> tuple[Variant, list[Costs]]:
    """``variant`` with its runs taken under ``watch`` (the same name and timing loop), and the
    list each run's costs are appended to."""
    costs: list[Costs] = []

    def measure(seconds: float) -> Sample:
        found = watch.measure(variant.measure, seconds)
        costs.append(found)
        return Sample(found.rate, found.cpu_us)

    return Variant(variant.name, measure, variant.round_trips), costs
