"""``fencelock run``: run a command while holding a lock, like ``flock(1)`` across hosts; with
``--once-per``, at most once per period across them, on ``client.once_per``'s code
(``OncePer.run_held``: the period record read and written fenced by the lock's tokens)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .. import Lock, LockClient, LockError, StaleToken
from ._common import (
    EX_LOST,
    EX_UNAVAILABLE,
    URL_HELP,
    Commands,
    default_url,
    duration,
    label,
    lease,
    lock_name,
    seconds,
    timeout,
)
from ._supervise import DEFAULT_GRACE, Supervisor


class _Unrecorded(Exception):
    """COMMAND failed, or its lease was lost: ``run_held`` records nothing."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Runner(Supervisor[Lock]):
    """One ``fencelock run``: acquire, start COMMAND, supervise it, release."""

    prog = "fencelock run"
    held, thing, token_name, holder = "the lock {!r}", "lock", "token", "holder"

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        ttl: float,
        timeout: float | None,
        grace: float,
        urls: Sequence[str],
        label: str | None = None,
        once_per: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(
            name, command, ttl=ttl, timeout=timeout, grace=grace, urls=urls, label=label
        )
        self.once_per = once_per  # (period, offset) in seconds: run once per period

    def make_lease(self, client: LockClient) -> Lock:
        return client.lock(
            self.name, ttl=self.ttl, auto_renew=True, on_lost=self.on_lost, label=self.label
        )

    def while_held(self, client: LockClient, lease: Lock) -> int:
        if self.once_per is None:
            return self.supervise(lease)
        period, offset = self.once_per
        guard = client.once_per(self.name, period=period, offset=offset, ttl=self.ttl)
        succeeded = False

        def command() -> None:
            nonlocal succeeded
            status = self.supervise(lease)
            if status or self.lost:
                raise _Unrecorded(status)
            succeeded = True

        try:
            # None both when COMMAND ran and when the period was done already (silently: another
            # host ran it): either way, status 0
            guard.run_held(lease, command)
        except _Unrecorded as exc:
            return exc.status
        except LockError as exc:  # (the next tick runs the period again)
            if not succeeded:
                self.say(f"cannot read the period record of {self.name!r}: {exc}")
                return EX_UNAVAILABLE
            if isinstance(exc, StaleToken):
                self.say(
                    f"this period of {self.name!r} not recorded: a newer holder of the lock has "
                    "read the record since (this run was overtaken)"
                )
                return EX_LOST
            self.say(f"this period of {self.name!r} not recorded: {exc}")
            return EX_UNAVAILABLE
        return 0


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
        label=args.label,
        once_per=None if args.once_per is None else (args.once_per, args.offset),
    )
    return runner.run()


def add_commands(commands: Commands) -> None:
    parser = commands.add_parser(
        "run",
        usage="%(prog)s [-h] [--ttl S] [--timeout S] [--url URL] [--grace S] [--label L] "
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
    parser.add_argument("name", type=lock_name, metavar="NAME", help="the lock's name")
    parser.add_argument(
        "--ttl",
        type=lease,
        default=30.0,
        metavar="S",
        help="lease length in seconds, renewed every ttl/3 (default 30)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout,
        default=None,
        metavar="S",
        help="give up (status 75) if not acquired in S seconds; 0 tries once "
        "(default: wait as long as it takes)",
    )
    parser.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"{URL_HELP}; repeat it for Redlock over several masters",
    )
    parser.add_argument(
        "--grace",
        type=seconds,
        default=DEFAULT_GRACE,
        metavar="S",
        help="when the lock is lost, SIGKILL COMMAND this long after SIGTERM "
        f"(default {DEFAULT_GRACE:g})",
    )
    parser.add_argument(
        "--label",
        type=label,
        metavar="L",
        help="what `fencelock ls`, `inspect` and `top` show of this holder "
        "(default host:pid:thread)",
    )
    parser.add_argument(
        "--once-per",
        type=duration,
        default=None,
        metavar="PERIOD",
        help="run COMMAND at most once per PERIOD (90, 15m, 6h, 1d) across all hosts: skip "
        "(status 0) a period already done, and record the period when COMMAND exits 0, with "
        "a fenced write (docs/scheduling.md)",
    )
    parser.add_argument(
        "--offset",
        type=seconds,
        default=0.0,
        metavar="S",
        help="with --once-per: periods start this many seconds after midnight UTC of the "
        "epoch (--once-per 1d --offset 7200: days from 02:00 UTC)",
    )
    parser.set_defaults(handler=_run, takes_command=True)
