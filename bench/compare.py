"""Every comparison of issue 5 in one run: fencelock against other Redis locks, on the same servers.

    pip install -e '.[bench]'
    python -m bench.compare            # about 7 minutes; writes docs/benchmarks.md and docs/img/
    python -m bench.compare --quick    # a short smoke run (noisy figures)
    python -m bench.compare --server valkey --no-write

It starts its own servers (``fencelock_tools.servers.embedded.EmbeddedServer``): one for P1-P3,
P5 and P6, five for P4; every workload starts on an empty server (``FLUSHALL``). The contenders:
fencelock (sync and asyncio), redis-py's ``Lock`` (default, and ``sleep=0.001``),
python-redis-lock, pottery, aioredlock (``bench/peers.py`` says how each one waits), and the
minimal hand-written loops of ``bench.uncontended`` (one server) and ``bench.redlock`` (Redlock
fan-out). A peer that is not installed or does not import is skipped with the reason, printed and
written to the docs.

The workloads are ``fencelock_tools.benchmark``'s (its docstring gives each one's method): the same
code that ``fencelock bench`` runs for fencelock alone. The method is that of
``bench.uncontended``: warm-up, repetitions that run every variant in a rotated order, medians
with min and max and the run-to-run noise ((max - min) / median). Nothing is asserted: the goals
of issue 5 are reported as met or not met, with the figure.

The output replaces only the section "Contention and peers (issue 5)" of docs/benchmarks.md (the
other sections are left as they are) and writes its plots as docs/img/issue5-*.png (matplotlib,
imported only when writing).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import redis
import redis.asyncio

import fencelock
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
    Spread,
    Variant,
    handoffs,
    local_contention,
    memory,
    renewal,
    time_async,
    time_sync,
    uncontended,
)
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

from . import peers
from . import redlock as redlock_bench
from . import uncontended as uncontended_bench
from ._common import MINIMAL_RELEASE, server_description

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"
HEADING = "## Contention and peers (issue 5)"
REDLOCK_NODES = 5
T = TypeVar("T")


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
    from fencelock_tools.benchmark import describe_renewal

    return describe_renewal(r)


# -- goals -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    workload: str
    goal: str
    figure: str
    met: bool | None  # None: could not be measured


def _variant(variants: Sequence[Variant], name: str) -> Variant | None:
    return next((v for v in variants if v.name == name), None)


def _median(v: Variant | None) -> float:
    return statistics.median(v.rates) if v is not None and v.rates else math.nan


def paired(ours: Variant | None, base: Variant | None) -> float:
    """The median of the per-repetition ratios (runs of one repetition are close in time)."""
    if ours is None or base is None or not ours.rates:
        return math.nan
    return statistics.median(a / b for a, b in zip(ours.rates, base.rates, strict=True))


def _find(items: Sequence[T], pred: Callable[[T], bool]) -> T | None:
    return next((item for item in items if pred(item)), None)


def _p3(results: Sequence[LocalResult], label: str, mode: str) -> LocalResult | None:
    return next((x for x in results if x.label == label and x.mode == mode and x.runs), None)


def goals(r: Results) -> list[Goal]:
    found: list[Goal] = []

    def add(workload: str, goal: str, figure: str, value: float, met: bool) -> None:
        found.append(Goal(workload, goal, figure, None if math.isnan(value) else met))

    # P1
    ours, base = _variant(r.p1, "fencelock sync"), _variant(r.p1, "minimal sync")
    ratio = _median(ours) / _median(base)
    add(
        "P1",
        "sync >= 0.95x the minimal loop",
        f"{ratio:.2f}x (per-run median {paired(ours, base):.2f}x)",
        ratio,
        ratio >= 0.95,
    )
    ours, base = _variant(r.p1, "fencelock async"), _variant(r.p1, "minimal async")
    slower = _median(base) / _median(ours)
    add(
        "P1",
        "asyncio within 1.1x of a minimal asyncio loop (time per cycle)",
        f"{slower:.2f}x the time per cycle ({1 / slower:.2f}x the rate; per-run median"
        f" {paired(ours, base):.2f}x)",
        slower,
        slower <= 1.1,
    )
    # P2
    fl = _find(r.p2, lambda x: x.label == "fencelock" and bool(x.runs))
    prl = _find(r.p2, lambda x: x.label == "python-redis-lock" and bool(x.runs))
    if fl is not None:
        p50 = fl.p50.median
        if prl is not None:
            rel = p50 / prl.p50.median
            add(
                "P2",
                "hand-off p50 <= 0.6x python-redis-lock's",
                f"{ms(p50)} vs {ms(prl.p50.median)}: {rel:.2f}x",
                rel,
                rel <= 0.6,
            )
            tp = fl.throughput.median / prl.throughput.median
            add(
                "P2",
                "throughput >= 1.5x python-redis-lock's",
                f"{fl.throughput.median:,.0f} vs {prl.throughput.median:,.0f}/s: {tp:.2f}x",
                tp,
                tp >= 1.5,
            )
        p99 = fl.p99.median
        add("P2", "hand-off p99 <= 1 ms", ms(p99), p99, p99 <= 0.001)
        share = fl.min_share.median
        add(
            "P2",
            "every worker's share >= 0.8 of a fair share",
            f"lowest share {share:.2f} (median over runs; worst run {fl.min_share.low:.2f})",
            share,
            share >= 0.8,
        )
        add(
            "P2",
            "no lost update (read-modify-write counter)",
            f"{fl.lost_updates} lost",
            0.0,
            fl.lost_updates == 0,
        )
    # P3
    for mode in ("threads", "tasks"):
        mine = _p3(r.p3, "fencelock", mode)
        peer = _p3(r.p3, "redis-py Lock", mode)
        if mine is None:
            continue
        if peer is not None:
            tp = mine.throughput.median / peer.throughput.median
            add(
                "P3",
                f"{mode}: throughput >= 5x redis-py Lock's",
                f"{mine.throughput.median:,.0f} vs {peer.throughput.median:,.0f}/s: {tp:.2f}x",
                tp,
                tp >= 5,
            )
        cmds = mine.commands.median
        add(
            "P3",
            f"{mode}: < 1 Redis command per acquisition",
            f"{cmds:.2f} (commandstats; {mine.processed.median:.2f} total_commands_processed)",
            cmds,
            cmds < 1,
        )
    # P4
    ours, base = _variant(r.p4, "fencelock sync"), _variant(r.p4, "minimal sync")
    ratio = _median(ours) / _median(base)
    add(
        "P4",
        "sync >= 0.9x the minimal fan-out",
        f"{ratio:.2f}x (per-run median {paired(ours, base):.2f}x)",
        ratio,
        ratio >= 0.9,
    )
    # P5
    p5 = _find(r.p5, lambda x: x.label == "fencelock" and x.error is None)
    if p5 is not None:
        add("P5", "<= 2 background threads", f"{p5.threads}", p5.threads, p5.threads <= 2)
        add(
            "P5",
            "<= 1 renewal call per 100 locks per period",
            f"{p5.per_100_locks:.2f}",
            p5.per_100_locks,
            p5.per_100_locks <= 1,
        )
        add("P5", "0 renewals missed", f"{p5.missed}", p5.missed, p5.missed == 0)
    # P6
    for label, limit in (("fencelock", 100), ("fencelock reentrant", 200)):
        m = next((x for x in r.p6 if x.label == label and x.error is None), None)
        if m is not None:
            kind = "reentrant" if "reentrant" in label else "simple"
            fence = m.total - m.lock_key
            add(
                "P6",
                f"<= {limit} bytes per {kind} lock",
                f"{m.lock_key:.0f} B lock key (+ {fence:.0f} B fencing counter, kept per name:"
                f" {m.total:.0f} B)",
                m.lock_key,
                m.lock_key <= limit,
            )
    return found


# -- Markdown --------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{1e3 * seconds:.2f} ms"


def num(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def noise(s: Spread) -> str:
    return "-" if math.isnan(s.noise) else f"{100 * s.noise:.0f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def rate_table(variants: Sequence[Variant], baseline: dict[str, str]) -> list[str]:
    rows = []
    for v in variants:
        s = Spread.of(v.rates)
        mode = "sync" if v.name.endswith(" sync") else "async"
        base = _variant(variants, baseline[mode])
        ratio = s.median / _median(base)
        rows.append(
            [
                v.name,
                num(s.median),
                num(s.low),
                num(s.high),
                noise(s),
                num(1e6 / s.median, 0),
                num(statistics.median(v.cpu), 0),
                f"{ratio:.2f} ({paired(v, base):.2f})",
            ]
        )
    return table(
        [
            "variant",
            "cycles/s (median)",
            "min",
            "max",
            "noise",
            "us/cycle",
            "client CPU us/cycle",
            "/ minimal (per-run median)",
        ],
        rows,
    )


def p2_table(results: Sequence[HandoffResult]) -> list[str]:
    rows = []
    for x in results:
        if x.error or not x.runs:
            rows.append([x.label, f"failed: {x.error}", *["-"] * 8])
            continue
        rows.append(
            [
                x.label,
                num(x.throughput.median),
                f"{num(x.throughput.low)}-{num(x.throughput.high)}",
                ms(x.p50.median),
                ms(x.p99.median),
                f"{x.handoffs:,}",
                f"{100 * x.same_share:.0f}%",
                f"{x.min_share.median:.2f} ({x.min_share.low:.2f})",
                str(x.lost_updates),
                str(x.overlaps),
            ]
        )
    return table(
        [
            "lock",
            "acquisitions/s",
            "min-max",
            "hand-off p50",
            "hand-off p99",
            "hand-offs",
            "re-taken by releaser",
            "lowest share (worst run)",
            "lost updates",
            "overlaps",
        ],
        rows,
    )


def p3_table(results: Sequence[LocalResult]) -> list[str]:
    rows = []
    for x in results:
        if x.error or not x.runs:
            rows.append([x.label, x.mode, f"failed: {x.error}", *["-"] * 6])
            continue
        top = sorted(x.per_command().items(), key=lambda kv: -kv[1])[:4]
        breakdown = ", ".join(f"{k} {v:.2f}" for k, v in top)
        rows.append(
            [
                x.label,
                x.mode,
                num(x.throughput.median),
                f"{num(x.throughput.low)}-{num(x.throughput.high)}",
                f"{x.commands.median:.2f}",
                f"{x.processed.median:.2f}",
                breakdown,
                f"{x.min_share.median:.2f}",
                str(x.lost_updates),
            ]
        )
    return table(
        [
            "lock",
            "workers",
            "acquisitions/s",
            "min-max",
            "commands/acq (commandstats)",
            "total_commands_processed/acq",
            "per command (top 4)",
            "lowest share",
            "lost updates",
        ],
        rows,
    )


def p5_table(results: Sequence[RenewalResult]) -> list[str]:
    rows = []
    for x in results:
        if x.error:
            rows.append([x.label, f"failed: {x.error}", *["-"] * 8])
            continue
        errors = "0"
        if x.background_errors:
            first = (x.first_error or "?")[:80]
            errors = f"{x.background_errors:,} (first: {first})"
        rows.append(
            [
                x.label,
                f"{x.locks:,}",
                f"{x.acquired_in:.1f} s",
                f"{x.period:g} s",
                num(x.per_period, 1),
                f"{x.per_100_locks:.2f}",
                f"{x.missed:,}",
                f"{x.threads:,}",
                f"{x.tasks:,}",
                errors,
            ]
        )
    return table(
        [
            "lock",
            "locks held",
            "acquired in",
            "renewal period",
            "renewal calls/period",
            "per 100 locks/period",
            "missed",
            "+threads",
            "+tasks",
            "errors in the background",
        ],
        rows,
    )


def p6_table(results: Sequence[MemoryResult]) -> list[str]:
    rows = []
    for x in results:
        if x.error:
            rows.append([x.label, f"failed: {x.error}", "-", "-", "-"])
            continue
        keys = "<br>".join(f"`{k}` {v:.0f} B" for k, v in x.per_key.items())
        left = "<br>".join(f"`{k}` ({100 * v:.0f}%)" for k, v in x.left_behind.items()) or "-"
        rows.append([x.label, keys, f"{x.total:.0f}", f"{x.used_memory:.0f}", left])
    return table(
        [
            "lock",
            "MEMORY USAGE per key",
            "bytes per held lock",
            "used_memory growth",
            "left after release",
        ],
        rows,
    )


def git_state() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.replace("-dirty", ", with uncommitted changes")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def environment(server: str, kind: str | None, s: Settings, quick: bool) -> list[str]:
    versions = ", ".join(
        f"{name} {peers.version(dist)}"
        for name, dist in (
            ("python-redis-lock", "python-redis-lock"),
            ("pottery", "pottery"),
            ("aioredlock", "aioredlock"),
            ("aioredis", "aioredis"),
        )
    )
    command = "python -m bench.compare" + (" --quick" if quick else "")
    command += f" --server {kind}" if kind else ""
    return [
        f"Measured {datetime.date.today().isoformat()} with `{command}`"
        f" (`pip install -e '.[bench]'` first) on {os.cpu_count()} CPUs ({cpu_model()}),"
        f" `nproc` = {len(os.sched_getaffinity(0))}; server: {server}, started by the script"
        f" (1 for P1-P3, P5, P6; {REDLOCK_NODES} for P4); Python {platform.python_version()},"
        f" redis-py {redis.__version__}, hiredis"
        f" {'yes' if redis.utils.HIREDIS_AVAILABLE else 'no'}; fencelock"
        f" {fencelock.__version__} (git {git_state()}); {versions}.",
        "",
        f"Runs: P1 and P4 {s.repeat} x {s.seconds:g} s per variant after {s.warmup:g} s of"
        f" warm-up; P2 {s.p2_repeat} x {s.p2_seconds:g} s per lock; P3 {s.p3_repeat} x"
        f" {s.p3_seconds:g} s after {s.warmup:g} s; P5 a window of {s.renew_seconds:g} s,"
        " opened 2 renewal periods after the last acquisition; P6"
        f" {s.memory_locks:,} locks held at once. Medians over the runs, min-max and noise"
        " ((max - min) / median).",
    ]


def section(r: Results, g: list[Goal], env: list[str], s: Settings, plots: dict[str, str]) -> str:
    out: list[str] = [HEADING, ""]
    out += [
        "fencelock against redis-py's `Lock` (default `sleep=0.1`, and `sleep=0.001`),"
        " python-redis-lock, pottery, aioredlock and minimal hand-written loops, on the same"
        " servers in one run. How each peer waits is in `bench/peers.py`; each workload's method"
        " is in the docstring of `src/fencelock_tools/benchmark.py`, the same code"
        " `fencelock bench` runs against your own server. This section is written by"
        f" `python -m bench.compare` (it took {r.minutes:.1f} minutes); re-running it replaces"
        " only this section.",
        "",
        *env,
        "",
    ]
    if r.skipped:
        out += ["Skipped peers:", ""]
        out += [f"- {label}: {reason}" for label, reason in r.skipped.items()]
        out.append("")
    out += ["### Goals", ""]
    out += table(
        ["", "goal", "figure", ""],
        [
            [
                x.workload,
                x.goal,
                x.figure,
                "-" if x.met is None else ("met" if x.met else "**not met**"),
            ]
            for x in g
        ],
    )
    out += [
        "",
        "### P1: uncontended acquire+release, one server",
        "",
        "One client takes and gives back a lock nobody else wants (`acquire(0)`, `release()`).",
        "`minimal` is `bench.uncontended`'s loop: `SET NX PX` and an `EVALSHA` compare-and-delete.",
        "",
        *rate_table(r.p1, {"sync": "minimal sync", "async": "minimal async"}),
        "",
        plots.get("p1", ""),
        "",
        f"### P2: {s.processes} processes, 1 name, hold ~{1e3 * s.hold:g} ms",
        "",
        "Spawned processes re-acquire at once after each release. Hand-off: from the release"
        " call in one process to the next acquire's return in another (system-wide monotonic"
        " clock); re-acquisitions by the process that just released are not hand-offs and are"
        " counted apart. Share: a worker's grants against a fair share (1.0). Lost updates:"
        " grants minus the final value of a GET/+1/SET counter updated under the lock. Overlaps:"
        " a grant that began before the previous one's release (must be 0).",
        "",
        *p2_table(r.p2),
        "",
        plots.get("p2", ""),
        "",
        f"### P3: {s.threads} threads (and {s.threads} asyncio tasks) of one process, 1 name",
        "",
        "One client per process, one lock object per thread or task; re-acquire at once; the"
        " critical section is an in-process read, yield, write. Commands per acquisition: the"
        " server's `INFO commandstats` calls (which include the commands a script runs) and"
        " `total_commands_processed`, without our own `INFO`.",
        "",
        *p3_table(r.p3),
        "",
        plots.get("p3", ""),
        "",
        f"### P4: Redlock over {REDLOCK_NODES} masters, uncontended",
        "",
        "`minimal` is `bench.redlock`'s fan-out (send to all 5, read all 5; 3 needed).",
        "",
        *rate_table(r.p4, {"sync": "minimal sync", "async": "minimal async"}),
        "",
        plots.get("p4", ""),
        "",
        f"### P5: {s.locks:,} auto-renewed locks held by one client",
        "",
        f"ttl {s.renew_ttl:g} s. Renewal calls: `EVAL`/`EVALSHA` the server received in the"
        " window, per the lock's own renewal period. Missed: lock keys gone at the end, or"
        " locks the library declared lost. Errors in the background: exceptions that ended a"
        " thread (or that no task retrieved). The window is a whole number of each lock's"
        " renewal periods. redis-py's `Lock` and pottery have no automatic renewal."
        " python-redis-lock renews from one thread per lock; redis-py 8's connection pools stop"
        " at 100 connections, so it is also run with `max_connections=20000`.",
        "",
        *p5_table(r.p5),
        "",
        plots.get("p5", ""),
        "",
        "### P6: Redis memory per held lock",
        "",
        "Names of 12 characters. `MEMORY USAGE` of every key a held lock has (fencelock: the"
        " lock key, and the fencing counter, which stays after the release: one per name ever"
        " locked), and the growth of `used_memory` per lock.",
        "",
        *p6_table(r.p6),
        "",
        plots.get("p6", ""),
        "",
    ]
    return "\n".join(out).replace("\n\n\n", "\n\n")


def replace_section(doc: str, new: str) -> str:
    """``doc`` with the section under ``HEADING`` (to the next ``## `` heading) replaced."""
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(doc):
        return pattern.sub(lambda _: new.rstrip() + "\n\n", doc, count=1).rstrip() + "\n"
    return doc.rstrip() + "\n\n" + new.rstrip() + "\n"


# -- plots -----------------------------------------------------------------------------------


def plot_all(r: Results) -> dict[str, str]:
    """PNG plots under docs/img; per workload the Markdown that shows it."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except Exception as exc:
        say(f"no plots: matplotlib cannot be imported: {exc}")
        return {}
    IMG.mkdir(parents=True, exist_ok=True)
    shown: dict[str, str] = {}

    def save(fig: Any, key: str, alt: str) -> None:
        fig.tight_layout()
        fig.savefig(IMG / f"issue5-{key}.png", dpi=90)
        plt.close(fig)
        shown[key] = f"![{alt}](img/issue5-{key}.png)"

    def bars(
        ax: Any,
        labels: list[str],
        spreads: list[Spread],
        xlabel: str,
        color: Callable[[str], str],
        log: bool = False,
    ) -> None:
        med = [x.median for x in spreads]
        err = [[x.median - x.low for x in spreads], [x.high - x.median for x in spreads]]
        ax.barh(labels, med, xerr=err, color=[color(label) for label in labels], capsize=3)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        if log:
            ax.set_xscale("log")
        ax.grid(axis="x", alpha=0.3)

    def color(label: str) -> str:
        if label.startswith("fencelock"):
            return "#1f77b4"
        return "#7f7f7f" if label.startswith("minimal") else "#ff7f0e"

    for key, variants, title in (
        ("p1", r.p1, "P1 uncontended, one server"),
        ("p4", r.p4, "P4 Redlock over 5 masters, uncontended"),
    ):
        if variants:
            fig, ax = plt.subplots(figsize=(7, 0.35 * len(variants) + 1.2))
            bars(
                ax,
                [v.name for v in variants],
                [Spread.of(v.rates) for v in variants],
                "acquire+release cycles/s (median, min-max)",
                color,
            )
            ax.set_title(title)
            save(fig, key, title)
    ok2 = [x for x in r.p2 if x.runs]
    if ok2:
        fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(12, 0.4 * len(ok2) + 1.6))
        labels = [x.label for x in ok2]
        bars(a1, labels, [x.throughput for x in ok2], "acquisitions/s", color)
        a1.set_title("P2 throughput, 4 processes")
        y = range(len(ok2))
        a2.barh([i - 0.2 for i in y], [1e3 * x.p50.median for x in ok2], height=0.4, label="p50")
        a2.barh([i + 0.2 for i in y], [1e3 * x.p99.median for x in ok2], height=0.4, label="p99")
        a2.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
        a2.set_yticks(list(y), [])
        a2.invert_yaxis()
        a2.set_xlabel("cross-process hand-off, ms (goal: p99 <= 1 ms)")
        a2.legend(loc="lower right", fontsize="small")
        a2.set_title("P2 hand-off latency")
        a2.grid(axis="x", alpha=0.3)
        bars(a3, labels, [x.min_share for x in ok2], "lowest worker share (fair = 1)", color)
        a3.axvline(0.8, color="black", linewidth=0.8, linestyle="--")
        a3.set_yticklabels([])
        a3.set_title("P2 fairness")
        save(fig, "p2", "P2 throughput, hand-off latency and fairness")
    ok3 = [x for x in r.p3 if x.runs]
    if ok3:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 0.35 * len(ok3) + 1.4))
        labels = [f"{x.label} ({x.mode})" for x in ok3]
        bars(a1, labels, [x.throughput for x in ok3], "acquisitions/s", color)
        a1.set_title("P3 throughput, 8 threads / tasks")
        bars(a2, labels, [x.commands for x in ok3], "Redis commands per acquisition", color)
        a2.set_yticklabels([])
        a2.set_title("P3 commands per acquisition")
        save(fig, "p3", "P3 throughput and commands per acquisition")
    ok5 = [x for x in r.p5 if x.error is None]
    if ok5:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(ok5) + 1.3))
        ax.barh(
            [x.label for x in ok5],
            [x.per_100_locks for x in ok5],
            color=[color(x.label) for x in ok5],
        )
        for i, x in enumerate(ok5):
            added = f"+{x.threads:,} threads" if x.threads else f"+{x.tasks:,} tasks"
            ax.annotate(f"  {x.per_100_locks:.2f}; missed {x.missed:,}; {added}",
                        (x.per_100_locks, i), va="center", fontsize="small")  # fmt: skip
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(0.5, 5000)
        ax.set_xlabel("renewal calls per 100 locks per renewal period (log)")
        ax.set_title(f"P5 {ok5[0].locks:,} auto-renewed locks, one client")
        save(fig, "p5", "P5 renewal calls")
    ok6 = [x for x in r.p6 if x.error is None]
    if ok6:
        fig, ax = plt.subplots(figsize=(7, 0.4 * len(ok6) + 1.2))
        ax.barh(
            [x.label for x in ok6],
            [x.lock_key for x in ok6],
            label="lock key",
            color=[color(x.label) for x in ok6],
        )
        ax.barh(
            [x.label for x in ok6],
            [x.total - x.lock_key for x in ok6],
            left=[x.lock_key for x in ok6],
            label="other keys (fencing counter)",
            color="#c7c7c7",
        )
        ax.invert_yaxis()
        ax.set_xlabel("bytes per held lock (MEMORY USAGE)")
        ax.set_xlim(0, 1.45 * max(x.total for x in ok6))  # room for the legend
        ax.legend(loc="lower right", fontsize="small")
        ax.set_title("P6 Redis memory per held lock")
        save(fig, "p6", "P6 memory per held lock")
    return shown


# -- main ------------------------------------------------------------------------------------


def print_summary(r: Results, g: list[Goal]) -> None:
    print("\nGoals of issue 5:")
    for x in g:
        verdict = "-" if x.met is None else ("met" if x.met else "NOT met")
        print(f"  {x.workload}  {x.goal:<62} {verdict:<8} {x.figure}")
    from fencelock_tools.benchmark import (
        describe_handoff,
        describe_local,
        describe_memory,
        describe_variant,
    )

    for title, lines in (
        ("P1", [f"{v.name}: {describe_variant(v)}" for v in r.p1]),
        ("P2", [f"{x.label}: {describe_handoff(x)}" for x in r.p2]),
        ("P3", [f"{x.label} {x.mode}: {describe_local(x)}" for x in r.p3]),
        ("P4", [f"{v.name}: {describe_variant(v)}" for v in r.p4]),
        ("P5", [f"{x.label}: {describe(x)}" for x in r.p5]),
        ("P6", [f"{x.label}: {describe_memory(x)}" for x in r.p6]),
    ):
        print(f"\n{title}")
        for line in lines:
            print(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description="Every comparison of issue 5 (fencelock vs other Redis locks) in one run.",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (noisy)")
    parser.add_argument(
        "--server",
        choices=("redis", "valkey"),
        default=None,
        help="embedded server binary (default: redis-server if present, else valkey)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ as it is")
    args = parser.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    results = Results()
    started = time.monotonic()
    with ExitStack() as stack:
        binary = find_server(args.server)
        main_server = stack.enter_context(EmbeddedServer(binary))
        nodes = [stack.enter_context(EmbeddedServer(binary)) for _ in range(REDLOCK_NODES)]
        server = server_description(main_server.url)
        say(f"server: {server}; Redlock: {' '.join(n.url for n in nodes)}")
        run_all(main_server.url, [n.url for n in nodes], settings, results)
    results.minutes = (time.monotonic() - started) / 60
    found = goals(results)
    print_summary(results, found)
    if not args.no_write:
        plots = plot_all(results)
        env = environment(server, args.server, settings, args.quick)
        text = section(results, found, env, settings, plots)
        DOC.write_text(replace_section(DOC.read_text(), text))
        say(f"\nwrote {DOC.relative_to(ROOT)} and {len(plots)} plots in {IMG.relative_to(ROOT)}")
    say(f"done in {results.minutes:.1f} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
