"""What ``python -m bench.regress`` collects, and its Markdown table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fencelock_tools.benchmark import Spread

from . import ROWS, SIDES, Row

# One round of a row on one side: {"lib": figures, "floor": figures}; a row of cycles' figures
# are [rate, client CPU us, server CPU us, server commands] per cycle (bench.trips.Costs), P2's
# and the memory row's a dict each (bench.regress.worker.p2, bench.footprint); P2's floor is
# None when python-redis-lock is not installed.
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
    p2_floor: str | None = None  # why P2 runs without python-redis-lock, if it does

    def add(self, row: str, pair: dict[str, Round]) -> None:
        for side, found in pair.items():
            self.rounds.setdefault(row, {s: [] for s in SIDES})[side].append(found)

    def of(self, row: str, side: str) -> list[Round]:
        return self.rounds.get(row, {}).get(side, [])

    @property
    def unsafe(self) -> dict[str, int]:
        """fencelock's lost updates and overlaps in P2 per side, over every round and P2 row
        (each must be 0)."""
        return {
            side: sum(
                r["lib"]["lost_updates"] + r["lib"]["overlaps"]
                for row in self.rows
                if row.workload == "P2"
                for r in self.of(row.key, side)
            )
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
        if row.workload not in ("P2", "memory"):
            new, old = results.of(row.key, "new"), results.of(row.key, "old")
            # (a floor that ran no cycle in a round, on a starved machine, has no ratio)
            pairs = zip(new, old, strict=True)
            found += [n["floor"][0] / o["floor"][0] for n, o in pairs if o["floor"][0] > 0]
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
    "client CPU us/cycle, old → new (floor)",
    "CPU new/old (min-max)",
    "server CPU us/cycle, old → new (floor)",
    "server commands/cycle, old → new (floor)",
    "round trips, old → new (floor)",
)


def table_line(cells: Sequence[str]) -> str:
    cells = [*cells, *[""] * (len(COLUMNS) - len(cells))]
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def column(rounds: list[Round], which: str, index: int) -> list[float | None]:
    """One figure of every round: ``which`` "lib" or "floor", ``index`` 0 cycles/s, 1 client
    CPU, 2 server CPU, 3 server commands."""
    return [r[which][index] for r in rounds]


def old_new_floor(olds: list[float | None], news: list[float | None],
                  floors: list[float | None], digits: int = 0) -> str:  # fmt: skip
    """ "old → new (floor)", each the median over the rounds (the floor: as the new side's
    worker measured it)."""
    old, new, floor = (number(median(values), digits) for values in (olds, news, floors))
    return f"{old} → {new} ({floor})"


def cycles_line(results: Results, row: Row) -> str:
    old, new = results.of(row.key, "old"), results.of(row.key, "new")

    def to_floor(rounds: list[Round]) -> str:
        return number(ratios(column(rounds, "lib", 0), column(rounds, "floor", 0)).median, 2)

    def costs(index: int, digits: int = 0) -> str:
        figures = column(old, "lib", index), column(new, "lib", index), column(new, "floor", index)
        return old_new_floor(*figures, digits=digits)

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
            costs(1),
            spread_text(ratios(column(new, "lib", 1), column(old, "lib", 1))),
            costs(2),
            costs(3, 1),
            f"{old_trips} → {new_trips} ({floor_trips})" if counted else "",
        ]
    )


def p2_lines(results: Results, row: Row) -> list[str]:
    old, new = results.of(row.key, "old"), results.of(row.key, "new")

    def figures(rounds: list[Round], which: str, key: str) -> list[float | None]:
        return [r[which][key] if r[which] is not None else None for r in rounds]

    def line(label: str, key: str, fmt: Callable[[float], str]) -> list[str]:
        olds, news = figures(old, "lib", key), figures(new, "lib", key)
        to_floor = [
            number(ratios(figures(rounds, "lib", key), figures(rounds, "floor", key)).median, 2)
            for rounds in (old, new)
        ]
        ratio = spread_text(ratios(news, olds))
        return [f"{row.title}: {label}", fmt(median(olds)), fmt(median(news)), ratio, *to_floor]

    def two(v: float) -> str:
        return number(v, 2)

    def costs(key: str, digits: int = 0) -> str:
        found = figures(old, "lib", key), figures(new, "lib", key), figures(new, "floor", key)
        return old_new_floor(*found, digits=digits)

    unsafe = [
        f"{sum(r['lib']['lost_updates'] for r in rounds)}"
        f" / {sum(r['lib']['overlaps'] for r in rounds)}"
        for rounds in (old, new)
    ]
    throughput = [
        *line("throughput (grants/s)", "throughput", number),
        costs("cpu_us"),
        spread_text(ratios(figures(new, "lib", "cpu_us"), figures(old, "lib", "cpu_us"))),
        costs("server_us"),
        costs("commands", 1),
        costs("requests", 2),
    ]
    return [
        table_line(throughput),
        table_line(line("hand-off p50 (ms; lower is better)", "p50_ms", two)),
        table_line(line("hand-off p99 (ms; lower is better)", "p99_ms", two)),
        table_line(line("lowest worker's share of fair", "min_share", two)),
        table_line(line("grants re-taken by their releaser (share)", "retaken", two)),
        table_line([f"{row.title}: lost updates / overlaps (every round; must be 0)", *unsafe]),
    ]


def memory_lines(results: Results, row: Row) -> list[str]:
    """One measurement per side (no rounds); the floor's figure in the label, as it may be 0."""
    (old,), (new,) = results.of(row.key, "old"), results.of(row.key, "new")
    locks = new["lib"]["locks"]

    def line(label: str, key: str, digits: int) -> str:
        floor = new["floor"][key]
        a, b = old["lib"][key], new["lib"][key]
        return table_line(
            [
                f"{row.title}: {label}; floor {number(floor, digits)}",
                number(a, digits),
                number(b, digits),
                # (a count of 0, or used_memory that shrank, has no ratio)
                number(b / a, 2) if a > 0 else "-",
                number(a / old["floor"][key], 2) if old["floor"][key] > 0 else "-",
                number(b / floor, 2) if floor > 0 else "-",
            ]
        )

    return [
        line(f"bytes per held lock (used_memory growth, {locks:,} held)", "held_bytes", 0),
        line("keys per held lock", "held_keys", 2),
        line("bytes per name right after its release", "idle_bytes", 0),
        line("keys per name right after its release", "idle_keys", 2),
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
    if results.p2_floor is not None:
        lines.append(f"- P2 without python-redis-lock, its floor: {results.p2_floor}")
    lines += ["", table_line(COLUMNS), "|---" + "|---:" * (len(COLUMNS) - 1) + "|"]
    for row in results.rows:
        if row.key in results.failed:
            lines.append(table_line([row.title, f"FAILED {results.failed[row.key]}"]))
        elif row.workload == "P2":
            lines += p2_lines(results, row)
        elif row.workload == "memory":
            lines += memory_lines(results, row)
        else:
            lines.append(cycles_line(results, row))
    lines += [
        "",
        "new/old: the median of the per-round ratios (min-max); for rates above 1 is faster,"
        " for hand-off latencies, CPU and memory below 1 is better. x/floor: each side against"
        " the floor its worker measured next to it: the hand-written minimum, or the peer the"
        " row names. Client CPU: the worker's process time per cycle (P2: its 4 processes' per"
        " grant; P3: per acquisition), less disturbed by the machine's other load than the"
        " rates. Server CPU and commands: the servers' used_cpu_sys + used_cpu_user and INFO"
        " commandstats calls (a script's own commands included) over the run, per cycle (P4:"
        " the 5 servers' summed; P2: per grant, the counter's GET and SET left out of the"
        " commands; P3: in the counted window). Round trips: requests written per cycle (P2:"
        " per grant, the counter's GET and SET left out) on the busiest server. The (floor)"
        " figures are the new side's worker's. Memory: one measurement per side after the"
        " rounds (bench.footprint).",
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
