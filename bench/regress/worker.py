"""One side of ``python -m bench.regress``: a process whose ``fencelock`` is that side's.

    python -m bench.regress.worker CONFIG_JSON     (started by bench.regress, never by hand)

It builds the rows it is asked for, warms them up, counts their round trips and says so in one
JSON line on stdout; then it answers each request (a JSON line on stdin) with one JSON line.
Anything else it prints goes to stderr.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection

import fencelock
import fencelock.asyncio
import fencelock_tools
from fencelock_tools.benchmark import (
    BATCH,
    COUNTER_COMMANDS,
    PREFIX,
    AsyncCycle,
    FencelockAsyncLocks,
    FencelockLocks,
    Sample,
    Target,
    Variant,
    handoff_run,
    percentile,
    tasks_run,
    threads_run,
    time_async,
    time_sync,
)

from .._common import MINIMAL_RELEASE
from . import ROWS

P2_NAME: Final = f"{PREFIX}-p2-regress"
P3_NAME: Final = f"{PREFIX}-p3-regress"
P3_WORKERS: Final = 8
P3_WARMUP: Final = 0.05  # s: each run starts its threads (tasks) this long before counting


class WrongTree(RuntimeError):
    """This process imported another tree's code than its side's."""


def check_origin(root: str, tools: str) -> None:
    """Raise ``WrongTree`` unless ``fencelock`` came from ``root`` and ``fencelock_tools`` from
    ``tools``."""
    for module, expected in ((fencelock, root), (fencelock_tools, tools)):
        found = Path(module.__file__ or "?").resolve()
        if not found.is_relative_to(Path(expected).resolve()):
            raise WrongTree(f"{module.__name__} imported from {found}, not from under {expected}")


# -- round trips -----------------------------------------------------------------------------


class RequestCounter:
    """Requests written by redis-py's connections, sync and asyncio, by server port, while
    installed. ``send_packed_command`` runs once per command and once per pipeline; what a
    script runs inside the server is no request of the client's, and is never counted."""

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


def round_trips(variant: Variant) -> float | None:
    """Requests per cycle on the busiest server, over one batch of cycles (a timing loop asked
    for 0 s runs exactly one batch, ``BATCH`` cycles). None when nothing went through redis-py's
    connections (a library that writes to its sockets some other way)."""
    counter = RequestCounter()
    with counter.counting() as by_port:
        variant.measure(0.0)
    return max(by_port.values()) / BATCH if by_port else None


class CountingLocks(FencelockLocks):
    """P2's client in each spawned process: it checks where that process's fencelock came from,
    and reports the requests the process wrote and its CPU time (microseconds) as its
    ``wait_counts``, which ``handoff_run`` sums over the window (fencelock's own wait counts are
    left out: older trees have none)."""

    def __init__(self, target: Target, ttl: float, *, root: str, tools: str) -> None:
        check_origin(root, tools)
        self.counter = RequestCounter()
        self.counter.install()  # for the life of the process
        super().__init__(target, ttl)

    def wait_counts(self) -> dict[str, int]:
        return {"requests": self.counter.total, "cpu_us": round(1e6 * time.process_time())}


# -- the rows --------------------------------------------------------------------------------


@dataclass
class Measured:
    """One row's fencelock variant and its floor, in this process."""

    lib: Variant
    floor: Variant
    trips: list[float | None] = field(default_factory=list)  # round trips of each
    cycles: bool = True  # each variant runs cycles, whose round trips can be counted (not P3)

    def run(self, which: str, seconds: float) -> list[float]:
        """cycles/s and client CPU us per cycle of ``which`` ("lib" or "floor")."""
        gc.collect()  # each run from the same heap state
        sample = (self.lib if which == "lib" else self.floor).measure(seconds)
        return [sample.rate, sample.cpu_us]


def on_loop(runner: asyncio.Runner, cycle: AsyncCycle) -> Callable[[float], Sample]:
    return lambda seconds: runner.run(time_async(cycle, seconds))


