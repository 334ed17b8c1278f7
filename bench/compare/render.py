"""The Markdown section "Contention and peers (issue 5)" of docs/benchmarks.md: the goals, one table
per workload, the environment, and the plots' links."""

from __future__ import annotations

import datetime
import math
import os
import platform
import re
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path

import redis

import fencelock
from fencelock_tools.benchmark import (
    COUNTER_COMMANDS,
    HandoffResult,
    LocalResult,
    MemoryResult,
    RenewalResult,
    Spread,
    Variant,
)

from .. import peers
from ..footprint import TTL as footprint_ttl
from ..footprint import Footprint
from . import ROOT
from .goals import Goal, find_variant, median_rate, ms, paired
from .run import REDLOCK_NODES, CycleCosts, Results, Settings

HEADING = "## Contention and peers (issue 5)"


def num(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def noise(s: Spread) -> str:
    return "-" if math.isnan(s.noise) else f"{100 * s.noise:.0f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def trips_text(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}".rstrip("0").rstrip(".")


def rate_table(
    variants: Sequence[Variant],
    baseline: dict[str, str],
    costs: dict[str, CycleCosts],
    workload: str,
    peer: dict[str, str] | None = None,
) -> list[str]:
    """One line per variant: its rate, client and server CPU, server commands and round trips
    per cycle, and its ratio to the ``baseline`` of its mode (and to the ``peer``)."""
    rows = []
    for v in variants:
        s = Spread.of(v.rates)
        mode = "sync" if v.name.endswith(" sync") else "async"
        cost = costs.get(f"{workload} {v.name}", CycleCosts())
        ratios = []
        for against in (baseline, *([peer] if peer else [])):
            base = find_variant(variants, against[mode])
            ratios.append(f"{s.median / median_rate(base):.2f} ({paired(v, base):.2f})")
        rows.append(
            [
                v.name,
                num(s.median),
                num(s.low),
                num(s.high),
                noise(s),
                num(1e6 / s.median, 0),
                num(statistics.median(v.cpu), 0),
                num(cost.median("server_us"), 0),
                num(cost.median("commands"), 1),
                trips_text(cost.trips),
                *ratios,
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
            "server CPU us/cycle",
            "server commands/cycle",
            "round trips/cycle",
            "/ minimal (per-run median)",
            *(["/ redis-py Lock (per-run median)"] if peer else []),
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
                num(x.waits("cpu_us").median, 0),
                num(x.server_cpu.median, 0),
                num(x.commands.median, 1),
                num(x.waits("requests").median - COUNTER_COMMANDS, 2),
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
            "client CPU us/grant",
            "server CPU us/grant",
            "server commands/grant",
            "round trips/grant",
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


def footprint_cells(found: Footprint | str | None) -> list[str]:
    if not isinstance(found, Footprint):
        return [found or "-", "-", "-", "-"]
    return [
        f"{found.held_bytes:.0f}",
        f"{found.held_keys:.2f}",
        f"{found.idle_bytes:.0f}",
        f"{found.idle_keys:.2f}",
    ]


def p6_table(results: Sequence[MemoryResult], footprints: dict[str, Footprint | str]) -> list[str]:
    rows = []
    for x in results:
        own = footprint_cells(footprints.get(x.label))
        if x.error:
            rows.append([x.label, f"failed: {x.error}", "-", "-", "-", *own])
            continue
        keys = "<br>".join(f"`{k}` {v:.0f} B" for k, v in x.per_key.items())
        left = "<br>".join(f"`{k}` ({100 * v:.0f}%)" for k, v in x.left_behind.items()) or "-"
        rows.append([x.label, keys, f"{x.total:.0f}", f"{x.used_memory:.0f}", left, *own])
    return table(
        [
            "lock",
            "MEMORY USAGE per key",
            "bytes per held lock",
            "used_memory growth",
            "left after release",
            "used_memory per held lock (bench.footprint)",
            "keys per held lock",
            "used_memory per name right after release",
            "keys per name right after release",
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
        f" (`pip install -e '.[bench]' -e ./tools/fencelock-tools` first) on {os.cpu_count()}"
        f" CPUs ({cpu_model()}),"
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


def goals_table(found: list[Goal]) -> list[str]:
    return table(
        ["", "goal", "figure", ""],
        [
            [
                x.workload,
                x.goal,
                x.figure,
                "-" if x.met is None else ("met" if x.met else "**not met**"),
            ]
            for x in found
        ],
    )


def section(
    r: Results,
    g: list[Goal],
    g34: list[Goal],
    env: list[str],
    s: Settings,
    plots: dict[str, str],
) -> str:
    out: list[str] = [HEADING, ""]
    out += [
        "fencelock against redis-py's `Lock` (default `sleep=0.1`, and `sleep=0.001`),"
        " python-redis-lock, pottery, aioredlock and minimal hand-written loops, on the same"
        " servers in one run. How each peer waits is in `bench/peers.py`; each workload's method"
        " is in the docstring of `tools/fencelock-tools/src/fencelock_tools/benchmark.py`, the"
        " same code `fencelock bench` runs against your own server. This section is written by"
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
    out += ["### Goals", "", *goals_table(g), ""]
    out += ["### Goals of issue 34", "", *goals_table(g34), ""]
    out += [
        "",
        "### P1: uncontended acquire+release, one server",
        "",
        "One client takes and gives back a lock nobody else wants (`acquire(0)`, `release()`).",
        "`minimal` is `bench.uncontended`'s loop: `SET NX PX` and an `EVALSHA` compare-and-delete."
        " Server CPU: the server's `used_cpu_sys + used_cpu_user` over each run, per cycle;"
        " server commands: `INFO commandstats` calls (a script's own commands included); round"
        " trips: the requests the client wrote per cycle (`bench/trips.py`; `?`: a client that"
        " does not write through redis-py's connections).",
        "",
        *rate_table(
            r.p1,
            {"sync": "minimal sync", "async": "minimal async"},
            r.costs,
            "P1",
            {"sync": "redis-py Lock sync", "async": "redis-py Lock async"},
        ),
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
        " a grant that began before the previous one's release (must be 0). Per grant: the 4"
        " processes' CPU, the server's CPU and commands (the counter's GET and SET left out),"
        " and the requests written (the same two left out).",
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
        "`minimal` is `bench.redlock`'s fan-out (send to all 5, read all 5; 3 needed). Server"
        " CPU and commands: the 5 servers' summed; round trips: on the busiest server (a"
        " request written to the 5 at once counts 1).",
        "",
        *rate_table(r.p4, {"sync": "minimal sync", "async": "minimal async"}, r.costs, "P4"),
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
        " lock key, and the fencing counter, which stays after the release until it expires),"
        f" and the growth of `used_memory` per lock, {s.memory_locks:,} held. Then"
        f" `bench.footprint`, {s.footprint_locks:,} held at once (leases of"
        f" {footprint_ttl:g} s): the growth of `used_memory` and of the keys per held lock,"
        " and what is left per name right after every lock was released (the keys counted,"
        " whatever their names; asyncio-only clients are not measured).",
        "",
        *p6_table(r.p6, r.footprints),
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
