"""Running the workloads of ``bench.compare``: its settings, the minimal baselines, every contender
on the servers it was given, and the results."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial

import redis
import redis.asyncio

from fencelock_tools.benchmark import (
    FENCELOCK,
    FENCELOCK_REENTRANT,
    FENCELOCK_RENEWING,
    SOCKET_TIMEOUT,
    Contender,
    ExtraVariants,
    HandoffResult,
    LocalResult,
    MemoryResult,
    RenewalResult,
    Variant,
    describe_renewal,
    handoffs,
    local_contention,
    memory,
    renewal,
    time_async,
    time_sync,
    uncontended,
)

from .. import peers
from .. import redlock as redlock_bench
from .. import uncontended as uncontended_bench
from .._common import MINIMAL_RELEASE

REDLOCK_NODES = 5


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
        )


@dataclass
class Results:
    p1: list[Variant] = field(default_factory=list)
    p2: list[HandoffResult] = field(default_factory=list)
    p3: list[LocalResult] = field(default_factory=list)
    p4: list[Variant] = field(default_factory=list)
    p5: list[RenewalResult] = field(default_factory=list)
    p6: list[MemoryResult] = field(default_factory=list)
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


def run_all(url: str, urls: list[str], s: Settings, results: Results) -> None:
    skipped = results.skipped

    def ok(*contenders: Contender) -> list[Contender]:
        return available(contenders, skipped)

    say("\nP1: uncontended acquire+release, one server")
    flush([url])
    results.p1 = uncontended(
        url,
        ok(FENCELOCK, peers.REDIS_PY, peers.PRL, peers.POTTERY, peers.AIOREDLOCK),
        extra=minimal_one_server(url),
        seconds=s.seconds,
        repeat=s.repeat,
        warmup=s.warmup,
        progress=say,
    )
    say(f"\nP2: {s.processes} processes, 1 name, hold {1e3 * s.hold:g} ms")
    flush([url])
    results.p2 = handoffs(
        url,
        ok(FENCELOCK, peers.REDIS_PY, peers.REDIS_PY_1MS, peers.PRL, peers.POTTERY),
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
    results.p4 = uncontended(
        urls,
        ok(FENCELOCK, peers.POTTERY, peers.AIOREDLOCK),
        extra=minimal_fan_out(urls),
        seconds=s.seconds,
        repeat=s.repeat,
        warmup=s.warmup,
        progress=say,
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
    for contender in ok(
        FENCELOCK, FENCELOCK_REENTRANT, peers.REDIS_PY, peers.PRL, peers.POTTERY, peers.AIOREDLOCK
    ):
        flush([url])
        results.p6.append(memory(url, contender, locks=s.memory_locks, progress=say))


def describe(r: RenewalResult) -> str:
    return describe_renewal(r)
