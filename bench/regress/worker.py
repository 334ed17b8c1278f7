"""One side of ``python -m bench.regress``: a process whose ``fencelock`` is that side's.

    python -m bench.regress.worker CONFIG_JSON     (started by bench.regress, never by hand)

It builds the rows it is asked for, warms them up, counts their round trips and says so in one
JSON line on stdout; then it answers each request (a JSON line on stdin) with one JSON line: a
run of a row's fencelock or floor (its rate, and per cycle the client's CPU, the servers' CPU and
commands: ``bench.trips``), a P2 run, or the memory row (``bench.footprint``). Anything else it
prints goes to stderr.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

import redis
import redis.asyncio

import fencelock
import fencelock.asyncio
import fencelock_tools
from fencelock_tools.benchmark import (
    COUNTER_COMMANDS,
    PREFIX,
    AsyncCycle,
    FencelockAsyncLocks,
    FencelockLocks,
    Sample,
    SyncFactory,
    Target,
    Variant,
    handoff_run,
    percentile,
    tasks_run,
    threads_run,
    time_async,
    time_sync,
)

from ..trips import Costs, Counted, ServerWatch, round_trips
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


# -- the rows --------------------------------------------------------------------------------


@dataclass
class Measured:
    """One row's fencelock variant and its floor, in this process: each run gives its rate, the
    client's CPU and the servers' CPU and commands per cycle."""

    lib: Callable[[float], Costs]
    floor: Callable[[float], Costs]
    # the two timing loops, whose requests per cycle are counted (P3's runs are not cycles)
    loops: tuple[Callable[[float], Sample], Callable[[float], Sample]] | None = None
    trips: list[float | None] = field(default_factory=lambda: [None, None])

    @classmethod
    def cycles(cls, lib: Variant, floor: Variant, watch: ServerWatch) -> Measured:
        return cls(
            partial(watch.measure, lib.measure),
            partial(watch.measure, floor.measure),
            (lib.measure, floor.measure),
        )

    def run(self, which: str, seconds: float) -> list[float]:
        """``which`` ("lib" or "floor"): [cycles/s, client CPU us, server CPU us, commands]."""
        gc.collect()  # each run from the same heap state
        return (self.lib if which == "lib" else self.floor)(seconds).as_list()


def on_loop(runner: asyncio.Runner, cycle: AsyncCycle) -> Callable[[float], Sample]:
    return lambda seconds: runner.run(time_async(cycle, seconds))


def watch_of(urls: list[str], stack: ExitStack) -> ServerWatch:
    """A client per server for its INFO, apart from the clients measured."""
    return ServerWatch([stack.enter_context(redis.Redis.from_url(url)) for url in urls])


# The builders import the bench modules they use when called: a module that needs what a side's
# tree lacks then fails that workload on that side, with its error, rather than the whole worker.


def build_p1(url: str, runner: asyncio.Runner, stack: ExitStack) -> dict[str, Measured]:
    """fencelock's and the floors' clients with their defaults (the floors': ``redis.Redis()``'s,
    no socket timeout): the hand-written minimum, and redis-py's own ``Lock``."""
    from .. import uncontended

    sync, asyncio_ = uncontended.default_cycles(url, runner, stack)
    watch = watch_of([url], stack)
    timed = {
        "sync": {name: Variant(name, partial(time_sync, loop)) for name, loop in sync.items()},
        "asyncio": {name: Variant(name, on_loop(runner, loop)) for name, loop in asyncio_.items()},
    }
    measured = {}
    for mode, loops in timed.items():
        lib = loops["fencelock"]
        measured[f"P1 {mode}"] = Measured.cycles(lib, loops["minimal"], watch)
        measured[f"P1 {mode}, redis-py"] = Measured.cycles(lib, loops["redis-py Lock"], watch)
    return measured


def build_p4(urls: list[str], runner: asyncio.Runner, stack: ExitStack) -> dict[str, Measured]:
    from .. import redlock
    from ..compare.run import minimal_fan_out

    client = stack.enter_context(fencelock.LockClient.from_url(urls))

    async def make() -> fencelock.asyncio.LockClient:
        return fencelock.asyncio.LockClient.from_url(urls)

    aclient = runner.run(make())
    stack.callback(lambda: runner.run(aclient.close()))
    floors = {v.name: v for v in minimal_fan_out(urls)(runner, stack)}
    watch = watch_of(urls, stack)  # the 5 servers' CPU, summed
    return {
        "P4 sync": Measured.cycles(
            Variant("fencelock", partial(time_sync, redlock.fencelock_sync_cycle(client))),
            floors["minimal sync"],
            watch,
        ),
        "P4 asyncio": Measured.cycles(
            Variant("fencelock", on_loop(runner, redlock.fencelock_async_cycle(aclient))),
            floors["minimal async"],
            watch,
        ),
    }


