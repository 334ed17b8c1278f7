"""What ``python -m bench.regress`` collects, and its Markdown table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fencelock_tools.benchmark import Spread

from . import ROWS, SIDES, Row

# One round of a row on one side: {"lib": [rate, cpu_us], "floor": [rate, cpu_us]}, or P2's
# figures (bench.regress.worker.p2).
Round = dict[str, Any]


@dataclass
class Results:
    rows: list[Row]
    # row key -> side -> one entry per round (only rounds that both sides completed)
    rounds: dict[str, dict[str, list[Round]]] = field(default_factory=dict)
    # side -> row key -> [fencelock's, the floor's] requests per cycle (None: not counted)
    trips: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # row key -> what failed, on which side
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # side -> its hello

    def add(self, row: str, pair: dict[str, Round]) -> None:
        for side, found in pair.items():
            self.rounds.setdefault(row, {s: [] for s in SIDES})[side].append(found)

    def of(self, row: str, side: str) -> list[Round]:
        return self.rounds.get(row, {}).get(side, [])

    @property
    def unsafe(self) -> dict[str, int]:
        """P2's lost updates and overlaps per side, over every round (each must be 0)."""
        return {
            side: sum(r["lost_updates"] + r["overlaps"] for r in self.of("P2", side))
            for side in SIDES
        }


# -- figures ---------------------------------------------------------------------------------


def ratios(news: Sequence[float | None], olds: Sequence[float | None]) -> Spread:
    """Per-round ratios (rounds where either figure is missing or zero are left out)."""
    return Spread.of([n / o for n, o in zip(news, olds, strict=True) if n and o])


def median(values: Sequence[float | None]) -> float:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else math.nan


def floor_noise(results: Results) -> Spread:
    """The new side's floor / the old side's, per round and row: the same code in both workers,
    so an A/A comparison."""
    found: list[float] = []
    for row in results.rows:
        if row.key != "P2":
            new, old = results.of(row.key, "new"), results.of(row.key, "old")
            found += [n["floor"][0] / o["floor"][0] for n, o in zip(new, old, strict=True)]
    return Spread.of(found)


# -- the table -------------------------------------------------------------------------------


