"""``python -m bench.regress REF``: see the package's docstring."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import redis

from fencelock_tools.benchmark import READY_TIMEOUT, order_for, server_description
from fencelock_tools.servers.embedded import EmbeddedServer, ServerNotFound, find_server

from .. import peers
from . import DATABASES, ROWS, WORKLOADS, Row
from .report import Results, as_json, markdown
from .sides import (
    RegressError,
    Source,
    Worker,
    copy_working_tree,
    ref_source,
    unpack_ref,
    working_tree_source,
)

MASTERS: Final = 5  # P4
PROCESSES: Final = 4  # P2
HOLD: Final = 0.001  # P2, s
# a worker connects, warms every variant up and counts round trips before it answers
STARTUP_TIMEOUT: Final = 300.0
MEMORY_TIMEOUT: Final = 600.0  # 10,000 locks taken and given back, one by one, on a loaded box


@dataclass(frozen=True)
class Settings:
    rounds: int = 8  # even: each side goes first as often
    seconds: float = 0.25  # per variant per round
    p2_seconds: float = 1.0
    warmup: float = 0.3
    memory_locks: int = 10_000

    @classmethod
    def quick(cls) -> Settings:
        return cls(rounds=4, seconds=0.1, p2_seconds=0.5, warmup=0.1, memory_locks=2000)

    def describe(self, workloads: Sequence[str]) -> str:
        p2 = (
            f" (P2: one run of {self.p2_seconds:g} s, {PROCESSES} processes, hold"
            f" {1e3 * HOLD:g} ms)"
            if "P2" in workloads
            else ""
        )
        memory = (
            f"; memory: {self.memory_locks:,} locks held at once, once per side after the rounds"
            if "memory" in workloads
            else ""
        )
        return (
            f"{self.rounds} rounds; in each, per workload, old's and new's fencelock runs back to"
            f" back, then their floors (which side, and which pair, goes first alternates);"
            f" {self.seconds:g} s per run{p2}, after {self.warmup:g} s of warm-up; medians over"
            f" the rounds{memory}"
        )


def say(message: str) -> None:
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)


def with_db(url: str, db: int) -> str:
    return f"{url.rsplit('/', 1)[0]}/{db}"


def client_description() -> str:
    hiredis = "yes" if redis.utils.HIREDIS_AVAILABLE else "no"
    return (
        f"Python {platform.python_version()}, redis-py {redis.__version__}, hiredis {hiredis},"
        f" {os.cpu_count()} CPUs"
    )


def start_workers(
    stack: ExitStack,
    sources: Sequence[Source],
    roots: dict[str, Path],
    config: dict[str, Any],
    results: Results,
) -> dict[str, Worker]:
    """Both workers, started at once; each one's hello checked."""
    workers = {}
    for source in sources:
        db = DATABASES[source.label]
        own = {
            **config,
            "url": with_db(config["url"], db),
            "redlock": [with_db(url, db) for url in config["redlock"]],
        }
        worker = Worker(source, roots[source.label], own)
        stack.callback(worker.close)
        workers[source.label] = worker
    for label, worker in workers.items():
        hello = worker.read(STARTUP_TIMEOUT)
        if "error" in hello:
            raise RegressError(f"the {label} side: {hello['error']}")
        found = Path(hello["fencelock"]).resolve()
        if not found.is_relative_to(worker.root.resolve()):  # (the worker checked too)
            raise RegressError(f"the {label} side imported fencelock from {found}")
        results.workers[label] = hello
        results.trips[label] = hello["trips"]
        for row, error in hello["failed"].items():
            results.failed.setdefault(row, f"on the {label} side: {error}")
    return workers


class WorkloadFailed(RuntimeError):
    """A row failed on one side (the message says which, and why)."""


def ask(worker: Worker, request: dict[str, Any], timeout: float) -> Any:
    reply = worker.request(request, timeout)
    if "error" in reply:
        raise WorkloadFailed(f"on the {worker.label} side: {reply['error']}")
    return reply["result"]


