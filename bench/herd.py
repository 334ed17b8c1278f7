"""Thundering herd: many processes wait on one name; fencelock ``wake="all"`` vs ``"one"``.

    python -m bench.herd                    # 4, 16 and 32 processes; about 5 minutes on 2 CPUs
    python -m bench.herd --quick            # a few seconds: a smoke run (noisy figures)
    python -m bench.herd --processes 8,64 --seconds 2 --repeat 3 --json herd.json

The workload is P2 of ``fencelock_tools.benchmark`` (``handoff_run``, with the same code): N spawned
processes, one ``LockClient`` each, contend for ONE name and hold it ``hold`` (1 ms) per grant,
doing a read-modify-write of a counter in Redis while they hold it. Per wake mode and N:

* throughput (grants/s in the window), the cross-process hand-off latency p50 and p99 (the next
  holder's acquire returned - the previous holder's release called, on the system-wide monotonic
  clock), the lowest worker's share of a fair share, and the share of grants the releaser took
  back itself;
* lost updates (the counter against the grants) and overlaps (a grant that began before the
  previous one was released): both must be 0;
* the cost in Redis per grant, from ``INFO`` snapshots taken just before the start signal and
  after every worker has stopped and closed its client (so over every grant of the run): the
  commands the server ran (INFO commandstats, which counts a script's own commands too; the
  counter's GET and SET, 2 per grant, left out), the EVALSHA calls among them, the acquire
  scripts that failed (EVALSHA - 2: one acquire that won and one release per grant), and the
  server's CPU time (used_cpu_sys + used_cpu_user);
* the workers' waits per grant by how they ended (``client.wait_stats``): wake-ups (a release
  message) and polls (a timer: the fallback re-try, or the pause a releaser takes so that the
  waiter it woke goes first).

With ``wake="all"`` a release wakes every waiting process and each re-tries: the herd shows as
failed acquire scripts per grant growing with N. With ``wake="one"`` the waiters queue in Redis
and a release wakes only the first.

Method: everything runs on one server (started here, empty; or ``--url``, whose other traffic
would then be counted too). After a discarded warm-up run per mode, each of ``repeat``
repetitions runs every N (in an order rotated by the repetition, ``order_for``) and, for each N,
both modes back to back (in an order that alternates with the repetition). Reported: medians
over the repetitions with min and max, and per N the ratio one/all of each repetition's pair of
runs (median, min, max): a difference is larger than the noise when the two modes' min-max
ranges do not overlap. No figure is asserted, but the exit status is 1 when a run failed, lost an
update or overlapped. The output is Markdown (``--json`` also writes every run's figures).

Keys: ``fencelock-bench-herd-<mode>`` (its lock, fencing counter and queue) and
``fencelock-bench:counter``, deleted at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

from fencelock_tools._lib import LockKeys
from fencelock_tools.benchmark import (
    PREFIX,
    FencelockLocks,
    HandoffResult,
    HandoffRun,
    Spread,
    SyncFactory,
    handoff_run,
    order_for,
    percentile,
    plain_client,
    to_stderr,
)
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

from ._common import client_description, server_description

MODES: Final = ("all", "one")
# per grant, one acquire script that won and one release script: the rest of the EVALSHA calls
# are acquires that found the lock taken
SCRIPTS_PER_GRANT: Final = 2
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    processes: tuple[int, ...] = (4, 16, 32)
    seconds: float = 3.0  # window of one run
    repeat: int = 6
    hold: float = 0.001
    warmup: float = 1.0  # one discarded run per mode at the smallest N (0: none)

    @classmethod
    def quick(cls) -> Settings:
        return cls(processes=(2, 4), seconds=0.5, repeat=1, warmup=0.0)


def factory(mode: str) -> SyncFactory:
    """A client per process with ``wake=mode`` (a partial: pickled into spawned processes)."""
    return partial(FencelockLocks, client_options={"wake": mode})


def lock_name(mode: str) -> str:
    return f"{PREFIX}-herd-{mode}"


def label(mode: str) -> str:
    return f'wake="{mode}"'


def modes_for(repetition: int) -> tuple[str, ...]:
    # (order_for with two items gives the same order on every repetition: rotating by one and
    # reversing cancel out)
    return MODES if repetition % 2 == 0 else MODES[::-1]


Results = dict[tuple[str, int], HandoffResult]  # (mode, processes) -> result


def run(url: str, s: Settings, progress: Progress | None = to_stderr) -> Results:
    results: Results = {
        (mode, n): HandoffResult(label(mode), n, s.hold) for n in s.processes for mode in MODES
    }
    try:
        if s.warmup > 0:
            for mode in MODES:  # spawned interpreters, the server's script cache, the OS cache
                handoff_run(factory(mode), url, lock_name(mode), min(s.processes), s.hold, s.warmup)
        for repetition in range(s.repeat):
            for n in order_for(repetition, s.processes):
                for mode in modes_for(repetition):
                    result = results[mode, n]
                    if result.error is not None:
                        continue
                    try:
                        result.runs.append(
                            handoff_run(factory(mode), url, lock_name(mode), n, s.hold, s.seconds)
                        )
                    except Exception as exc:
                        result.error = f"{type(exc).__name__}: {exc}"
                    if progress is not None:
                        progress(f"  run {repetition + 1}/{s.repeat}: {n:>3} processes,"
                                 f" {result.label:<11} {describe_last(result)}")  # fmt: skip
    finally:
        with plain_client(url) as plain:
            for mode in MODES:
                keys = LockKeys.for_name(lock_name(mode))
                plain.delete(keys.lock, keys.fence, keys.queue)
    return results


# -- figures ---------------------------------------------------------------------------------


def failed_acquires(r: HandoffRun) -> float:
    return r.calls_per_acquisition("evalsha") - SCRIPTS_PER_GRANT


def run_figures(r: HandoffRun) -> dict[str, float]:
    """One run's figures, by name (the JSON output, and the ratios between the modes)."""
    return {
        "throughput": r.throughput,
        "handoff_p50": percentile(r.handoffs, 50),
        "handoff_p99": percentile(r.handoffs, 99),
        "min_share": min(r.shares) if r.shares else math.nan,
        "same_share": r.same / r.total if r.total else math.nan,
        "commands_per_acquisition": r.commands_per_acquisition,
        "evalsha_per_acquisition": r.calls_per_acquisition("evalsha"),
        "scripts_per_acquisition": (
            r.per_grant(r.server.script_calls) if r.server is not None else math.nan
        ),
        "failed_acquires_per_grant": failed_acquires(r),
        "server_cpu_us_per_acquisition": r.cpu_us_per_acquisition,
        "wakeups_per_acquisition": r.waits_per_acquisition("wakeups"),
        "polls_per_acquisition": r.waits_per_acquisition("polls"),
    }


