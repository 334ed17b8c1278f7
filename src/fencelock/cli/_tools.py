"""``fencelock demo`` and ``fencelock bench``: their options here, their work in the
fencelock_tools package (the fencelock-tools distribution: the library's wheel holds none of
it), imported only when one of them runs (so ``import fencelock`` and ``fencelock run`` never
load it); without it they say what to install (status 69)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from ._common import (
    EX_UNAVAILABLE,
    URL_HELP,
    Commands,
    default_url,
    lease,
    positive_float,
    positive_int,
    redact,
    seconds,
)

INSTALL = "pip install 'fencelock[tools]'"
# (a clone's own tools: the package index need not know the version being worked on)
INSTALL_IN_A_CLONE = "pip install -e ./tools/fencelock-tools"


def _no_tools(command: str, exc: ImportError) -> NoReturn:
    print(
        f"fencelock {command}: needs fencelock's tools ({exc}): {INSTALL} "
        f"(in a clone of fencelock's repository: {INSTALL_IN_A_CLONE})",
        file=sys.stderr,
    )
    raise SystemExit(EX_UNAVAILABLE)


def _demo(args: argparse.Namespace) -> int:
    try:
        from fencelock_tools.demo import run_demo
    except ImportError as exc:
        _no_tools("demo", exc)

    return run_demo(workers=args.workers, seconds=args.seconds, url=args.url)


def _workloads(text: str) -> list[str]:
    try:
        from fencelock_tools.benchmark import WORKLOADS
    except ImportError as exc:
        _no_tools("bench", exc)

    chosen = [w.strip().upper() for w in text.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in WORKLOADS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {','.join(WORKLOADS)}, got {text!r}"
        )
    return chosen


def _bench(args: argparse.Namespace) -> int:
    import redis

    try:
        from fencelock_tools.benchmark import WORKLOADS, Options, run_fencelock
    except ImportError as exc:
        _no_tools("bench", exc)

    url: str = args.url or default_url()
    for server in (url, *args.redlock):
        try:
            with redis.Redis.from_url(server, socket_timeout=5, socket_connect_timeout=5) as r:
                r.ping()
        except (redis.RedisError, ValueError) as exc:
            print(f"fencelock bench: {redact(server)}: {exc}", file=sys.stderr)
            return EX_UNAVAILABLE
    options = Options(
        url=url,
        redlock=list(args.redlock),
        workloads=args.workload or list(WORKLOADS),
        seconds=args.seconds,
        repeat=args.repeat,
        warmup=args.warmup,
        processes=args.processes,
        threads=args.threads,
        hold=args.hold,
        locks=args.locks,
        renew_ttl=args.renew_ttl,
        renew_seconds=args.renew_seconds,
        memory_locks=args.memory_locks,
        node_timeout=args.node_timeout,
    )
    return run_fencelock(options)


def add_commands(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="watch fencing tokens stop a paused lock holder",
        description=(
            "Start a throw-away server, let worker processes contend for one lock while doing "
            "fenced read-modify-writes on a counter, freeze one holder with SIGSTOP past its "
            "lease, and show that its stale write is refused. Exits 1 on any violation."
        ),
        epilog=(
            "exit statuses: 0 the stale write was refused and nothing was violated, 1 otherwise, "
            "69 no server binary or no tools to run it (pip install 'fencelock[tools]')"
        ),
    )
    demo.add_argument("--workers", type=positive_int, default=4, metavar="N",
                      help="contending workers (default 4)")  # fmt: skip
    demo.add_argument("--seconds", type=positive_float, default=5.0, metavar="S",
                      help="how long to run (default 5)")  # fmt: skip
    demo.add_argument(
        "--url", help="use this server (redis://host:port/db) instead of starting one"
    )
    demo.set_defaults(handler=_demo)

    bench = commands.add_parser(
        "bench",
        help="measure fencelock against your Redis (throughput, hand-off latency, memory)",
        description=(
            "Run fencelock's side of the contention benchmarks against a server, to size it: "
            "P1 uncontended acquire+release (sync, asyncio); P2 processes contending for one "
            "name (throughput, hand-off latency, fairness, lost updates); P3 threads and asyncio "
            "tasks of one process contending (throughput, Redis commands per acquisition); P4 "
            "Redlock over the --redlock masters; P5 many auto-renewed locks (renewal calls, "
            "missed renewals, threads); P6 Redis memory per held lock. Prints one line per "
            "result: medians over --repeat runs (min-max). Writes keys named "
            "fencelock:{fencelock-bench-...}:* and fencelock-bench:counter, and deletes them."
        ),
        epilog=(
            "exit statuses: 0 done, 64 bad usage, 69 a server unreachable or no tools to run it "
            "(pip install 'fencelock[tools]'). python -m bench.compare (in the source tree) runs "
            "the same against other locks."
        ),
    )
    bench.add_argument("--url", metavar="URL", help=URL_HELP)
    bench.add_argument("--redlock", action="append", default=[], metavar="URL",
                       help="a master for P4 (Redlock); repeat it for each (P4 is skipped "
                       "without it)")  # fmt: skip
    bench.add_argument("--workload", type=_workloads, metavar="P1,P2,...",
                       help="which workloads to run (default: all of P1-P6)")  # fmt: skip
    bench.add_argument("--seconds", type=positive_float, default=1.0, metavar="S",
                       help="one run of a variant (default 1)")  # fmt: skip
    bench.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                       help="runs per variant; medians are reported (default 3)")  # fmt: skip
    bench.add_argument("--warmup", type=seconds, default=0.3, metavar="S",
                       help="warm-up before measuring (default 0.3)")  # fmt: skip
    bench.add_argument("--processes", type=positive_int, default=4, metavar="N",
                       help="P2: contending processes (default 4)")  # fmt: skip
    bench.add_argument("--threads", type=positive_int, default=8, metavar="N",
                       help="P3: contending threads, and tasks (default 8)")  # fmt: skip
    bench.add_argument("--hold", type=seconds, default=0.001, metavar="S",
                       help="P2: how long each grant is held (default 0.001)")  # fmt: skip
    bench.add_argument("--locks", type=positive_int, default=10_000, metavar="N",
                       help="P5: auto-renewed locks held (default 10000)")  # fmt: skip
    bench.add_argument("--renew-ttl", type=lease, default=3.0, metavar="S",
                       help="P5: their ttl; renewed every ttl/3 (default 3)")  # fmt: skip
    bench.add_argument("--renew-seconds", type=positive_float, default=10.0, metavar="S",
                       help="P5: how long to watch the renewals (default 10)")  # fmt: skip
    bench.add_argument("--memory-locks", type=positive_int, default=1000, metavar="N",
                       help="P6: locks held at once to measure memory (default 1000)")  # fmt: skip
    bench.add_argument("--node-timeout", type=positive_float, default=None, metavar="S",
                       help="P4: how long a master may take to answer (default: the library's, "
                       "a 200th of the lease, 5-50 ms; more on a loaded machine)")  # fmt: skip
    bench.set_defaults(handler=_bench)
