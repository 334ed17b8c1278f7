"""The plots of ``bench.compare``: PNG files under docs/img (matplotlib, imported only here)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from fencelock_tools.benchmark import Spread

from . import IMG
from .run import Results, say


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