def side_by_side(
    sides: list[Worker], floors_first: bool, floor: bool = True
) -> list[tuple[Worker, str]]:
    """The runs of one round of a row: A's and B's fencelock back to back, then B's and A's
    floors (or the floors first), so that each pair compared is measured side by side."""
    a, b = sides
    if not floor:
        return [(a, "lib"), (b, "lib")]
    first, second = ("floor", "lib") if floors_first else ("lib", "floor")
    return [(a, first), (b, first), (b, second), (a, second)]


def cycles_round(
    row: Row, sides: list[Worker], floors_first: bool, settings: Settings
) -> dict[str, Any]:
    found: dict[str, Any] = {worker.label: {} for worker in sides}
    for worker, which in side_by_side(sides, floors_first):
        request = {"op": "measure", "row": row.key, "which": which, "seconds": settings.seconds}
        found[worker.label][which] = ask(worker, request, READY_TIMEOUT + 4 * settings.seconds)
    return found


def p2_round(
    row: Row, sides: list[Worker], floors_first: bool, settings: Settings, floor: bool
) -> dict[str, Any]:
    """A P2 round: fencelock's runs, and python-redis-lock's when it is installed."""
    found: dict[str, Any] = {worker.label: {"floor": None} for worker in sides}
    timeout = 3 * READY_TIMEOUT + settings.p2_seconds  # spawns its processes, which may be slow
    for worker, which in side_by_side(sides, floors_first, floor):
        request = {"op": "p2", "row": row.key, "which": which, "seconds": settings.p2_seconds}
        found[worker.label][which] = ask(worker, request, timeout)
    return found


def memory_pass(row: Row, workers: dict[str, Worker], settings: Settings) -> dict[str, Any]:
    """The memory row, once per side (a count, not a rate: no rounds), in the order of a
    round."""
    found: dict[str, Any] = {label: {} for label in workers}
    for worker, which in side_by_side([workers["old"], workers["new"]], floors_first=False):
        request = {"op": "memory", "which": which, "locks": settings.memory_locks}
        found[worker.label][which] = ask(worker, request, MEMORY_TIMEOUT)
    return found


def run_rounds(
    workers: dict[str, Worker],
    rows: list[Row],
    settings: Settings,
    results: Results,
    started: float,
) -> None:
    """Every round runs every row (in an order rotated by the round) on both sides, which goes
    first alternating; a row that fails on a side is not run again. Then the memory row."""
    p2_floor = results.p2_floor is None
    timed = [row for row in rows if row.workload != "memory"]
    for round_ in range(settings.rounds if timed else 0):
        # every row runs every round: alternating by round alternates each row's runs
        sides = [workers["old"], workers["new"]][:: 1 if round_ % 2 == 0 else -1]
        floors_first = round_ // 2 % 2 == 1  # of period 4, so all four orders come in turn
        for row in order_for(round_, timed):
            if row.key in results.failed:
                continue
            try:
                if row.workload == "P2":
                    results.add(row.key, p2_round(row, sides, floors_first, settings, p2_floor))
                else:
                    results.add(row.key, cycles_round(row, sides, floors_first, settings))
            except WorkloadFailed as exc:
                results.failed[row.key] = str(exc)
        say(f"  round {round_ + 1}/{settings.rounds} done, {time.monotonic() - started:.0f} s")
    for row in rows:
        if row.workload == "memory":
            try:
                results.add(row.key, memory_pass(row, workers, settings))
            except WorkloadFailed as exc:
                results.failed[row.key] = str(exc)
            say(f"  {row.key} done, {time.monotonic() - started:.0f} s")