# The builders import the bench modules they use when called: a module that needs what a side's
# tree lacks then fails that workload on that side, with its error, rather than the whole worker.


def build_p1(url: str, runner: asyncio.Runner, stack: ExitStack) -> dict[str, Measured]:
    """fencelock's and the floor's clients with their defaults (the floor's: ``redis.Redis()``'s,
    no socket timeout)."""
    from .. import uncontended

    client = stack.enter_context(fencelock.LockClient.from_url(url))
    plain = stack.enter_context(redis.Redis.from_url(url))
    sha: str = plain.script_load(MINIMAL_RELEASE)

    async def make() -> tuple[fencelock.asyncio.LockClient, redis.asyncio.Redis]:
        return fencelock.asyncio.LockClient.from_url(url), redis.asyncio.Redis.from_url(url)

    aclient, aplain = runner.run(make())
    stack.callback(lambda: runner.run(aclient.close()))
    stack.callback(lambda: runner.run(aplain.aclose()))
    return {
        "P1 sync": Measured(
            Variant("fencelock", partial(time_sync, uncontended.fencelock_sync_cycle(client))),
            Variant("floor", partial(time_sync, uncontended.minimal_sync_cycle(plain, sha))),
        ),
        "P1 asyncio": Measured(
            Variant("fencelock", on_loop(runner, uncontended.fencelock_async_cycle(aclient))),
            Variant("floor", on_loop(runner, uncontended.minimal_async_cycle(aplain, sha))),
        ),
    }


def build_p4(urls: list[str], runner: asyncio.Runner, stack: ExitStack) -> dict[str, Measured]:
    from .. import redlock
    from ..compare.run import minimal_fan_out

    client = stack.enter_context(fencelock.LockClient.from_url(urls))

    async def make() -> fencelock.asyncio.LockClient:
        return fencelock.asyncio.LockClient.from_url(urls)

    aclient = runner.run(make())
    stack.callback(lambda: runner.run(aclient.close()))
    floors = {v.name: v for v in minimal_fan_out(urls)(runner, stack)}
    return {
        "P4 sync": Measured(
            Variant("fencelock", partial(time_sync, redlock.fencelock_sync_cycle(client))),
            floors["minimal sync"],
        ),
        "P4 asyncio": Measured(
            Variant("fencelock", on_loop(runner, redlock.fencelock_async_cycle(aclient))),
            floors["minimal async"],
        ),
    }


def p3_variant(
    name: str, run: Callable[..., Any], factory: Callable[..., Any], url: str
) -> Variant:
    """A P3 contender as a variant: acquisitions/s of ``P3_WORKERS`` threads (or tasks) of one
    client on one name, and this process's CPU per acquisition."""

    def measure(seconds: float) -> Sample:
        cpu = time.process_time()
        # (at least a short run: --warmup 0 asks for none, and a rate needs one)
        done = run(factory, url, P3_NAME, P3_WORKERS, max(seconds, 0.05), P3_WARMUP)
        cpu_us = 1e6 * (time.process_time() - cpu) / max(done.acquisitions, 1)
        return Sample(done.acquisitions / done.seconds, cpu_us)

    return Variant(name, measure)


def build_p3(url: str) -> dict[str, Measured]:
    """fencelock's local queue (one request per hand-on streak) against redis-py's ``Lock``,
    whose every thread polls the server (it has no local queue: a reference, not a floor)."""
    from ..peers import RedisPyAsyncLocks, RedisPyLocks

    return {
        "P3 threads": Measured(
            p3_variant("fencelock", threads_run, FencelockLocks, url),
            p3_variant("redis-py", threads_run, RedisPyLocks, url),
            cycles=False,
        ),
        "P3 tasks": Measured(
            p3_variant("fencelock", tasks_run, FencelockAsyncLocks, url),
            p3_variant("redis-py", tasks_run, RedisPyAsyncLocks, url),
            cycles=False,
        ),
    }


