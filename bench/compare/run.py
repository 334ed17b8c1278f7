"""Running the workloads of ``bench.compare``: its settings, the minimal baselines, every contender
on the servers it was given, and the results."""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final

import redis
import redis.asyncio

from fencelock_tools.benchmark import (
    FENCELOCK,
    FENCELOCK_REENTRANT,
    FENCELOCK_RENEWING,
    SOCKET_TIMEOUT,
    Contender,
    ExtraVariants,
    FencelockAsyncLocks,
    FencelockLocks,
    HandoffResult,
    LocalResult,
    MemoryResult,
    RenewalResult,
    Variant,
    describe_renewal,
    handoffs,
    local_contention,
    measure,
    memory,
    plain_client,
    renewal,
    time_async,
    time_sync,
    uncontended_variants,
)

from .. import footprint as footprint_bench
from .. import peers
from .. import redlock as redlock_bench
from .. import uncontended as uncontended_bench
from .._common import MINIMAL_RELEASE
from ..footprint import Footprint
from ..trips import Costs, Counted, ServerWatch, round_trips, watched

REDLOCK_NODES = 5
# P2's fencelock rows: label -> the options of its locks (``client.lock(name, **options)``)
P2_FENCELOCK: Final[Mapping[str, Mapping[str, Any]]] = {
    "fencelock": {},
    "fencelock fair=False": {"fair": False},  # barging (docs/contention.md)
}


@dataclass(frozen=True)
class Settings:
    # P1, P4: short runs, many of them: unpinned, client and server share a CPU or not from
    # moment to moment, which changes a round trip about 2x
    seconds: float = 0.5
    repeat: int = 13
    warmup: float = 0.5
    p2_seconds: float = 3.0
    p2_repeat: int = 5
    p3_seconds: float = 2.0
    p3_repeat: int = 3
    processes: int = 4
    threads: int = 8
    hold: float = 0.001
    locks: int = 10_000  # P5, fencelock and the peers
    renew_ttl: float = 3.0
    renew_seconds: float = 10.0
    memory_locks: int = 2000
    footprint_locks: int = footprint_bench.LOCKS  # P6's used_memory and keys per held lock

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            seconds=0.3,
            repeat=3,
            warmup=0.2,
            p2_seconds=1.0,
            p2_repeat=2,
            p3_seconds=0.5,
            p3_repeat=2,
            locks=1000,
            renew_seconds=3.0,
            memory_locks=300,
            footprint_locks=1000,
        )


@dataclass
class CycleCosts:
    """What a variant of P1 or P4 cost per cycle besides its rate: the servers' CPU and commands
    of each run (``bench.trips``), and its round trips."""

    runs: list[Costs] = field(default_factory=list)
    trips: float | None = None

    def median(self, figure: str) -> float:
        values = [getattr(run, figure) for run in self.runs]
        return statistics.median(values) if values else math.nan


@dataclass
class Results:
    p1: list[Variant] = field(default_factory=list)
    p2: list[HandoffResult] = field(default_factory=list)
    p3: list[LocalResult] = field(default_factory=list)
    p4: list[Variant] = field(default_factory=list)
    p5: list[RenewalResult] = field(default_factory=list)
    p6: list[MemoryResult] = field(default_factory=list)
    costs: dict[str, CycleCosts] = field(default_factory=dict)  # "P1 <variant>", "P4 <variant>"
    footprints: dict[str, Footprint | str] = field(default_factory=dict)  # P6: label -> or error
    skipped: dict[str, str] = field(default_factory=dict)  # peer -> reason
    minutes: float = 0.0


# -- the minimal baselines, from bench.uncontended and bench.redlock --------------------------


