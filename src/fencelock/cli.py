"""The ``fencelock`` command line. One subcommand per ``_add_*`` function; each sets a handler."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

from . import __version__, operate
from ._core.periods import validate_period
from .keys import (
    DEFAULT_PREFIX,
    MAX_TTL,
    MIN_LEASE,
    validate_name,
    validate_prefix,
    validate_timeout,
    validate_ttl,
)
from .run import DEFAULT_GRACE, EX_UNAVAILABLE, EX_USAGE, Runner, default_url

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
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        try:
            return check(value, "value")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _lease(value: object, arg: str) -> float:
    """A lock's ttl, with the library's minimum for a lease (the lock would refuse less)."""
    return validate_ttl(value, arg, minimum=MIN_LEASE)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    # at most a year, as a ttl: a longer wait would overflow threading's timeouts
    if not 0 <= value <= MAX_TTL:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_TTL:.0f} seconds, got {text}")
    return value


def _lock_name(text: str) -> str:
    try:
        return validate_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _no_tools(command: str, exc: ImportError) -> NoReturn:
    """``demo`` and ``bench`` live in the fencelock_tools package, imported only for them (so
    ``import fencelock`` and ``fencelock run`` never load it): say what to install without it."""
    print(
        f"fencelock {command}: needs fencelock's tools ({exc}): pip install 'fencelock[tools]'",
        file=sys.stderr,
    )
    raise SystemExit(EX_UNAVAILABLE)


def _demo(args: argparse.Namespace) -> int:
    try:
        from fencelock_tools.demo import run_demo
    except ImportError as exc:
        _no_tools("demo", exc)

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
        epilog=(
            "exit statuses: 0 the stale write was refused and nothing was violated, 1 otherwise, "
            "69 no server binary or no tools to run it (pip install 'fencelock[tools]')"
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
    if args.once_per is not None and len(urls) > 1:
        parser.error("--once-per needs one server: in Redlock mode no server keeps the record")
    if args.offset and args.once_per is None:
        parser.error("--offset is the start of --once-per's periods: give --once-per too")
    runner = Runner(
        args.name,
        args.command,
        ttl=args.ttl,
        timeout=args.timeout,
        grace=args.grace,
        urls=urls,  # several: Redlock over those masters
        once_per=None if args.once_per is None else (args.once_per, args.offset),
    )
    return runner.run()


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """Seconds, or a number with a unit: 90, 90s, 15m, 6h, 1d."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (90, 15m, 6h, 1d): {text!r}") from None
    try:
        return validate_period(seconds, 0.0)[0]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_run(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    parser = subparsers.add_parser(
        "run",
        usage="%(prog)s [-h] [--ttl S] [--timeout S] [--url URL] [--grace S] "
        "[--once-per PERIOD [--offset S]] NAME -- COMMAND ...",
        help="run a command while holding a lock (like flock, across hosts)",
        description=(
            "Run COMMAND while holding the lock NAME (renewed automatically), with its fencing "
            "token in the environment as FENCELOCK_TOKEN (and the name as FENCELOCK_NAME); "
            "release it when COMMAND exits, and exit with COMMAND's status. If the lease is lost "
            "meanwhile, COMMAND's process group gets SIGTERM (SIGKILL after --grace) and the exit "
            "status is 70. SIGINT, SIGTERM and SIGHUP are passed on to COMMAND."
        ),
        epilog=(
            "exit statuses of its own: 64 bad usage, 69 no server reachable (Redlock: no "
            "majority of them), 70 lock lost while COMMAND ran, 75 lock busy until --timeout "
            "(COMMAND not run), 126/127 COMMAND not executable / not found"
        ),
    )
    parser.add_argument("name", type=_lock_name, metavar="NAME", help="the lock's name")
    parser.add_argument(
        "--ttl",
        type=_checked(_lease),
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
    parser.add_argument(
        "--once-per",
        type=_duration,
        default=None,
        metavar="PERIOD",
        help="run COMMAND at most once per PERIOD (90, 15m, 6h, 1d) across all hosts: skip "
        "(status 0) a period already done, and record the period when COMMAND exits 0, with "
        "a fenced write (docs/scheduling.md)",
    )
    parser.add_argument(
        "--offset",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="with --once-per: periods start this many seconds after midnight UTC of the "
        "epoch (--once-per 1d --offset 7200: days from 02:00 UTC)",
    )
    parser.set_defaults(handler=_run, parser=parser, takes_command=True)


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
    from .run import redact

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
    )
    return run_fencelock(options)


def _add_bench(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    parser = subparsers.add_parser(
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
    parser.add_argument(
        "--url",
        metavar="URL",
        help="the server, redis://host:port/db (default: $FENCELOCK_URL, then $REDIS_URL, "
        "then redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--redlock",
        action="append",
        default=[],
        metavar="URL",
        help="a master for P4 (Redlock); repeat it for each (P4 is skipped without it)",
    )
    parser.add_argument(
        "--workload",
        type=_workloads,
        metavar="P1,P2,...",
        help="which workloads to run (default: all of P1-P6)",
    )
    parser.add_argument("--seconds", type=_positive_float, default=1.0, metavar="S",
                        help="one run of a variant (default 1)")  # fmt: skip
    parser.add_argument("--repeat", type=_positive_int, default=3, metavar="N",
                        help="runs per variant; medians are reported (default 3)")  # fmt: skip
    parser.add_argument("--warmup", type=_seconds, default=0.3, metavar="S",
                        help="warm-up before measuring (default 0.3)")  # fmt: skip
    parser.add_argument("--processes", type=_positive_int, default=4, metavar="N",
                        help="P2: contending processes (default 4)")  # fmt: skip
    parser.add_argument("--threads", type=_positive_int, default=8, metavar="N",
                        help="P3: contending threads, and tasks (default 8)")  # fmt: skip
    parser.add_argument("--hold", type=_seconds, default=0.001, metavar="S",
                        help="P2: how long each grant is held (default 0.001)")  # fmt: skip
    parser.add_argument("--locks", type=_positive_int, default=10_000, metavar="N",
                        help="P5: auto-renewed locks held (default 10000)")  # fmt: skip
    parser.add_argument("--renew-ttl", type=_checked(_lease), default=3.0, metavar="S",
                        help="P5: their ttl; renewed every ttl/3 (default 3)")  # fmt: skip
    parser.add_argument("--renew-seconds", type=_positive_float, default=10.0, metavar="S",
                        help="P5: how long to watch the renewals (default 10)")  # fmt: skip
    parser.add_argument("--memory-locks", type=_positive_int, default=1000, metavar="N",
                        help="P6: locks held at once to measure memory (default 1000)")  # fmt: skip
    parser.set_defaults(handler=_bench)


def _token(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fencing token: {text!r}") from None
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"a fencing token is from 1 to 2**63 - 1, got {text}")
    return value


def _prefix(text: str) -> str:
    try:
        return validate_prefix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _operator(handler: Callable[..., int]) -> Handler:
    """A handler of ls/inspect/release/top: run with a client for --url and --prefix."""

    def run(args: argparse.Namespace) -> int:
        urls: list[str] = args.url or [default_url()]
        return operate.operate(lambda client: handler(client, args), urls, args.prefix)

    return run


def _add_operator_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help="the server, redis://host:port/db (default: $FENCELOCK_URL, then $REDIS_URL, "
        "then redis://127.0.0.1:6379/0); repeat it for Redlock (a majority's view)",
    )
    parser.add_argument(
        "--prefix",
        type=_prefix,
        default=DEFAULT_PREFIX,
        metavar="P",
        help=f"the clients' key prefix (default {DEFAULT_PREFIX!r})",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


OPERATOR_STATUSES = (
    "exit statuses: 0 done, 1 {}, 64 bad usage, 69 no server reachable (Redlock: no majority "
    "of them) or the server refused"
)


def _add_operator_commands(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    out = sys.stdout
    ls = subparsers.add_parser(
        "ls",
        help="list the held locks",
        description="List the held locks whose names match PATTERN: holder, label, ttl, "
        "fencing token, kind, waiters. --json: one JSON object per line.",
        epilog="exit statuses: 0 done, 64 bad usage, 69 no server reachable (Redlock: no "
        "majority of them) or the server refused",
    )
    ls.add_argument("pattern", nargs="?", default="*", metavar="PATTERN",
                    help="a glob over lock names (default '*')")  # fmt: skip
    _add_operator_options(ls)
    ls.set_defaults(handler=_operator(lambda c, a: operate.ls(c, a.pattern, a.json, out)))

    inspect = subparsers.add_parser(
        "inspect",
        help="show who holds a lock, and who waits for it",
        description="Show the lock NAME as the server has it: holder id and label, ttl, "
        "fencing token (the counter: with local hand-offs, the last of the block reserved), "
        "kind and hold count, and the queued waiters in order with how long they have waited.",
        epilog=OPERATOR_STATUSES.format("NAME is not held"),
    )
    inspect.add_argument("name", type=_lock_name, metavar="NAME", help="the lock's name")
    _add_operator_options(inspect)
    inspect.set_defaults(handler=_operator(lambda c, a: operate.inspect(c, a.name, a.json, out)))

    release = subparsers.add_parser(
        "release",
        help="force a stuck lock free (an administrator's release)",
        description="Release the lock NAME whoever holds it, and serve its waiters as a release "
        "does. With --token (the token inspect showed), only if that grant still holds. The next "
        "grant gets a larger fencing token, so the forced-out holder's fenced writes are refused.",
        epilog=OPERATOR_STATUSES.format("refused: another grant than --token holds NAME"),
    )
    release.add_argument("name", type=_lock_name, metavar="NAME", help="the lock's name")
    release.add_argument("--token", type=_token, metavar="T",
                         help="release only the grant with this fencing token")  # fmt: skip
    _add_operator_options(release)
    release.set_defaults(
        handler=_operator(lambda c, a: operate.release(c, a.name, a.token, a.json, out))
    )

    top = subparsers.add_parser(
        "top",
        help="a live view of the busiest locks",
        description="Show the busiest held locks (most waiters, then the longest wait) and "
        "refresh the view every --interval seconds, in place on a terminal, from the server "
        "side only. --json: one JSON object per refresh.",
        epilog="exit statuses: 0 done (130 when interrupted), 64 bad usage, 69 no server "
        "reachable (Redlock: no majority of them) or the server refused",
    )
    top.add_argument("pattern", nargs="?", default="*", metavar="PATTERN",
                     help="a glob over lock names (default '*')")  # fmt: skip
    top.add_argument("--interval", type=_positive_float, default=2.0, metavar="S",
                     help="seconds between refreshes (default 2)")  # fmt: skip
    top.add_argument("--limit", type=_positive_int, default=operate.DEFAULT_TOP, metavar="N",
                     help=f"names shown (default {operate.DEFAULT_TOP})")  # fmt: skip
    frames = top.add_mutually_exclusive_group()
    frames.add_argument("--iterations", type=_positive_int, metavar="N",
                        help="refresh N times, then exit (default: until interrupted)")  # fmt: skip
    frames.add_argument("--once", dest="iterations", action="store_const", const=1,
                        help="show one view and exit (as --iterations 1)")  # fmt: skip
    _add_operator_options(top)
    top.set_defaults(
        handler=_operator(
            lambda c, a: operate.top(c, a.pattern, a.interval, a.iterations, a.limit, a.json, out)
        )
    )


def _elect(args: argparse.Namespace) -> int:
    from .elect import ElectRunner

    if not args.command:
        args.parser.error("missing COMMAND: give it after --, as in: fencelock elect NAME -- CMD")
    urls: list[str] = args.url or [default_url()]
    runner = ElectRunner(
        args.name,
        args.command,
        ttl=args.ttl,
        timeout=args.timeout,
        grace=args.grace,
        urls=urls,
        label=args.label,
    )
    return runner.run()


def _label(text: str) -> str:
    from ._core.replies import validate_label

    try:
        label = validate_label(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert label is not None
    return label


def _add_election_commands(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    """``elect`` (run's options, and --label) and ``leader`` (the operator commands')."""
    elect = subparsers.add_parser(
        "elect",
        usage="%(prog)s [-h] [--ttl S] [--timeout S] [--url URL] [--grace S] [--label L] "
        "NAME -- COMMAND ...",
        help="run a command only while leading an election",
        description=(
            "Campaign in the election NAME, and once leader run COMMAND, with the term (its "
            "fencing token) in the environment as FENCELOCK_TERM and FENCELOCK_TOKEN; resign "
            "when COMMAND exits, and exit with its status. If the leadership is lost meanwhile, "
            "COMMAND's process group gets SIGTERM (SIGKILL after --grace) and the exit status "
            "is 70; it does not campaign again (restart it, e.g. systemd Restart=always, to "
            "keep a standby). SIGINT, SIGTERM and SIGHUP are passed on to COMMAND."
        ),
        epilog=(
            "exit statuses of its own: 64 bad usage, 69 no server reachable (Redlock: no "
            "majority of them), 70 leadership lost while COMMAND ran, 75 not elected within "
            "--timeout (COMMAND not run), 126/127 COMMAND not executable / not found"
        ),
    )
    elect.add_argument("name", type=_lock_name, metavar="NAME", help="the election's name")
    elect.add_argument("--ttl", type=_checked(_lease), default=10.0, metavar="S",
                       help="leadership lease in seconds, renewed every ttl/3; a dead "
                       "leader is replaced about this long after it died (default 10)")  # fmt: skip
    elect.add_argument("--timeout", type=_checked(validate_timeout), default=None, metavar="S",
                       help="give up (status 75) if not elected in S seconds; 0 tries once "
                       "(default: wait as long as it takes)")  # fmt: skip
    elect.add_argument("--url", action="append", metavar="URL",
                       help="the server, redis://host:port/db (default: $FENCELOCK_URL, then "
                       "$REDIS_URL, then redis://127.0.0.1:6379/0); repeat it for Redlock "
                       "over several masters")  # fmt: skip
    elect.add_argument("--grace", type=_seconds, default=DEFAULT_GRACE, metavar="S",
                       help="when the leadership is lost, SIGKILL COMMAND this long after "
                       f"SIGTERM (default {DEFAULT_GRACE:g})")  # fmt: skip
    elect.add_argument("--label", type=_label, metavar="L",
                       help="what `fencelock leader` shows of this leader "
                       "(default host:pid:thread)")  # fmt: skip
    elect.set_defaults(handler=_elect, parser=elect, takes_command=True)

    from . import elect as election

    leader = subparsers.add_parser(
        "leader",
        help="show who leads an election",
        description="Show the leader of the election NAME: its label, term (fencing token) "
        "and the seconds left of its lease.",
        epilog=OPERATOR_STATUSES.format("nobody leads NAME"),
    )
    leader.add_argument("name", type=_lock_name, metavar="NAME", help="the election's name")
    _add_operator_options(leader)
    leader.set_defaults(
        handler=_operator(lambda c, a: election.leader(c, a.name, a.json, sys.stdout))
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fencelock", description="Distributed locks on Redis with fencing tokens."
    )
    parser.add_argument("--version", action="version", version=f"fencelock {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_demo(subparsers)
    _add_run(subparsers)
    _add_bench(subparsers)
    _add_operator_commands(subparsers)
    _add_election_commands(subparsers)
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