def number(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def trips_text(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}".rstrip("0").rstrip(".")


def spread_text(s: Spread, digits: int = 2) -> str:
    if math.isnan(s.median):
        return "-"
    return f"**{s.median:.{digits}f}** ({s.low:.{digits}f}-{s.high:.{digits}f})"


COLUMNS = (
    "workload",
    "old",
    "new",
    "new/old (min-max)",
    "old/floor",
    "new/floor",
    "client CPU us/cycle, old → new",
    "CPU new/old (min-max)",
    "round trips, old → new (floor)",
)


def table_line(cells: Sequence[str]) -> str:
    cells = [*cells, *[""] * (len(COLUMNS) - len(cells))]
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def column(rounds: list[Round], which: str, index: int) -> list[float | None]:
    """One figure of every round: ``which`` "lib" or "floor", ``index`` 0 cycles/s, 1 CPU."""
    return [r[which][index] for r in rounds]


def cycles_line(results: Results, row: Row) -> str:
    old, new = results.of(row.key, "old"), results.of(row.key, "new")

    def to_floor(rounds: list[Round]) -> str:
        return number(ratios(column(rounds, "lib", 0), column(rounds, "floor", 0)).median, 2)

    trips = [results.trips.get(side, {}).get(row.key, [None, None]) for side in SIDES]
    # (P3's runs are not cycles: no round trips per cycle to count)
    counted = trips != [[None, None], [None, None]]
    old_trips, new_trips, floor_trips = (
        trips_text(trips[0][0]),
        trips_text(trips[1][0]),
        trips_text(trips[0][1]),
    )
    return table_line(
        [
            f"{row.title} (cycles/s)",
            number(median(column(old, "lib", 0))),
            number(median(column(new, "lib", 0))),
            spread_text(ratios(column(new, "lib", 0), column(old, "lib", 0))),
            to_floor(old),
            to_floor(new),
            " → ".join(number(median(column(rounds, "lib", 1))) for rounds in (old, new)),
            spread_text(ratios(column(new, "lib", 1), column(old, "lib", 1))),
            f"{old_trips} → {new_trips} ({floor_trips})" if counted else "",
        ]
    )


def p2_lines(results: Results, row: Row) -> list[str]:
    old, new = results.of(row.key, "old"), results.of(row.key, "new")

    def figures(key: str) -> tuple[list[float | None], list[float | None]]:
        return [r[key] for r in old], [r[key] for r in new]

    def line(label: str, key: str, fmt: Callable[[float], str]) -> list[str]:
        olds, news = figures(key)
        ratio = spread_text(ratios(news, olds))
        return [f"{row.title}: {label}", fmt(median(olds)), fmt(median(news)), ratio]

    def two(v: float) -> str:
        return number(v, 2)

    cpu_old, cpu_new = figures("cpu_us")
    requests = " → ".join(trips_text(median(values)) for values in figures("requests"))
    unsafe = [
        f"{sum(r['lost_updates'] for r in rounds)} / {sum(r['overlaps'] for r in rounds)}"
        for rounds in (old, new)
    ]
    throughput = [
        *line("throughput (grants/s)", "throughput", number),
        "",
        "",
        f"{number(median(cpu_old))} → {number(median(cpu_new))}",
        spread_text(ratios(cpu_new, cpu_old)),
        requests,
    ]
    return [
        table_line(throughput),
        table_line(line("hand-off p50 (ms; lower is better)", "p50_ms", two)),
        table_line(line("hand-off p99 (ms; lower is better)", "p99_ms", two)),
        table_line(line("lowest worker's share of fair", "min_share", two)),
        table_line([f"{row.title}: lost updates / overlaps (every round; must be 0)", *unsafe]),
    ]


def markdown(results: Results, info: dict[str, Any]) -> str:
    noise = floor_noise(results)
    lines = [
        f"**`python -m bench.regress {info['ref']}`**: old = {info['old']}, new = {info['new']}",
        "",
        f"- servers: {info['servers']}",
        f"- client: {info['client']}; load average at start {info['load']}",
        f"- {info['method']}; wall time {info['wall']:.0f} s",
        f"- fencelock imported from: old `{info['files']['old']}`, new `{info['files']['new']}`"
        " (removed after the run); bench/ and fencelock_tools: the working tree's, for both",
    ]
    if not math.isnan(noise.median):
        lines.append(
            f"- A/A: the same floors measured by both workers, new/old = {noise.median:.2f}"
            f" ({noise.low:.2f}-{noise.high:.2f}, every row and round): the noise of this run"
        )
    lines += ["", table_line(COLUMNS), "|---" + "|---:" * (len(COLUMNS) - 1) + "|"]
    for row in results.rows:
        if row.key in results.failed:
            lines.append(table_line([row.title, f"FAILED {results.failed[row.key]}"]))
        elif row.key == "P2":
            lines += p2_lines(results, row)
        else:
            lines.append(cycles_line(results, row))
    lines += [
        "",
        "new/old: the median of the per-round ratios (min-max); for rates above 1 is faster,"
        " for hand-off latencies and CPU below 1 is better. x/floor: each side against the"
        " hand-written floor its worker measured next to it (P3: redis-py's Lock). Client CPU:"
        " the worker's process time per cycle (P2: its 4 processes' per grant; P3: per"
        " acquisition), less disturbed by the machine's other"
        " load than the rates. Round trips: requests written per cycle (P2: per grant, the"
        " counter's GET and SET left out) on the busiest server.",
    ]
    return "\n".join(lines)


def as_json(results: Results, info: dict[str, Any]) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        """NaN as null: strict JSON."""
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    noise = floor_noise(results)
    found: dict[str, Any] = clean(
        {
            "info": info,
            "rows": {row.key: row.title for row in ROWS if row in results.rows},
            "rounds": results.rounds,
            "trips": results.trips,
            "failed": results.failed,
            "workers": results.workers,
            "floor_noise": [noise.median, noise.low, noise.high],
        }
    )
    return found
