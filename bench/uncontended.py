"""Uncontended acquire+release throughput: fencelock against a minimal hand-written lock (issue 2).

    python -m bench.uncontended [--seconds 1] [--repeat 7] [--warmup 0.5] [--url redis://...]
                                [--pin none|same|split] [--scripts auto|never]
    python -m bench.uncontended --count [--instructions] [--url redis://...]

Four variants, each one client doing acquire+release cycles on a lock nobody else wants:

* ``fencelock sync``: ``lock = client.lock("bench", ttl=10, timeout=0)``;
  ``lock.acquire(timeout=0)``, ``lock.release()``.
* ``fencelock async``: the same with ``fencelock.asyncio.LockClient``.
* ``minimal sync``: redis-py, ``SET key token NX PX 10000`` then ``EVALSHA`` of a compare-and-delete
  script (loaded once). The token is fresh per cycle (``secrets.token_urlsafe(20)``, as in
  fencelock): a lock that reuses its token cannot tell its own grant from an earlier one.
* ``minimal async``: the same with ``redis.asyncio``.

Every client is built with the settings ``LockClient.from_url`` uses (socket and connect timeouts of
5 s, the default parser: hiredis when installed); the script checks this before measuring. Each
cycle checks its replies, so a benchmark that silently stopped acquiring cannot look fast.

Method: every variant first warms up (connection made, script cached, code paths hot), then each
of ``--repeat`` repetitions runs every variant for ``--seconds``; the order of the variants is
rotated, and reversed on every other repetition, so slow drift (CPU frequency, a noisy neighbour)
does not favour one of them. Reported: the median rate and the min/max over repetitions, the
client's own CPU time per cycle (``time.process_time``: the library's overhead, much less
sensitive to scheduling than the wall-clock rate), and the fencelock/minimal ratios both as a
ratio of medians and as the median of the per-repetition ratios.

``--scripts never`` measures the script-free mode (``LockClient(url, scripts="never")``,
docs/modes.md) against its own minimum: ``SET NX PX`` then the native compare-and-delete
(``DELIFEQ`` on Valkey >= 9.0, ``DELEX ... IFEQ`` on Redis >= 8.4), on a server that has it.

``--pin`` fixes where the processes run (Linux): ``same`` puts the client and the embedded server
on one CPU, ``split`` on two different ones. Unpinned, on a small VM the scheduler moves them
between sharing a CPU and not, which changes the round trip about 2x and makes the rate bimodal.

``--count`` reads no clock: it counts what one cycle costs the client, for fencelock, the
minimum and redis-py's ``Lock``, sync and asyncio, each on a client with its defaults (as
``bench.regress``'s P1): Python function calls and calls of C functions (a profile function), and
on the event loop its steps, the steps in which it waited for I/O (nothing else was ready: the
loop parks until a reply comes, unless the reply is there already), the tasks and the timers
made; the median per cycle over ``COUNT_CYCLES`` cycles. The load of the machine does not change
them. With ``--instructions`` (valgrind installed) each cycle runs under callgrind instead, in
a process of its own, twice (``COUNT_CYCLES`` cycles apart), without the counting: the
instructions per cycle of the client process, all its threads.

With ``--url`` the benchmark writes ``fencelock:{bench}:lock``, ``fencelock:{bench}:fence`` (the
fencing counter, until it expires) and ``bench:minimal:lock`` in that server's database.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final

import redis
import redis.asyncio

import fencelock
import fencelock.asyncio
from fencelock_tools.servers.embedded import EmbeddedServer

from ._common import (
    GOAL,
    MINIMAL_RELEASE,
    SOCKET_TIMEOUT,
    TOKEN_BYTES,
    TTL,
    TTL_MS,
    AsyncCycle,
    BenchError,
    SyncCycle,
    Variant,
    callgrind_total,
    check_same_settings,
    client_description,
    measure,
    pin,
    print_ratios,
    print_table,
    server_description,
    time_async,
    time_sync,
)

LOCK_NAME: Final = "bench"
MINIMAL_KEY: Final = "bench:minimal:lock"
REDIS_PY_KEY: Final = "bench:redis-py:lock"


# -- the variants ----------------------------------------------------------------------------


def fencelock_sync_cycle(client: fencelock.LockClient) -> SyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL, timeout=0)

    def cycle() -> None:
        if not lock.acquire(timeout=0):
            raise BenchError(f"fencelock sync: {LOCK_NAME!r} was busy")
        lock.release()

    return cycle


def fencelock_async_cycle(client: fencelock.asyncio.LockClient) -> AsyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL, timeout=0)

    async def cycle() -> None:
        if not await lock.acquire(timeout=0):
            raise BenchError(f"fencelock async: {LOCK_NAME!r} was busy")
        await lock.release()

    return cycle


def native_release(delete: str) -> Callable[[str], tuple[str, ...]]:
    """The native compare-and-delete of a token: "DELIFEQ" (Valkey) or "DELEX" (Redis)."""
    if delete == "DELEX":
        return lambda token: ("DELEX", MINIMAL_KEY, "IFEQ", token)
    return lambda token: ("DELIFEQ", MINIMAL_KEY, token)


def minimal_sync_cycle(client: redis.Redis, sha: str, delete: str = "") -> SyncCycle:
    """``SET NX PX``, then the ``EVALSHA`` of ``sha`` (or ``delete``, native: see above)."""
    native = native_release(delete)

    def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not client.set(MINIMAL_KEY, token, nx=True, px=TTL_MS):
            raise BenchError(f"minimal sync: {MINIMAL_KEY!r} was busy")
        if delete:
            released = client.execute_command(*native(token))  # type: ignore[no-untyped-call]
        else:
            released = client.evalsha(sha, 1, MINIMAL_KEY, token)
        if released != 1:
            raise BenchError(f"minimal sync: {MINIMAL_KEY!r} was not ours at release")

    return cycle


def minimal_async_cycle(client: redis.asyncio.Redis, sha: str, delete: str = "") -> AsyncCycle:
    native = native_release(delete)

    async def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not await client.set(MINIMAL_KEY, token, nx=True, px=TTL_MS):
            raise BenchError(f"minimal async: {MINIMAL_KEY!r} was busy")
        if delete:
            released = await client.execute_command(*native(token))  # type: ignore[no-untyped-call]
        else:
            released = await client.evalsha(sha, 1, MINIMAL_KEY, token)
        if released != 1:
            raise BenchError(f"minimal async: {MINIMAL_KEY!r} was not ours at release")

    return cycle


def redis_py_sync_cycle(client: redis.Redis) -> SyncCycle:
    """redis-py's own ``Lock``: ``client.lock(name, timeout=TTL)``, the lease fencelock's cycle
    has, its other options redis-py's defaults (a ``uuid1`` token kept thread-locally, ``SET NX
    PX``, its compare-and-delete script through ``Script``)."""
    lock = client.lock(REDIS_PY_KEY, timeout=TTL)

    def cycle() -> None:
        if not lock.acquire(blocking=False):
            raise BenchError(f"redis-py Lock sync: {REDIS_PY_KEY!r} was busy")
        lock.release()

    return cycle


def redis_py_async_cycle(client: redis.asyncio.Redis) -> AsyncCycle:
    lock = client.lock(REDIS_PY_KEY, timeout=TTL)

    async def cycle() -> None:
        if not await lock.acquire(blocking=False):
            raise BenchError(f"redis-py Lock async: {REDIS_PY_KEY!r} was busy")
        await lock.release()

    return cycle


def default_cycles(
    url: str, runner: asyncio.Runner, stack: ExitStack, scripts: str = "auto"
) -> tuple[dict[str, SyncCycle], dict[str, AsyncCycle]]:
    """The sync and the asyncio cycles of fencelock, the minimum and redis-py's ``Lock`` by
    name, each on a client with its defaults (``LockClient.from_url(url)``, a default
    ``redis.Redis``: no socket timeout), which ``stack`` closes; the asyncio clients made on
    ``runner``'s loop (``bench.regress``, ``bench.breakdown``); fencelock's in mode
    ``scripts``."""
    client = stack.enter_context(fencelock.LockClient.from_url(url, scripts=scripts))
    plain = stack.enter_context(redis.Redis.from_url(url))
    sha: str = plain.script_load(MINIMAL_RELEASE)

    async def make() -> tuple[fencelock.asyncio.LockClient, redis.asyncio.Redis]:
        made = fencelock.asyncio.LockClient.from_url(url, scripts=scripts)
        return made, redis.asyncio.Redis.from_url(url)

    aclient, aplain = runner.run(make())
    stack.callback(lambda: runner.run(aclient.close()))
    stack.callback(lambda: runner.run(aplain.aclose()))
    sync = {
        "fencelock": fencelock_sync_cycle(client),
        "minimal": minimal_sync_cycle(plain, sha),
        "redis-py Lock": redis_py_sync_cycle(plain),
    }
    asyncio_ = {
        "fencelock": fencelock_async_cycle(aclient),
        "minimal": minimal_async_cycle(aplain, sha),
        "redis-py Lock": redis_py_async_cycle(aplain),
    }
    return sync, asyncio_


@contextmanager
def variants(url: str, runner: asyncio.Runner, scripts: str = "auto") -> Iterator[list[Variant]]:
    """The four variants, connected to ``url``; all clients are closed on exit. ``scripts``:
    the clients' mode ("never": the floor's release is the native compare-and-delete)."""
    # (imported here: the cycles above also run on other trees' fencelock, in bench.regress)
    from fencelock._async.routes import AsyncOneServerRoute
    from fencelock._core.natives import ServerCommands
    from fencelock._sync.routes import SyncOneServerRoute

    with ExitStack() as stack:
        fl_sync = fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT, scripts=scripts)
        stack.callback(fl_sync.close)
        min_sync = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
        )
        stack.callback(min_sync.close)

        # redis.asyncio clients belong to the loop they first ran on: make them inside it.
        async def make_async() -> tuple[fencelock.asyncio.LockClient, redis.asyncio.Redis]:
            made = fencelock.asyncio.LockClient.from_url
            return made(url, socket_timeout=SOCKET_TIMEOUT, scripts=scripts), (
                redis.asyncio.Redis.from_url(
                    url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
                )
            )

        fl_async, min_async = runner.run(make_async())
        stack.callback(lambda: runner.run(fl_async.close()))
        stack.callback(lambda: runner.run(min_async.aclose()))

        sync_server = fl_sync._wiring.topology.route
        async_server = fl_async._wiring.topology.route
        assert isinstance(sync_server, SyncOneServerRoute)
        assert isinstance(async_server, AsyncOneServerRoute)
        assert isinstance(sync_server.redis, redis.Redis)
        assert isinstance(async_server.redis, redis.asyncio.Redis)
        check_same_settings(sync_server.redis, [min_sync, async_server.redis, min_async])

        delete = ""
        if scripts == "never":
            hello = min_sync.execute_command("HELLO")  # type: ignore[no-untyped-call]
            delete = ServerCommands().detected(hello).compare_delete
            if not delete:
                raise BenchError(f"{server_description(url)} has no native compare-and-delete")
        sha: str = "" if delete else min_sync.script_load(MINIMAL_RELEASE)
        fl_sync_cycle = fencelock_sync_cycle(fl_sync)
        fl_async_cycle = fencelock_async_cycle(fl_async)
        min_sync_cycle = minimal_sync_cycle(min_sync, sha, delete)
        min_async_cycle = minimal_async_cycle(min_async, sha, delete)
        yield [
            Variant("fencelock sync", lambda s: time_sync(fl_sync_cycle, s)),
            Variant("minimal sync", lambda s: time_sync(min_sync_cycle, s)),
            Variant("fencelock async", lambda s: runner.run(time_async(fl_async_cycle, s))),
            Variant("minimal async", lambda s: runner.run(time_async(min_async_cycle, s))),
        ]


# -- counts: what a cycle costs, without a clock (--count) ------------------------------------

COUNT_WARMUP: Final = 50
COUNT_CYCLES: Final = 200
CALLS: Final = ("Python calls", "C calls")
# the event loop's, per cycle: its steps, those that waited for I/O, the tasks and timers made
LOOP: Final = ("loop steps", "waits for I/O", "tasks", "timers")


class Counting:
    """What the cycles call (a profile function: the calls made by code of this file, the
    cycles' closures and these counters, are not counted; what they call is), and what an event
    loop does for them (``on``)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys((*CALLS, *LOOP), 0)

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if frame.f_code.co_filename == __file__:
            return
        if event == "call":
            self.counts["Python calls"] += 1
        elif event == "c_call":
            self.counts["C calls"] += 1

    def on(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Count ``loop``'s steps, waits, tasks and timers (instance attributes shadowing its
        methods); returns what removes them."""
        counts = self.counts
        selector: Any = getattr(loop, "_selector")  # noqa: B009 (a private of asyncio's loop)
        run_once, select = getattr(loop, "_run_once"), selector.select  # noqa: B009
        create_task, call_at = loop.create_task, loop.call_at

        def step() -> None:
            counts["loop steps"] += 1
            run_once()

        def waiting(timeout: float | None = None) -> Any:
            # (a timeout of 0: something was ready to run, the loop only looks)
            counts["waits for I/O"] += timeout is None or timeout > 0
            return select(timeout)

        def task(*args: Any, **kwargs: Any) -> Any:
            counts["tasks"] += 1
            return create_task(*args, **kwargs)

        def timer(*args: Any, **kwargs: Any) -> Any:
            counts["timers"] += 1
            return call_at(*args, **kwargs)

        wrappers = {"_run_once": step, "create_task": task, "call_at": timer}
        for name, wrapper in wrappers.items():
            setattr(loop, name, wrapper)
        selector.select = waiting

        def undo() -> None:
            for name in wrappers:
                delattr(loop, name)
            del selector.select

        return undo


def count_cycles(
    url: str,
    cycles: int = COUNT_CYCLES,
    profile: bool = True,
    only: str = "",
    scripts: str = "auto",
) -> dict[str, dict[str, float]]:
    """Per variant ("sync fencelock", "asyncio minimal", ...; ``only``: that one alone), the
    median per cycle of each count over ``cycles`` cycles, after ``COUNT_WARMUP`` (``profile``
    False: the cycles run, uncounted, for ``--instructions``; ``scripts``: fencelock's mode)."""
    counted: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        runner = stack.enter_context(asyncio.Runner())
        sync, asyncio_ = default_cycles(url, runner, stack, scripts)
        for name, sync_cycle in sync.items():
            if only in ("", f"sync {name}"):
                counted[f"sync {name}"] = count_sync(sync_cycle, cycles, profile)
        for name, async_cycle in asyncio_.items():
            if only in ("", f"asyncio {name}"):
                counted[f"asyncio {name}"] = runner.run(count_async(async_cycle, cycles, profile))
    return counted


def medians(snapshots: list[dict[str, int]]) -> dict[str, float]:
    deltas = [{k: b[k] - a[k] for k in b} for a, b in itertools.pairwise(snapshots)]
    return {k: statistics.median(d[k] for d in deltas) for k in snapshots[0]} if deltas else {}


def count_sync(cycle: SyncCycle, cycles: int, profile: bool) -> dict[str, float]:
    for _ in range(COUNT_WARMUP):
        cycle()
    counting = Counting()
    snapshots = [dict(counting.counts)]
    sys.setprofile(counting.profile if profile else None)
    try:
        for _ in range(cycles):
            cycle()
            snapshots.append(dict(counting.counts))
    finally:
        sys.setprofile(None)
    return {k: v for k, v in medians(snapshots).items() if k in CALLS}


async def count_async(cycle: AsyncCycle, cycles: int, profile: bool) -> dict[str, float]:
    for _ in range(COUNT_WARMUP):
        await cycle()
    counting = Counting()
    snapshots = [dict(counting.counts)]
    undo = counting.on(asyncio.get_running_loop()) if profile else None
    sys.setprofile(counting.profile if profile else None)
    try:
        for _ in range(cycles):
            await cycle()
            snapshots.append(dict(counting.counts))
    finally:
        sys.setprofile(None)
        if undo is not None:
            undo()
    return medians(snapshots)


def instructions(url: str, variant: str, scripts: str) -> float:
    """The instructions per cycle of ``variant``'s client process (callgrind: runs of 0 and
    ``COUNT_CYCLES`` cycles, after the same set-up and warm-up; the difference per cycle)."""
    root = Path(__file__).resolve().parents[1]
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (0, COUNT_CYCLES):
            out = Path(tmp, f"cycles-{n}")
            call = (
                "from bench import uncontended as u;"
                f" u.count_cycles({url!r}, {n}, profile=False, only={variant!r},"
                f" scripts={scripts!r})"
            )
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                       sys.executable, "-c", call]  # fmt: skip
            # (one hash seed: the layout of sets and dicts moves the count by a few per cent)
            env = {**os.environ, "PYTHONHASHSEED": "0"}
            subprocess.run(command, cwd=root, env=env, check=True, capture_output=True)
            totals.append(callgrind_total(out))
    return (totals[1] - totals[0]) / COUNT_CYCLES


def count_report(url: str, with_instructions: bool, scripts: str) -> None:
    print(
        f"\nPer cycle (acquire + release), the median over {COUNT_CYCLES} cycles after"
        f" {COUNT_WARMUP} of warm-up. No clock is read: the load of the machine does not change"
        " these counts. Waits for I/O: loop steps that found nothing else to run (the loop parks"
        " until a reply comes, unless it is there already)."
    )
    counted = count_cycles(url, scripts=scripts)
    columns = [*CALLS, *LOOP] + (["instructions"] if with_instructions else [])
    print(f"\n| variant | {' | '.join(columns)} |")
    print(f"|---|{'---:|' * len(columns)}")
    for variant, counts in counted.items():
        if with_instructions:
            counts["instructions"] = instructions(url, variant, scripts)
        cells = [f"{counts[c]:,.0f}" if c in counts else "" for c in columns]
        print(f"| {variant} | {' | '.join(cells)} |")


# -- reporting -------------------------------------------------------------------------------


def report(all_variants: list[Variant], seconds: float, repeat: int) -> float:
    """Print the table; return the sync ratio of medians (the figure the goal is about)."""
    by_name = {v.name: v for v in all_variants}
    print_table(all_variants, seconds, repeat)
    pairs = [(by_name[f"fencelock {k}"], by_name[f"minimal {k}"]) for k in ("sync", "async")]
    sync_ratio = print_ratios(pairs)[0]
    verdict = "met" if sync_ratio >= GOAL else "NOT met"
    print(f"\ngoal: fencelock sync >= {GOAL}x minimal sync: {verdict} ({sync_ratio:.3f})")
    return sync_ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.uncontended",
        description="Uncontended acquire+release cycles/s: fencelock vs a minimal lock.",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="one run, s (default 1)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per variant (default 7)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up per variant, s (0.5)")
    parser.add_argument("--url", help="an existing server (default: start one with EmbeddedServer)")
    parser.add_argument(
        "--pin", choices=("none", "same", "split"), default="none",
        help="CPU affinity: client and server on the same CPU, on two CPUs, or none (default)",
    )  # fmt: skip
    parser.add_argument(
        "--scripts", choices=("auto", "never"), default="auto",
        help='fencelock\'s mode; "never": against SET NX PX + the native compare-and-delete',
    )  # fmt: skip
    parser.add_argument(
        "--count", action="store_true",
        help="count what a cycle calls (and, asyncio, what its event loop does): no clock",
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true",
        help="with --count: each cycle's instructions too (valgrind's callgrind; slow)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --repeat >= 1, --warmup >= 0")
    if args.instructions and not args.count:
        parser.error("--instructions goes with --count")

    with ExitStack() as stack:
        server: EmbeddedServer | None = None
        if args.url:
            url: str = args.url
        else:
            server = stack.enter_context(EmbeddedServer())
            url = server.url
        print(f"server:  {server_description(url)} at {url}")
        print(f"client:  {client_description()}")
        if args.count:
            count_report(url, args.instructions, args.scripts)
            return 0
        print(f"pinning: {pin(args.pin, [] if server is None else [server])}")
        runner = stack.enter_context(asyncio.Runner())
        all_variants = stack.enter_context(variants(url, runner, args.scripts))
        measure(all_variants, args.seconds, args.repeat, args.warmup)
        report(all_variants, args.seconds, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