def spread(result: HandoffResult, figure: str) -> Spread:
    values = [run_figures(r)[figure] for r in result.runs]
    return Spread.of([v for v in values if not math.isnan(v)])


def describe_last(result: HandoffResult) -> str:
    if result.error is not None:
        return f"failed: {result.error}"
    f = run_figures(result.runs[-1])
    return (
        f"{f['throughput']:7,.0f}/s  p50 {1e3 * f['handoff_p50']:5.2f} ms"
        f"  p99 {1e3 * f['handoff_p99']:6.2f} ms  {f['commands_per_acquisition']:6.1f} cmd/acq"
        f"  {f['failed_acquires_per_grant']:5.1f} failed acquires/grant"
        f"  {f['server_cpu_us_per_acquisition']:5.0f} us CPU/acq"
    )


# -- Markdown --------------------------------------------------------------------------------


def num(value: float, digits: int) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def cell(s: Spread, digits: int = 0, scale: float = 1.0) -> str:
    if math.isnan(s.median):
        return "-"
    low, high = num(scale * s.low, digits), num(scale * s.high, digits)
    return f"{num(scale * s.median, digits)} ({low}-{high})"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


# (column, figure, digits, scale) of the two main tables
SPEED: Final = (
    ("acquisitions/s", "throughput", 0, 1.0),
    ("hand-off p50, ms", "handoff_p50", 2, 1e3),
    ("hand-off p99, ms", "handoff_p99", 2, 1e3),
    ("min share", "min_share", 2, 1.0),
    ("re-taken by releaser", "same_share", 2, 1.0),
)
COST: Final = (
    ("commands/acq", "commands_per_acquisition", 1, 1.0),
    ("EVALSHA/acq", "evalsha_per_acquisition", 2, 1.0),
    ("failed acquires/grant", "failed_acquires_per_grant", 2, 1.0),
    ("server CPU, us/acq", "server_cpu_us_per_acquisition", 0, 1.0),
    ("wake-ups/acq", "wakeups_per_acquisition", 2, 1.0),
    ("polls/acq", "polls_per_acquisition", 2, 1.0),
)
# (column, figure, lower is better) of the ratio table
RATIOS: Final = (
    ("acquisitions/s", "throughput", False),
    ("hand-off p50", "handoff_p50", True),
    ("hand-off p99", "handoff_p99", True),
    ("min share", "min_share", False),
    ("commands/acq", "commands_per_acquisition", True),
    ("server CPU/acq", "server_cpu_us_per_acquisition", True),
)


