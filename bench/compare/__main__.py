"""``python -m bench.compare``: options, the run, the summary printed, and docs/ rewritten."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack

from fencelock_tools.benchmark import (
    describe_handoff,
    describe_local,
    describe_memory,
    describe_variant,
)
from fencelock_tools.servers.embedded import EmbeddedServer, find_server

from .._common import server_description
from . import DOC, IMG, ROOT
from .goals import Goal, goals, goals_34
from .plots import plot_all
from .render import environment, replace_section, section
from .run import REDLOCK_NODES, Results, Settings, describe, run_all, say


def print_summary(r: Results, g: list[Goal], g34: list[Goal]) -> None:
    for issue, found in (("5", g), ("34", g34)):
        print(f"\nGoals of issue {issue}:")
        for x in found:
            verdict = "-" if x.met is None else ("met" if x.met else "NOT met")
            print(f"  {x.workload:<6} {x.goal:<62} {verdict:<8} {x.figure}")
    for title, lines in (
        ("P1", [f"{v.name}: {describe_variant(v)}" for v in r.p1]),
        ("P2", [f"{x.label}: {describe_handoff(x)}" for x in r.p2]),
        ("P3", [f"{x.label} {x.mode}: {describe_local(x)}" for x in r.p3]),
        ("P4", [f"{v.name}: {describe_variant(v)}" for v in r.p4]),
        ("P5", [f"{x.label}: {describe(x)}" for x in r.p5]),
        ("P6", [f"{x.label}: {describe_memory(x)}" for x in r.p6]),
        ("P6, bench.footprint", [f"{label}: {found}" for label, found in r.footprints.items()]),
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
    found, found_34 = goals(results), goals_34(results)
    print_summary(results, found, found_34)
    if not args.no_write:
        plots = plot_all(results)
        env = environment(server, args.server, settings, args.quick)
        text = section(results, found, found_34, env, settings, plots)
        DOC.write_text(replace_section(DOC.read_text(), text))
        say(f"\nwrote {DOC.relative_to(ROOT)} and {len(plots)} plots in {IMG.relative_to(ROOT)}")
    say(f"done in {results.minutes:.1f} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