def build_primitives(url: str, stack: ExitStack) -> dict[str, Measured]:
    from .. import semaphore

    client = stack.enter_context(fencelock.LockClient.from_url(url))
    plain = stack.enter_context(redis.Redis.from_url(url))
    made, floors = semaphore.primitives(client), semaphore.minimal_cycles(plain)
    return {
        row: Measured(
            Variant("fencelock", partial(time_sync, semaphore.fencelock_cycle(make, fresh=True))),
            Variant("floor", partial(time_sync, floors[row])),
        )
        for row, make in made.items()
    }


def p2(config: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One P2 run; its figures per grant."""
    factory = partial(CountingLocks, root=config["root"], tools=config["tools"])
    run = handoff_run(factory, config["url"], P2_NAME, config["processes"], config["hold"], seconds)

    def ms(q: float) -> float | None:
        return 1e3 * percentile(run.handoffs, q) if run.handoffs else None

    return {
        "throughput": run.throughput,
        "min_share": min(run.shares),
        "lost_updates": run.lost_updates,
        "overlaps": run.overlaps,
        "p50_ms": ms(50),
        "p99_ms": ms(99),
        "grants": run.total,
        "handoffs": len(run.handoffs),
        # the counter's GET and SET are the workload's, not the lock's
        "requests": run.per_grant(run.waits["requests"]) - COUNTER_COMMANDS,
        "cpu_us": run.per_grant(run.waits["cpu_us"]),
    }


# -- the conversation ------------------------------------------------------------------------


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def build(
    config: dict[str, Any], runner: asyncio.Runner, stack: ExitStack
) -> tuple[dict[str, Measured], dict[str, str]]:
    """The rows asked for, warmed up and their round trips counted; and the error of each that
    could not be built (P2 has nothing to build: each run spawns its processes)."""
    builders: dict[str, Callable[[], dict[str, Measured]]] = {
        "P1": lambda: build_p1(config["url"], runner, stack),
        "P4": lambda: build_p4(config["redlock"], runner, stack),
        "primitives": lambda: build_primitives(config["url"], stack),
        "P3": lambda: build_p3(config["url"]),
    }
    asked = [row for row in ROWS if row.key in config["rows"] and row.workload in builders]
    built: dict[str, Measured] = {}
    failed: dict[str, str] = {}
    for workload in dict.fromkeys(row.workload for row in asked):
        try:
            found = builders[workload]()
        except Exception as exc:
            failed.update({row.key: error_text(exc) for row in asked if row.workload == workload})
            continue
        for row in asked:
            if row.key not in found:
                continue
            measured = found[row.key]
            try:
                for variant in (measured.lib, measured.floor):
                    variant.measure(config["warmup"])
                variants = (measured.lib, measured.floor)
                measured.trips = [round_trips(v) if measured.cycles else None for v in variants]
            except Exception as exc:
                failed[row.key] = error_text(exc)
            else:
                built[row.key] = measured
    return built, failed


def serve(config: dict[str, Any], out: TextIO) -> int:
    def reply(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        check_origin(config["root"], config["tools"])
    except WrongTree as exc:
        reply({"error": str(exc)})
        return 1
    with ExitStack() as stack:
        runner = stack.enter_context(asyncio.Runner())
        built, failed = build(config, runner, stack)
        reply(
            {
                "fencelock": fencelock.__file__,
                "fencelock_tools": fencelock_tools.__file__,
                "version": fencelock.__version__,
                "trips": {row: measured.trips for row, measured in built.items()},
                "failed": failed,
            }
        )
        for line in sys.stdin:
            request = json.loads(line)
            if request["op"] == "quit":
                break
            try:
                if request["op"] == "p2":
                    reply({"result": p2(config, request["seconds"])})
                else:
                    measured = built[request["row"]]
                    reply({"result": measured.run(request["which"], request["seconds"])})
            except Exception as exc:
                reply({"error": error_text(exc)})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config = json.loads(args[0])
    out, sys.stdout = sys.stdout, sys.stderr  # stdout carries the replies only
    return serve(config, out)


if __name__ == "__main__":
    sys.exit(main())