def ordered(results: Results) -> list[tuple[int, str, HandoffResult]]:
    return [(n, mode, r) for (mode, n), r in sorted(results.items(), key=lambda i: i[0][::-1])]


def pairs(results: Results, n: int, figure: str) -> list[float]:
    """one/all of each repetition's pair of runs at ``n`` processes."""
    one, every = results["one", n], results["all", n]
    found = []
    for a, b in zip(one.runs, every.runs, strict=False):
        x, y = run_figures(a)[figure], run_figures(b)[figure]
        if y and not (math.isnan(x) or math.isnan(y)):
            found.append(x / y)
    return found


def verdict(results: Results, n: int, figure: str, lower_better: bool) -> str:
    """Which mode wins on ``figure``, and whether by more than the noise (the modes' min-max
    ranges over the repetitions do not overlap)."""
    one, every = spread(results["one", n], figure), spread(results["all", n], figure)
    if math.isnan(one.median) or math.isnan(every.median):
        return "-"
    if one.median == every.median:
        return "tie"
    one_wins = (one.median < every.median) == lower_better
    winner = "one" if one_wins else "all"
    if min(len(results["one", n].runs), len(results["all", n].runs)) < 2:
        return f"{winner} (one run: noise unknown)"
    separated = one.high < every.low or every.high < one.low
    return f"{winner}{'' if separated else ' (within noise)'}"


def markdown(results: Results, header: Sequence[str]) -> str:
    lines = [*header, ""]
    rows = ordered(results)
    failed = [(n, mode, r.error) for n, mode, r in rows if r.error]
    for n, mode, error in failed:
        lines.append(f"**{n} processes, {label(mode)} failed**: {error}")
    if failed:
        lines.append("")
    lines += ["Speed and fairness (median over the repetitions, min-max in brackets):", ""]
    lines += table(
        ["N", "wake", *(c for c, *_ in SPEED), "lost updates", "overlaps", "hand-offs"],
        [
            [
                str(n),
                mode,
                *(cell(spread(r, f), d, k) for _, f, d, k in SPEED),
                str(r.lost_updates),
                str(r.overlaps),
                f"{r.handoffs:,}",
            ]
            for n, mode, r in rows
        ],
    )
    lines += ["", "Cost in Redis per acquisition (the counter's GET and SET left out):", ""]
    lines += table(
        ["N", "wake", *(c for c, *_ in COST)],
        [[str(n), mode, *(cell(spread(r, f), d, k) for _, f, d, k in COST)] for n, mode, r in rows],
    )
    ns = sorted({n for n, _, _ in rows})
    lines += [
        "",
        'wake="one" / wake="all", per repetition (its two runs back to back): median (min-max)'
        ' of the ratios, then the winner ("within noise": the two modes\' min-max ranges'
        " overlap):",
        "",
    ]
    ratio_rows = []
    for n in ns:
        cells = []
        for _, figure, lower in RATIOS:
            ratios = pairs(results, n, figure)
            s = Spread.of(ratios)
            cells.append(f"{cell(s, 2)}: {verdict(results, n, figure, lower)}" if ratios else "-")
        ratio_rows.append([str(n), *cells])
    lines += table(["N", *(c for c, *_ in RATIOS)], ratio_rows)
    commands = sorted({c for _, _, r in rows for c in r.per_command()})
    lines += ["", "Commands per acquisition by name (medians; scripts' own commands counted):", ""]
    lines += table(
        ["command", *(f"{n} {mode}" for n, mode, _ in rows)],
        [[c, *(num(r.per_command().get(c, 0.0), 2) for _, _, r in rows)] for c in commands],
    )
    return "\n".join(lines) + "\n"


