"""The ``fencelock`` command line. One subcommand per ``_add_*`` function; each sets a handler."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from . import __version__
from .keys import validate_name, validate_timeout, validate_ttl
from .run import DEFAULT_GRACE, EX_USAGE, Runner, default_url

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with EX_USAGE (64, sysexits.h) instead of 2, here and in subparsers."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Options, and the COMMAND after the first ``--`` (None without one), taken verbatim:
    argparse would drop further ``--`` and refuse options given after a positional."""
    args = list(argv)
    if "--" not in args:
        return args, None
    cut = args.index("--")
    return args[:cut], args[cut + 1 :]


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


def _checked(check: Callable[[object, str], object]) -> Callable[[str], object]:
    """An argparse type from one of the library's validators of seconds."""

    def convert(text: str) -> object:
        try:
            return check(float(text), "value")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < math.inf:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be >= 0 and finite, got {text}")
    return value


def _lock_name(text: str) -> str:
    try:
        return validate_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _demo(args: argparse.Namespace) -> int:
    # Imported here: the demo pulls in multiprocessing, which other subcommands do not need.
    from .demo import run_demo

    return run_demo(workers=args.workers, seconds=args.seconds, url=args.url)


def _add_demo(subparsers: argparse._SubParsersAction[_Parser]) -> None:
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


def _run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    if not args.command:
        parser.error("missing COMMAND: give it after --, as in: fencelock run NAME -- COMMAND")
    urls: list[str] = args.url or [default_url()]
    runner = Runner(
        args.name,
        args.command,
        ttl=args.ttl,
        timeout=args.timeout,
        grace=args.grace,
        urls=urls,  # several: Redlock over those masters
    )
    return runner.run()


def _add_run(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    parser = subparsers.add_parser(
        "run",
        usage="%(prog)s [-h] [--ttl S] [--timeout S] [--url URL] [--grace S] NAME -- COMMAND ...",
        help="run a command while holding a lock (like flock, across hosts)",
        description=(
            "Run COMMAND while holding the lock NAME (renewed automatically), with its fencing "
            "token in the environment as FENCELOCK_TOKEN (and the name as FENCELOCK_NAME); "
            "release it when COMMAND exits, and exit with COMMAND's status. If the lease is lost "
            "meanwhile, COMMAND's process group gets SIGTERM (SIGKILL after --grace) and the exit "
            "status is 70. SIGINT, SIGTERM and SIGHUP are passed on to COMMAND."
        ),
        epilog=(
            "exit statuses of its own: 64 bad usage, 69 no server reachable, 70 lock lost while "
            "COMMAND ran, 75 lock busy until --timeout (COMMAND not run), 126/127 COMMAND not "
            "executable / not found"
        ),
    )
    parser.add_argument("name", type=_lock_name, metavar="NAME", help="the lock's name")
    parser.add_argument(
        "--ttl",
        type=_checked(validate_ttl),
        default=30.0,
        metavar="S",
        help="lease length in seconds, renewed every ttl/3 (default 30)",
    )
    parser.add_argument(
        "--timeout",
        type=_checked(validate_timeout),
        default=None,
        metavar="S",
        help="give up (status 75) if not acquired in S seconds; 0 tries once "
        "(default: wait as long as it takes)",
    )
    parser.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help="the server, redis://host:port/db (default: $FENCELOCK_URL, then $REDIS_URL, "
        "then redis://127.0.0.1:6379/0); repeat it for Redlock over several masters",
    )
    parser.add_argument(
        "--grace",
        type=_seconds,
        default=DEFAULT_GRACE,
        metavar="S",
        help="when the lock is lost, SIGKILL COMMAND this long after SIGTERM "
        f"(default {DEFAULT_GRACE:g})",
    )
    parser.set_defaults(handler=_run, parser=parser, takes_command=True)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fencelock", description="Distributed locks on Redis with fencing tokens."
    )
    parser.add_argument("--version", action="version", version=f"fencelock {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_demo(subparsers)
    _add_run(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options, command = _split_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(options)
    if command is not None and not getattr(args, "takes_command", False):
        parser.error(f"unrecognized arguments: -- {' '.join(command)}")
    args.command = command
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        # The handler has already stopped what it started; no traceback for a Ctrl-C.
        print("\ninterrupted", file=sys.stderr)
        return 130
