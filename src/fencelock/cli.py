"""The ``fencelock`` command line. One subcommand per ``_add_*`` function; each sets a handler."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import __version__

Handler = Callable[[argparse.Namespace], int]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _demo(args: argparse.Namespace) -> int:
    # Imported here: the demo pulls in multiprocessing, which other subcommands do not need.
    from .demo import run_demo

    return run_demo(workers=args.workers, seconds=args.seconds, url=args.url)


def _add_demo(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="watch fencing tokens stop a paused lock holder",
        description=(
            "Start a throw-away server, let worker processes contend for one lock while doing "
            "fenced read-modify-writes on a counter, freeze one holder with SIGSTOP past its "
            "lease, and show that its stale write is refused. Exits 1 on any violation."
        ),
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=4,
        metavar="N",
        help="contending workers (default 4)",
    )
    parser.add_argument(
        "--seconds",
        type=_positive_float,
        default=5.0,
        metavar="S",
        help="how long to run (default 5)",
    )
    parser.add_argument(
        "--url", help="use this server (redis://host:port/db) instead of starting one"
    )
    parser.set_defaults(handler=_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fencelock", description="Distributed locks on Redis with fencing tokens."
    )
    parser.add_argument("--version", action="version", version=f"fencelock {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_demo(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        # The handler has already stopped what it started; no traceback for a Ctrl-C.
        print("\ninterrupted", file=sys.stderr)
        return 130
