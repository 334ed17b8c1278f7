"""The ``fencelock`` command line (``fencelock = "fencelock.cli:main"``, ``python -m fencelock``).

One module per family of commands, each adding its subcommands to the parser: ``_run`` (run),
``_elect`` (elect, leader), ``_operate`` (ls, inspect, release, top), ``_doctor`` (doctor),
``_tools`` (demo and bench, delegated to fencelock_tools). What they share is in ``_common``
(exit statuses, the server URL, argument types, the operator commands' client and output) and
``_supervise`` (a COMMAND run under a lease, for run and elect); no command module imports
another.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from . import _doctor, _elect, _operate, _run, _tools
from ._common import Handler, Parser


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Options, and the COMMAND after the first ``--`` (None without one), taken verbatim:
    argparse would drop further ``--`` and refuse options given after a positional."""
    args = list(argv)
    if "--" not in args:
        return args, None
    cut = args.index("--")
    return args[:cut], args[cut + 1 :]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fencelock", description="Distributed locks on Redis with fencing tokens.")
    parser.add_argument("--version", action="version", version=f"fencelock {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for family in (_tools, _run, _operate, _elect, _doctor):
        family.add_commands(commands)
    # each subcommand's own parser, for its usage errors
    for subparser in commands.choices.values():
        subparser.set_defaults(parser=subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options, command = _split_command(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(options)
    subparser: argparse.ArgumentParser = args.parser
    if unknown:  # said with the subcommand's usage: argparse would show the top-level one
        subparser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if command is not None and not getattr(args, "takes_command", False):
        subparser.error(f"unrecognized arguments: -- {' '.join(command)}")
    args.command = command
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        # The handler has already stopped what it started; no traceback for a Ctrl-C.
        print("\ninterrupted", file=sys.stderr)
        return 130