def as_json(results: Results, info: dict[str, Any]) -> dict[str, Any]:
    def clean(value: float) -> float | None:
        return None if math.isnan(value) else value

    found = []
    for n, mode, r in ordered(results):
        runs = []
        for x in r.runs:
            figures = {k: clean(v) for k, v in run_figures(x).items()}
            calls = {} if x.server is None else x.server.calls
            runs.append(
                {
                    "acquisitions": x.acquisitions,
                    "total": x.total,
                    "lost_updates": x.lost_updates,
                    "overlaps": x.overlaps,
                    **figures,
                    "calls": calls,
                    "server_cpu_s": None if x.server is None else clean(x.server.cpu),
                    "waits": x.waits,
                }
            )
        found.append(
            {
                "mode": mode,
                "processes": n,
                "hold": r.hold,
                "error": r.error,
                "lost_updates": r.lost_updates,
                "overlaps": r.overlaps,
                "runs": runs,
            }
        )
    return {**info, "results": found}


# -- main ------------------------------------------------------------------------------------


def processes_list(text: str) -> tuple[int, ...]:
    try:
        found = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not found or min(found) < 2:
        raise argparse.ArgumentTypeError("give numbers of processes >= 2, e.g. 4,16,32")
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.herd",
        description='N processes contend for one name: fencelock wake="all" against wake="one".',
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: a smoke run")
    parser.add_argument("--processes", type=processes_list, help="numbers of processes (4,16,32)")
    parser.add_argument("--seconds", type=float, help="window of one run (3)")
    parser.add_argument("--repeat", type=int, help="repetitions (6)")
    parser.add_argument("--hold", type=float, help="hold per grant, s (0.001)")
    parser.add_argument("--warmup", type=float, help="discarded run per mode, s (1; 0: none)")
    parser.add_argument("--url", help="an existing server (default: start one here, empty)")
    parser.add_argument(
        "--server",
        choices=("redis", "valkey"),
        default=None,
        help="embedded server binary (default: redis-server if present, else valkey)",
    )
    parser.add_argument("--json", type=Path, help="also write every run's figures there")
    args = parser.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    chosen = {
        k: v
        for k, v in {
            "processes": args.processes,
            "seconds": args.seconds,
            "repeat": args.repeat,
            "hold": args.hold,
            "warmup": args.warmup,
        }.items()
        if v is not None
    }
    s = Settings(**{**asdict(settings), **chosen})
    if s.repeat < 1 or s.seconds <= 0 or s.hold < 0:
        parser.error("--repeat must be >= 1, --seconds > 0 and --hold >= 0")
    started = time.monotonic()
    with ExitStack() as stack:
        url = args.url or stack.enter_context(EmbeddedServer(find_server(args.server))).url
        server = server_description(url)
        to_stderr(f"server: {server} at {url}")
        results = run(url, s)
    minutes = (time.monotonic() - started) / 60
    command = shlex.join(["python", "-m", "bench.herd", *argv])
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    header = [
        f"- date: {now}",
        f"- server: {server}" + ("" if args.url else " (embedded, started empty)"),
        f"- client: {client_description()}",
        f"- command: `{command}` ({minutes:.1f} minutes)",
        f"- runs: {s.repeat} repetitions x {s.seconds:g} s per (N, mode), hold"
        f" {1e3 * s.hold:g} ms, {s.warmup:g} s warm-up run per mode; N = "
        + ", ".join(map(str, s.processes)),
    ]
    print(markdown(results, header), end="")
    if args.json is not None:
        info = {
            "date": now,
            "server": server,
            "client": client_description(),
            "command": command,
            "minutes": minutes,
            "settings": asdict(s),
        }
        args.json.write_text(json.dumps(as_json(results, info), indent=1) + "\n")
    failed = any(r.error or r.lost_updates or r.overlaps for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
