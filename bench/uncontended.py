"""Uncontended acquire+release throughput: fencelock against a minimal hand-written lock (issue 2).

    python -m bench.uncontended [--seconds 1] [--repeat 7] [--warmup 0.5] [--url redis://...]
                                [--pin none|same|split]

Four variants, each one client doing acquire+release cycles on a lock nobody else wants:

* ``fencelock sync``: ``lock = client.lock("bench", ttl=10, timeout=0)``; ``lock.acquire(0)``,
  ``lock.release()``.
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

``--pin`` fixes where the processes run (Linux): ``same`` puts the client and the embedded server
on one CPU, ``split`` on two different ones. Unpinned, on a small VM the scheduler moves them
between sharing a CPU and not, which changes the round trip about 2x and makes the rate bimodal.

With ``--url`` the benchmark writes ``fencelock:{bench}:lock``, ``fencelock:{bench}:fence`` (the
fencing counter, left behind) and ``bench:minimal:lock`` in that server's database.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import redis
import redis.asyncio

import fencelock
import fencelock.asyncio
from fencelock._embedded import EmbeddedServer

LOCK_NAME: Final = "bench"
TTL: Final = 10.0
TTL_MS: Final = 10_000
MINIMAL_KEY: Final = "bench:minimal:lock"
SOCKET_TIMEOUT: Final = 5.0  # what LockClient.from_url uses
TOKEN_BYTES: Final = 20
# Cycles between two reads of the clock: the loop overhead stays far below one round trip.
BATCH: Final = 100
GOAL: Final = 0.9

# Compare-and-delete: delete the key only if it still holds our token.
MINIMAL_RELEASE: Final = """\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

SyncCycle = Callable[[], None]
AsyncCycle = Callable[[], Awaitable[None]]


class BenchError(RuntimeError):
    """A cycle did not do what it should (the lock was busy, or the release found no grant)."""


@dataclass(frozen=True, slots=True)
class Sample:
    rate: float  # cycles per second, wall clock
    cpu_us: float  # this process's CPU time per cycle, microseconds


# -- timing loops ----------------------------------------------------------------------------


def time_sync(cycle: SyncCycle, seconds: float) -> Sample:
    """Run ``cycle`` for at least ``seconds``."""
    count = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(BATCH):
            cycle()
        count += BATCH
        now = time.perf_counter()
        if now >= deadline:
            cpu = time.process_time() - cpu_start
            return Sample(count / (now - start), 1e6 * cpu / count)


async def time_async(cycle: AsyncCycle, seconds: float) -> Sample:
    count = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(BATCH):
            await cycle()
        count += BATCH
        now = time.perf_counter()
        if now >= deadline:
            cpu = time.process_time() - cpu_start
            return Sample(count / (now - start), 1e6 * cpu / count)


# -- the variants ----------------------------------------------------------------------------


def fencelock_sync_cycle(client: fencelock.LockClient) -> SyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL, timeout=0)

    def cycle() -> None:
        if not lock.acquire(0):
            raise BenchError(f"fencelock sync: {LOCK_NAME!r} was busy")
        lock.release()

    return cycle


def fencelock_async_cycle(client: fencelock.asyncio.LockClient) -> AsyncCycle:
    lock = client.lock(LOCK_NAME, ttl=TTL, timeout=0)

    async def cycle() -> None:
        if not await lock.acquire(0):
            raise BenchError(f"fencelock async: {LOCK_NAME!r} was busy")
        await lock.release()

    return cycle


def minimal_sync_cycle(client: redis.Redis, sha: str) -> SyncCycle:
    def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not client.set(MINIMAL_KEY, token, nx=True, px=TTL_MS):
            raise BenchError(f"minimal sync: {MINIMAL_KEY!r} was busy")
        if client.evalsha(sha, 1, MINIMAL_KEY, token) != 1:
            raise BenchError(f"minimal sync: {MINIMAL_KEY!r} was not ours at release")

    return cycle


