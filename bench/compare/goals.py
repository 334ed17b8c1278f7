"""The goals of issue 5, each met or not (or not measured) with its figure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fencelock_tools.benchmark import LocalResult, Variant

from ..footprint import Footprint
from .run import Results

T = TypeVar("T")


@dataclass(frozen=True)
class Goal:
    workload: str
    goal: str
    figure: str
    met: bool | None  # None: could not be measured


def find_variant(variants: Sequence[Variant], name: str) -> Variant | None:
    return next((v for v in variants if v.name == name), None)


def median_rate(v: Variant | None) -> float:
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
    ours, base = find_variant(r.p1, "fencelock sync"), find_variant(r.p1, "minimal sync")
    ratio = median_rate(ours) / median_rate(base)
    add(
        "P1",
        "sync >= 0.95x the minimal loop",
        f"{ratio:.2f}x (per-run median {paired(ours, base):.2f}x)",
        ratio,
        ratio >= 0.95,
    )
    ours, base = find_variant(r.p1, "fencelock async"), find_variant(r.p1, "minimal async")
    slower = median_rate(base) / median_rate(ours)
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
    ours, base = find_variant(r.p4, "fencelock sync"), find_variant(r.p4, "minimal sync")
    ratio = median_rate(ours) / median_rate(base)
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


def goals_34(r: Results) -> list[Goal]:
    """Issue 34's goals that this run measures (the primitives' are ``bench.regress``'s)."""
    found: list[Goal] = []

    def add(workload: str, goal: str, ratio: float, met: bool, extra: str = "") -> None:
        figure = "-" if math.isnan(ratio) else f"{ratio:.2f}x{extra}"
        found.append(Goal(workload, goal, figure, None if math.isnan(ratio) else met))

    for workload, mode, name in (("P1", "sync", "sync"), ("P1a", "asyncio", "async")):
        ours = find_variant(r.p1, f"fencelock {name}")
        for base, floor in ((f"redis-py Lock {name}", 1.0), (f"minimal {name}", 0.95)):
            other = find_variant(r.p1, base)
            ratio = median_rate(ours) / median_rate(other)
            extra = f" (per-run median {paired(ours, other):.2f}x)"
            add(workload, f"{mode} >= {floor:g}x {base}", ratio, ratio >= floor, extra)
    fl = _find(r.p2, lambda x: x.label == "fencelock" and bool(x.runs))
    prl = _find(r.p2, lambda x: x.label == "python-redis-lock" and bool(x.runs))
    if fl is not None:
        rel = fl.p50.median / prl.p50.median if prl is not None else math.nan
        add("P2", "fair: hand-off p50 <= 0.6x python-redis-lock's", rel, rel <= 0.6,
            f" ({ms(fl.p50.median)})")  # fmt: skip
        p99 = fl.p99.median
        found.append(Goal("P2", "fair: hand-off p99 <= 1 ms", ms(p99), p99 <= 0.001))
        share = fl.min_share.median
        found.append(Goal("P2", "fair: lowest share >= 0.95", f"{share:.2f}", share >= 0.95))
    barging = _find(r.p2, lambda x: x.label == "fencelock fair=False" and bool(x.runs))
    if barging is not None:
        tp = barging.throughput.median / prl.throughput.median if prl is not None else math.nan
        add("P2", "barging: throughput >= 1.0x python-redis-lock's", tp, tp >= 1.0,
            f" ({barging.throughput.median:,.0f}/s)")  # fmt: skip
    for mode, name in (("sync", "sync"), ("asyncio", "async")):
        ours = find_variant(r.p4, f"fencelock {name}")
        fan_out = find_variant(r.p4, f"minimal {name}")
        ratio = median_rate(ours) / median_rate(fan_out)
        add("P4", f"{mode} >= 0.9x the pipelined fan-out", ratio, ratio >= 0.9,
            f" (per-run median {paired(ours, fan_out):.2f}x)")  # fmt: skip
    mine, peer = r.footprints.get("fencelock"), r.footprints.get("redis-py Lock")
    if isinstance(mine, Footprint) and isinstance(peer, Footprint):
        ratio = mine.held_bytes / peer.held_bytes
        add("memory", "per held lock <= redis-py's Lock (used_memory)", ratio, ratio <= 1.0,
            f" ({mine.held_bytes:.0f} B, {mine.held_keys:.2f} keys; redis-py's"
            f" {peer.held_bytes:.0f} B, {peer.held_keys:.2f})")  # fmt: skip
        found.append(
            Goal(
                "memory",
                "0 once idle (right after the release)",
                f"{mine.idle_bytes:.0f} B, {mine.idle_keys:.2f} keys per name",
                mine.idle_keys == 0,
            )
        )
    return found


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{1e3 * seconds:.2f} ms"
