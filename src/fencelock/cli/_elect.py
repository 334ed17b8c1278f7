"""``fencelock elect`` and ``fencelock leader``: run a command only while leading an election,
and show who leads (docs/election.md).

``fencelock elect NAME -- COMMAND`` runs COMMAND as ``fencelock run`` does, under an election
instead of a lock: it campaigns (waits to lead; ``--timeout``: give up, status 75), runs COMMAND
with its term as ``FENCELOCK_TERM`` (and ``FENCELOCK_TOKEN``, the same number: guard COMMAND's
writes with it), and resigns when COMMAND exits, exiting with its status. If the leadership is
lost meanwhile, COMMAND's process group gets SIGTERM, then SIGKILL after ``--grace``, and the
exit status is 70. It never campaigns again by itself: a supervisor that restarts it (systemd
``Restart=always``, a shell loop) makes a standby that takes over; each run is one term, so
COMMAND never outlives the leadership it was started under.
"""

from __future__ import annotations

import argparse
import sys

from .. import Election, LockClient
from ._common import (
    EX_REFUSED,
    OPERATOR_STATUSES,
    URL_HELP,
    Commands,
    add_operator_options,
    default_url,
    label,
    lease,
    lock_name,
    operator,
    print_json,
    seconds,
    shown,
    timeout,
)
from ._supervise import DEFAULT_GRACE, Supervisor


class ElectRunner(Supervisor[Election]):
    """One ``fencelock elect``: campaign, run COMMAND while leading, resign."""

    prog = "fencelock elect"
    held, thing, token_name, holder = "the leadership of {!r}", "leadership", "term", "leader"

    def make_lease(self, client: LockClient) -> Election:
        # "raise", not the default: the loss is handled here (COMMAND stopped, status 70)
        return client.election(
            self.name,
            ttl=self.ttl,
            label=self.label,
            on_lost=self.on_lost,
            on_lost_policy="raise",
        )

    def environment(self, token: int) -> dict[str, str]:
        return {**super().environment(token), "FENCELOCK_TERM": str(token)}


def _elect(args: argparse.Namespace) -> int:
    if not args.command:
        args.parser.error("missing COMMAND: give it after --, as in: fencelock elect NAME -- CMD")
    runner = ElectRunner(
        args.name,
        args.command,
        ttl=args.ttl,
        timeout=args.timeout,
        grace=args.grace,
        urls=args.url or [default_url()],
        label=args.label,
    )
    return runner.run()


def _leader(client: LockClient, args: argparse.Namespace) -> int:
    """Print who leads ``args.name``: 0, or 1 when nobody does."""
    now = client.election(args.name).leader()
    out = sys.stdout
    if args.json:
        print_json(now, out)
    elif now is None:
        print(f"{shown(args.name)}: no leader", file=out)
    else:
        ttl = "no expiry" if now.ttl is None else f"{now.ttl:.3f} s"
        term = "-" if now.term is None else str(now.term)
        print(f"label:  {shown(now.label)}\nterm:   {term}\nttl:    {ttl}", file=out)
        print(f"holder: {now.holder}", file=out)
    return EX_REFUSED if now is None else 0


def add_commands(commands: Commands) -> None:
    """``elect`` (run's options, and --label) and ``leader`` (the operator commands')."""
    elect = commands.add_parser(
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
    elect.add_argument("name", type=lock_name, metavar="NAME", help="the election's name")
    elect.add_argument("--ttl", type=lease, default=10.0, metavar="S",
                       help="leadership lease in seconds, renewed every ttl/3; a dead "
                       "leader is replaced about this long after it died (default 10)")  # fmt: skip
    elect.add_argument("--timeout", type=timeout, default=None, metavar="S",
                       help="give up (status 75) if not elected in S seconds; 0 tries once "
                       "(default: wait as long as it takes)")  # fmt: skip
    elect.add_argument("--url", action="append", metavar="URL",
                       help=f"{URL_HELP}; repeat it for Redlock over several masters")  # fmt: skip
    elect.add_argument("--grace", type=seconds, default=DEFAULT_GRACE, metavar="S",
                       help="when the leadership is lost, SIGKILL COMMAND this long after "
                       f"SIGTERM (default {DEFAULT_GRACE:g})")  # fmt: skip
    elect.add_argument("--label", type=label, metavar="L",
                       help="what `fencelock leader` shows of this leader "
                       "(default host:pid:thread)")  # fmt: skip
    elect.set_defaults(handler=_elect, takes_command=True)

    shows = commands.add_parser(
        "leader",
        help="show who leads an election",
        description="Show the leader of the election NAME: its label, term (fencing token) "
        "and the seconds left of its lease.",
        epilog=OPERATOR_STATUSES.format("nobody leads NAME"),
    )
    shows.add_argument("name", type=lock_name, metavar="NAME", help="the election's name")
    add_operator_options(shows)
    shows.set_defaults(handler=operator(_leader))