def minimal_async_cycle(client: redis.asyncio.Redis, sha: str) -> AsyncCycle:
    async def cycle() -> None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not await client.set(MINIMAL_KEY, token, nx=True, px=TTL_MS):
            raise BenchError(f"minimal async: {MINIMAL_KEY!r} was busy")
        if await client.evalsha(sha, 1, MINIMAL_KEY, token) != 1:
            raise BenchError(f"minimal async: {MINIMAL_KEY!r} was not ours at release")

    return cycle


@dataclass
class Variant:
    name: str
    measure: Callable[[float], Sample]  # run for that many seconds
    samples: list[Sample] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [s.rate for s in self.samples]

    @property
    def cpu(self) -> list[float]:
        return [s.cpu_us for s in self.samples]


# Connection settings that must be the same for every client (the rest are per-pool objects).
_COMPARED_SETTINGS: Final = ("host", "port", "db", "socket_timeout", "socket_connect_timeout",
                             "parser_class", "username", "password", "ssl")  # fmt: skip


def connection_settings(client: redis.Redis | redis.asyncio.Redis) -> dict[str, Any]:
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    settings = {key: kwargs.get(key) for key in _COMPARED_SETTINGS}
    settings["connection_class"] = pool.connection_class.__name__
    return settings


@contextmanager
def variants(url: str, runner: asyncio.Runner) -> Iterator[list[Variant]]:
    """The four variants, connected to ``url``; all clients are closed on exit."""
    with ExitStack() as stack:
        fl_sync = fencelock.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT)
        stack.callback(fl_sync.close)
        min_sync = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
        )
        stack.callback(min_sync.close)

        # redis.asyncio clients belong to the loop they first ran on: make them inside it.
        async def make_async() -> tuple[fencelock.asyncio.LockClient, redis.asyncio.Redis]:
            return fencelock.asyncio.LockClient.from_url(url, socket_timeout=SOCKET_TIMEOUT), (
                redis.asyncio.Redis.from_url(
                    url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
                )
            )

        fl_async, min_async = runner.run(make_async())
        stack.callback(lambda: runner.run(fl_async.close()))
        stack.callback(lambda: runner.run(min_async.aclose()))

        assert isinstance(fl_sync.redis, redis.Redis)
        assert isinstance(fl_async.redis, redis.asyncio.Redis)
        reference = connection_settings(fl_sync.redis)
        for client in (min_sync, fl_async.redis, min_async):
            settings = connection_settings(client)
            settings["connection_class"] = reference["connection_class"]  # sync vs async class
            if settings != reference:
                raise BenchError(f"connection settings differ: {settings} != {reference}")

        sha: str = min_sync.script_load(MINIMAL_RELEASE)
        fl_sync_cycle = fencelock_sync_cycle(fl_sync)
        fl_async_cycle = fencelock_async_cycle(fl_async)
        min_sync_cycle = minimal_sync_cycle(min_sync, sha)
        min_async_cycle = minimal_async_cycle(min_async, sha)
        yield [
            Variant("fencelock sync", lambda s: time_sync(fl_sync_cycle, s)),
            Variant("minimal sync", lambda s: time_sync(min_sync_cycle, s)),
            Variant("fencelock async", lambda s: runner.run(time_async(fl_async_cycle, s))),
            Variant("minimal async", lambda s: runner.run(time_async(min_async_cycle, s))),
        ]


# -- running and reporting -------------------------------------------------------------------


def order_for(repetition: int, items: list[Variant]) -> list[Variant]:
    """Rotated by the repetition number, reversed on odd ones: over the repetitions each variant
    runs early and late, before and after each other one."""
    shift = repetition % len(items)
    rotated = items[shift:] + items[:shift]
    return rotated[::-1] if repetition % 2 else rotated


def measure(all_variants: list[Variant], seconds: float, repeat: int, warmup: float) -> None:
    for variant in all_variants:
        variant.measure(warmup)
    for repetition in range(repeat):
        for variant in order_for(repetition, all_variants):
            gc.collect()  # start each run from the same heap state
            variant.samples.append(variant.measure(seconds))
        line = "  ".join(f"{v.name}={v.rates[-1]:,.0f}" for v in all_variants)
        sys.stdout.flush()
        print(f"  run {repetition + 1}/{repeat}: {line}", file=sys.stderr, flush=True)