def minimal_one_server(url: str) -> ExtraVariants:
    def build(runner: asyncio.Runner, stack: ExitStack) -> list[Variant]:
        client = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
        )
        stack.callback(client.close)
        sha: str = client.script_load(MINIMAL_RELEASE)

        async def make() -> redis.asyncio.Redis:
            return redis.asyncio.Redis.from_url(
                url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
            )

        aclient = runner.run(make())
        stack.callback(lambda: runner.run(aclient.aclose()))
        sync_cycle = uncontended_bench.minimal_sync_cycle(client, sha)
        async_cycle = uncontended_bench.minimal_async_cycle(aclient, sha)
        return [
            Variant("minimal sync", partial(time_sync, sync_cycle)),
            Variant("minimal async", lambda s: runner.run(time_async(async_cycle, s))),
        ]

    return build


def minimal_fan_out(urls: list[str]) -> ExtraVariants:
    def build(runner: asyncio.Runner, stack: ExitStack) -> list[Variant]:
        nodes = redlock_bench.node_clients(urls)
        for node in nodes:
            stack.callback(node.close)
        sha = redlock_bench.load_script(nodes)

        async def make() -> list[redis.asyncio.Redis]:
            timeout = redlock_bench.NODE_SOCKET_TIMEOUT
            return [
                redis.asyncio.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=timeout
                )
                for url in urls
            ]

        anodes = runner.run(make())
        for anode in anodes:
            stack.callback(partial(runner.run, anode.aclose()))
        sync_cycle = redlock_bench.minimal_sync_cycle(nodes, sha)
        async_cycle = redlock_bench.minimal_async_cycle(anodes, sha)
        return [
            Variant("minimal sync", partial(time_sync, sync_cycle)),
            Variant("minimal async", lambda s: runner.run(time_async(async_cycle, s))),
        ]

    return build


# -- running ---------------------------------------------------------------------------------


def say(message: str) -> None:
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)


def available(contenders: Sequence[Contender], skipped: dict[str, str]) -> list[Contender]:
    found = []
    for contender in contenders:
        reason = peers.unavailable(contender)
        if reason is None:
            found.append(contender)
        elif contender.label not in skipped:
            skipped[contender.label] = reason
            say(f"skipping {contender.label}: {reason}")
    return found


def flush(urls: Sequence[str]) -> None:
    for url in urls:
        with redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT) as client:
            client.flushall()


def watched_uncontended(
    target: str | list[str],
    contenders: Sequence[Contender],
    extra: ExtraVariants,
    s: Settings,
    costs: dict[str, CycleCosts],
    workload: str,
) -> list[Variant]:
    """P1 and P4 (``fencelock_tools.benchmark.uncontended``'s variants and method), each run
    under a ``ServerWatch`` of every server; each variant's costs and round trips go in
    ``costs`` as "<workload> <variant>"."""
    urls = [target] if isinstance(target, str) else target
    with ExitStack() as stack:
        runner = stack.enter_context(asyncio.Runner())
        plain = [v for c in contenders for v in uncontended_variants(c, target, runner, stack)]
        plain += extra(runner, stack)
        watch = ServerWatch([stack.enter_context(plain_client(url)) for url in urls])
        pairs = [watched(v, watch) for v in plain]
        variants = [variant for variant, _ in pairs]
        measure(variants, s.seconds, s.repeat, s.warmup, say)
        for original, (variant, runs) in zip(plain, pairs, strict=True):
            # (the first run was the warm-up; the round trips are counted warm)
            found = CycleCosts(runs[-len(variant.samples) :], round_trips(original.measure))
            costs[f"{workload} {variant.name}"] = found
    return variants


def counted(contender: Contender) -> Contender:
    """``contender`` whose P2 processes count their requests and CPU (``bench.trips``)."""
    assert contender.sync is not None
    return replace(contender, sync=partial(Counted, make=contender.sync))


def p2_fencelock() -> list[Contender]:
    """P2's fencelock rows, one per entry of ``P2_FENCELOCK``."""
    return [
        replace(
            FENCELOCK,
            label=label,
            sync=partial(FencelockLocks, **options),
            asyncio=partial(FencelockAsyncLocks, **options),
        )
        for label, options in P2_FENCELOCK.items()
    ]


