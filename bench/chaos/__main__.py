"""``python -m bench.chaos [--short | --long] [--scenario NAME ...] [--write-docs]``

Runs the fault matrix (bench/chaos/scenarios.py) against real servers started here, prints the
results table, and with ``--write-docs`` writes it to docs/safety.md. Exits 1 if a promise of
fencelock was broken (the violations are printed), 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fencelock_tools.servers.embedded import find_server

from . import report, safety_doc
from .runner import Lab, Result, run_scenario
from .scenarios import MODES, SHORT, select

DOCS = Path(__file__).resolve().parents[2] / "docs" / "safety.md"


def print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--short",
        dest="mode",
        action="store_const",
        const="short",
        help="one fault cycle per scenario, 2 workers per lock (the default)",
    )
    group.add_argument("--long", dest="mode", action="store_const", const="long",
                       help="6 fault cycles per scenario, 3 workers per lock")  # fmt: skip
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help="run the scenarios whose name contains NAME (repeatable)",
    )
    parser.add_argument(
        "--server",
        choices=("redis", "valkey"),
        default=None,
        help="server binary (default: the system redis-server, else valkey)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"write {DOCS}")
    parser.add_argument("--keep", action="store_true", help="keep the JSONL histories")
    parser.add_argument("--details", action="store_true", help="print faults and overlaps")
    parser.set_defaults(mode=SHORT.name)  # fmt: skip
    args = parser.parse_args(argv)
    mode = MODES[args.mode]
    binary = find_server(args.server)
    scenarios = select(args.scenario)
    results: list[Result] = []
    begin = time.monotonic()
    with Lab(binary) as lab:
        version = lab.version()
        print(f"chaos: {mode.name} run of {len(scenarios)} scenarios on {version}", flush=True)
        for scenario in scenarios:
            result = run_scenario(scenario, mode, lab, keep=args.keep, log=print_stderr)
            results.append(result)
            print(report.summary(result), flush=True)
            if args.details or result.errors:
                print(report.details(result), flush=True)
    elapsed = time.monotonic() - begin
    print()
    print(report.markdown(results))
    broken = [v for result in results for v in report.violations(result)]
    print(f"\n{len(results)} scenarios in {elapsed:.0f} s; {len(broken)} broken promises")
    for line in broken:
        print(f"  BROKEN {line}")
    if args.write_docs:
        argv_text = " ".join(["python -m bench.chaos", *(argv or sys.argv[1:])])
        page = safety_doc.render(results, mode, version, elapsed, argv_text)
        DOCS.write_text(safety_doc.with_simulation(page, DOCS.read_text()))
        print(f"wrote {DOCS}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