def pin(mode: str, server: EmbeddedServer | None) -> str:
    """Set CPU affinities for ``--pin``; describe what was done."""
    if mode == "none":
        return "none"
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--pin needs os.sched_setaffinity (Linux)")
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "split" and len(cpus) < 2:
        raise SystemExit("--pin split needs two CPUs")
    server_cpu, client_cpu = cpus[0], cpus[0] if mode == "same" else cpus[1]
    os.sched_setaffinity(0, {client_cpu})
    if server is None:
        return f"{mode}: client on CPU {client_cpu}, server not pinned (not started here)"
    for task in os.listdir(f"/proc/{server.pid}/task"):  # every thread of the server
        os.sched_setaffinity(int(task), {server_cpu})
    return f"{mode}: client on CPU {client_cpu}, server on CPU {server_cpu}"


def server_description(url: str) -> str:
    client = redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT)
    try:
        info: dict[str, Any] = client.info("server")
    finally:
        client.close()
    if "valkey_version" in info:
        name, version = "valkey", info["valkey_version"]
    else:
        name, version = info.get("server_name", "redis"), info.get("redis_version", "?")
    executable = info.get("executable") or "?"
    return f"{name} {version} ({executable})"


def spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    noise = 100 * (high - low) / statistics.median(values)
    return f"{low:>9,.0f} {high:>9,.0f} {noise:>7.1f}%"


def report(all_variants: list[Variant], seconds: float, repeat: int) -> float:
    """Print the table; return the sync ratio of medians (the figure the goal is about)."""
    by_name = {v.name: v for v in all_variants}
    print(f"\n{repeat} runs of {seconds:g} s each; cycles/s (one cycle = acquire + release)\n")
    print(
        f"{'variant':<16} {'median':>9} {'min':>9} {'max':>9} {'spread':>8}"
        f" {'us/cycle':>9} {'client CPU us/cycle':>20}"
    )
    for v in all_variants:
        median = statistics.median(v.rates)
        cpu = statistics.median(v.cpu)
        cpu_range = f"{cpu:.1f} ({min(v.cpu):.1f}-{max(v.cpu):.1f})"
        rates = f"{median:>9,.0f} {spread(v.rates)} {1e6 / median:>9.1f}"
        print(f"{v.name:<16} {rates} {cpu_range:>20}")
    print(
        f"\n{'ratio (cycles/s)':<32} {'of medians':>10} {'per-run median':>15}"
        f" {'min':>6} {'max':>6}   {'client CPU ratio':>16}"
    )
    sync_ratio = 0.0
    for kind in ("sync", "async"):
        ours, base = by_name[f"fencelock {kind}"], by_name[f"minimal {kind}"]
        of_medians = statistics.median(ours.rates) / statistics.median(base.rates)
        paired = [a / b for a, b in zip(ours.rates, base.rates, strict=True)]
        cpu_ratio = statistics.median(ours.cpu) / statistics.median(base.cpu)
        label = f"fencelock {kind} / minimal {kind}"
        print(
            f"{label:<32} {of_medians:>10.3f} {statistics.median(paired):>15.3f}"
            f" {min(paired):>6.3f} {max(paired):>6.3f}   {cpu_ratio:>16.2f}"
        )
        if kind == "sync":
            sync_ratio = of_medians
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
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1 or args.warmup < 0:
        parser.error("--seconds must be > 0, --repeat >= 1, --warmup >= 0")

    with ExitStack() as stack:
        server: EmbeddedServer | None = None
        if args.url:
            url: str = args.url
        else:
            server = stack.enter_context(EmbeddedServer())
            url = server.url
        print(f"server:  {server_description(url)} at {url}")
        print(
            f"client:  Python {platform.python_version()}, redis-py {redis.__version__}, "
            f"hiredis {'yes' if redis.utils.HIREDIS_AVAILABLE else 'no'}, "
            f"fencelock {fencelock.__version__}, {os.cpu_count()} CPUs"
        )
        print(f"pinning: {pin(args.pin, server)}")
        runner = stack.enter_context(asyncio.Runner())
        all_variants = stack.enter_context(variants(url, runner))
        measure(all_variants, args.seconds, args.repeat, args.warmup)
        report(all_variants, args.seconds, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