def run(
    ref: str, settings: Settings, workloads: Sequence[str], server: str | None
) -> tuple[Results, dict[str, Any]]:
    started, load = time.monotonic(), os.getloadavg()
    old, new = ref_source(ref), working_tree_source()
    rows = [row for row in ROWS if row.workload in workloads]
    results = Results(rows)
    if "P2" in workloads:
        results.p2_floor = peers.unavailable(peers.PRL)
        if results.p2_floor is not None:
            say(f"  P2 without its floor: {results.p2_floor}")
    say(f"bench.regress: old = {old.description}, new = {new.description}")
    with ExitStack() as stack:
        tmp = Path(tempfile.mkdtemp(prefix="fencelock-regress-"))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        roots = {"old": unpack_ref(old.commit, tmp / "old"), "new": copy_working_tree(tmp / "new")}
        binary = find_server(server)
        one = stack.enter_context(EmbeddedServer(binary))
        masters = [
            stack.enter_context(EmbeddedServer(binary))
            for _ in range(MASTERS if "P4" in workloads else 0)
        ]
        config = {
            "url": one.url,
            "redlock": [m.url for m in masters],
            "rows": [row.key for row in rows],
            "warmup": settings.warmup,
            "processes": PROCESSES,
            "hold": HOLD,
        }
        workers = start_workers(stack, [old, new], roots, config, results)
        say(f"  both sides ready, {time.monotonic() - started:.0f} s")
        run_rounds(workers, rows, settings, results, started)
        servers = server_description(one.url) + (
            f", 1 server for P1-P3, the primitives and memory, {MASTERS} masters for P4"
            if masters
            else ", 1 server"
        )
    files = {label: hello["fencelock"] for label, hello in results.workers.items()}
    databases = ", ".join(f"{side}: db {db}" for side, db in DATABASES.items())
    info = {
        "ref": ref,
        "old": old.description,
        "new": new.description,
        "commits": {"old": old.commit, "new": new.commit, "new_dirty": new.dirty},
        "servers": f"{servers}; each side in a database of its own ({databases})",
        "client": client_description(),
        "load": ", ".join(f"{v:.2f}" for v in load),
        "method": settings.describe(workloads),
        "settings": vars(settings),
        "p2_floor": results.p2_floor,
        "files": files,
        "wall": time.monotonic() - started,
    }
    return results, info


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Settings, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.regress",
        description="The working tree's fencelock against a git ref's on the hot paths (P1-P4, "
        "the primitives) and in memory, interleaved in one run; prints the ratios new/old.",
    )
    parser.add_argument(
        "ref", help="what to compare the working tree with: a commit, a branch, HEAD~3"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="4 rounds of 0.1 s (P2: 0.5 s): about a minute, noisy figures",
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 8; --quick 4)")
    parser.add_argument("--seconds", type=float, help="one run of a variant, s (default 0.25)")
    parser.add_argument("--p2-seconds", type=float, help="one P2 run, s (default 1)")
    parser.add_argument("--warmup", type=float, help="per variant before the rounds, s (0.3)")
    parser.add_argument(
        "--memory-locks", type=int, help="locks the memory row holds (10,000; --quick 2,000)"
    )
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"workloads, comma-separated (default: {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--server",
        choices=("redis", "valkey"),
        help="server binary (default: redis-server if present, else valkey)",
    )
    parser.add_argument("--json", type=Path, help="also write every figure there")  # fmt: skip
    args = parser.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    given = {"rounds": args.rounds, "seconds": args.seconds, "p2_seconds": args.p2_seconds,
             "warmup": args.warmup, "memory_locks": args.memory_locks}  # fmt: skip
    settings = replace(settings, **{k: v for k, v in given.items() if v is not None})
    if settings.rounds < 1 or settings.seconds <= 0 or settings.p2_seconds <= 0:
        parser.error("--rounds must be >= 1, --seconds and --p2-seconds > 0")
    if settings.memory_locks < 1:
        parser.error("--memory-locks must be >= 1")
    if settings.warmup < 0:
        parser.error("--warmup must be >= 0")
    workloads = [w.strip() for w in args.only.split(",") if w.strip()]
    if not workloads or not set(workloads) <= set(WORKLOADS):
        parser.error(f"--only: choose among {','.join(WORKLOADS)}, not {args.only!r}")
    return args, settings, workloads


def main(argv: list[str] | None = None) -> int:
    args, settings, workloads = parse(argv)
    try:
        results, info = run(args.ref, settings, workloads, args.server)
    except (RegressError, ServerNotFound) as exc:
        say(f"bench.regress: {exc}")
        return 2
    print(markdown(results, info))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(results, info), indent=1) + "\n")
    status = 0
    for row, error in results.failed.items():
        say(f"bench.regress: {row} failed {error}")
        status = 1
    for side, count in results.unsafe.items():
        if count:
            say(f"bench.regress: P2 lost updates or overlapped on the {side} side ({count})")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