def p3_run(
    run: Callable[..., Any], factory: Callable[..., Any], url: str
) -> Callable[[float], Costs]:
    """A P3 contender: acquisitions/s of ``P3_WORKERS`` threads (or tasks) of one client on one
    name, this process's CPU per acquisition, and the server's per acquisition in the window."""

    def measure(seconds: float) -> Costs:
        cpu = time.process_time()
        # (at least a short run: --warmup 0 asks for none, and a rate needs one)
        done = run(factory, url, P3_NAME, P3_WORKERS, max(seconds, 0.05), P3_WARMUP)
        count = max(done.acquisitions, 1)
        return Costs(
            done.acquisitions / done.seconds,
            1e6 * (time.process_time() - cpu) / count,
            1e6 * done.server.cpu / count,
            done.server.total / count,
        )

    return measure


def build_p3(url: str) -> dict[str, Measured]:
    """fencelock's local queue (one request per hand-on streak) against redis-py's ``Lock``,
    whose every thread polls the server (it has no local queue: a reference, not a floor)."""
    from ..peers import RedisPyAsyncLocks, RedisPyLocks

    return {
        "P3 threads": Measured(
            p3_run(threads_run, FencelockLocks, url), p3_run(threads_run, RedisPyLocks, url)
        ),
        "P3 tasks": Measured(
            p3_run(tasks_run, FencelockAsyncLocks, url), p3_run(tasks_run, RedisPyAsyncLocks, url)
        ),
    }


def build_primitives(url: str, stack: ExitStack) -> dict[str, Measured]:
    from .. import semaphore

    client = stack.enter_context(fencelock.LockClient.from_url(url))
    plain = stack.enter_context(redis.Redis.from_url(url))
    made, floors = semaphore.primitives(client), semaphore.minimal_cycles(plain)
    watch = watch_of([url], stack)
    return {
        row: Measured.cycles(
            Variant("fencelock", partial(time_sync, semaphore.fencelock_cycle(make, fresh=True))),
            Variant("floor", partial(time_sync, floors[row])),
            watch,
        )
        for row, make in made.items()
    }


def checked_counted(
    target: Target, ttl: float, *, make: SyncFactory, root: str, tools: str
) -> Counted:
    """P2's client in each spawned process, which checks first where that process's fencelock
    came from."""
    check_origin(root, tools)
    return Counted(target, ttl, make=make)


def p2(config: dict[str, Any], key: str, which: str, seconds: float) -> dict[str, Any]:
    """One P2 run of the row ``key``: fencelock with the row's lock options, or (``which`` is
    "floor") python-redis-lock; its figures per grant."""
    from ..peers import PrlLocks

    row = next(row for row in ROWS if row.key == key)
    make = partial(FencelockLocks, **row.options) if which == "lib" else PrlLocks
    factory = partial(checked_counted, make=make, root=config["root"], tools=config["tools"])
    run = handoff_run(factory, config["url"], P2_NAME, config["processes"], config["hold"], seconds)

    def ms(q: float) -> float | None:
        return 1e3 * percentile(run.handoffs, q) if run.handoffs else None

    grants = run.same + len(run.handoffs)  # every grant that followed another
    return {
        "throughput": run.throughput,
        "min_share": min(run.shares),
        "lost_updates": run.lost_updates,
        "overlaps": run.overlaps,
        "p50_ms": ms(50),
        "p99_ms": ms(99),
        "grants": run.total,
        "handoffs": len(run.handoffs),
        "retaken": run.same / grants if grants else None,
        # the counter's GET and SET are the workload's, not the lock's
        "requests": run.per_grant(run.waits["requests"]) - COUNTER_COMMANDS,
        "cpu_us": run.per_grant(run.waits["cpu_us"]),
        "server_us": run.cpu_us_per_acquisition,
        "commands": run.commands_per_acquisition,
    }


def memory(config: dict[str, Any], which: str, locks: int) -> dict[str, float]:
    """What ``locks`` held locks and then their idle names take (``bench.footprint``):
    fencelock's, or (``which`` is "floor") redis-py's ``Lock``'s, each with its defaults."""
    from ..footprint import TTL, footprint
    from ..peers import RedisPyLock

    url = config["url"]
    with ExitStack() as stack:
        plain = stack.enter_context(redis.Redis.from_url(url))
        if which == "lib":
            client = stack.enter_context(fencelock.LockClient.from_url(url))
            return footprint(plain, lambda name: client.lock(name, ttl=TTL), locks).as_dict()
        return footprint(
            plain, lambda name: RedisPyLock(plain.lock(name, timeout=TTL)), locks
        ).as_dict()


# -- the conversation ------------------------------------------------------------------------


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def build(
    config: dict[str, Any], runner: asyncio.Runner, stack: ExitStack
) -> tuple[dict[str, Measured], dict[str, str]]:
    """The rows asked for, warmed up and their round trips counted; and the error of each that
    could not be built (P2 and the memory row have nothing to build: each run makes its own)."""
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
                for run in (measured.lib, measured.floor):
                    run(config["warmup"])
                if measured.loops is not None:
                    measured.trips = [round_trips(loop) for loop in measured.loops]
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
                    found = p2(config, request["row"], request["which"], request["seconds"])
                    reply({"result": found})
                elif request["op"] == "memory":
                    reply({"result": memory(config, request["which"], request["locks"])})
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