def footprints(url: str, contenders: Sequence[Contender], s: Settings, results: Results) -> None:
    """P6's ``bench.footprint`` of each contender that has a sync client."""
    for contender in contenders:
        if contender.sync is None:
            results.footprints[contender.label] = "asyncio only"
            continue
        flush([url])
        try:
            with ExitStack() as stack:
                locks = contender.sync(url, footprint_bench.TTL)
                stack.callback(locks.close)
                plain = stack.enter_context(plain_client(url))
                found = footprint_bench.footprint(plain, locks.lock, s.footprint_locks)
        except Exception as exc:
            results.footprints[contender.label] = f"{type(exc).__name__}: {exc}"
            continue
        results.footprints[contender.label] = found
        say(f"  P6 {contender.label}: {found.held_bytes:.0f} B, {found.held_keys:.2f} keys held")


def run_all(url: str, urls: list[str], s: Settings, results: Results) -> None:
    skipped = results.skipped

    def ok(*contenders: Contender) -> list[Contender]:
        return available(contenders, skipped)

    say("\nP1: uncontended acquire+release, one server")
    flush([url])
    results.p1 = watched_uncontended(
        url,
        ok(FENCELOCK, peers.REDIS_PY, peers.PRL, peers.POTTERY, peers.AIOREDLOCK),
        minimal_one_server(url),
        s,
        results.costs,
        "P1",
    )
    say(f"\nP2: {s.processes} processes, 1 name, hold {1e3 * s.hold:g} ms")
    flush([url])
    p2 = [*p2_fencelock(), *ok(peers.REDIS_PY, peers.REDIS_PY_1MS, peers.PRL, peers.POTTERY)]
    results.p2 = handoffs(
        url,
        [counted(contender) for contender in p2],
        processes=s.processes,
        hold=s.hold,
        seconds=s.p2_seconds,
        repeat=s.p2_repeat,
        progress=say,
    )
    say(f"\nP3: {s.threads} threads / tasks, 1 process, 1 name")
    flush([url])
    results.p3 = local_contention(
        url,
        ok(
            FENCELOCK,
            peers.REDIS_PY,
            peers.REDIS_PY_1MS,
            peers.PRL,
            peers.POTTERY,
            peers.AIOREDLOCK,
        ),
        workers=s.threads,
        seconds=s.p3_seconds,
        repeat=s.p3_repeat,
        warmup=s.warmup,
        progress=say,
    )
    say(f"\nP4: Redlock over {len(urls)} masters, uncontended")
    flush(urls)
    results.p4 = watched_uncontended(
        urls,
        ok(FENCELOCK, peers.POTTERY, peers.AIOREDLOCK),
        minimal_fan_out(urls),
        s,
        results.costs,
        "P4",
    )
    say(f"\nP5: {s.locks:,} auto-renewed locks, one client")
    for contender in ok(
        FENCELOCK_RENEWING,
        peers.PRL_RENEWING,
        peers.PRL_RENEWING_BIG_POOL,
        peers.AIOREDLOCK_RENEWING,
    ):
        flush([url])
        result = renewal(
            url, contender, locks=s.locks, ttl=s.renew_ttl, seconds=s.renew_seconds, progress=say
        )
        say(f"  {contender.label}: {describe(result)}")
        results.p5.append(result)
    say(f"\nP6: memory per held lock ({s.memory_locks:,} held at once)")
    p6 = ok(
        FENCELOCK, FENCELOCK_REENTRANT, peers.REDIS_PY, peers.PRL, peers.POTTERY, peers.AIOREDLOCK
    )
    for contender in p6:
        flush([url])
        results.p6.append(memory(url, contender, locks=s.memory_locks, progress=say))
    say(f"\nP6: used_memory and keys, {s.footprint_locks:,} held, then idle")
    footprints(url, p6, s, results)


def describe(r: RenewalResult) -> str:
    return describe_renewal(r)
