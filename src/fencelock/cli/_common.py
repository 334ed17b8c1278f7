"""What the commands share: exit statuses, the server URL, argument types, and the operator
commands' client and output. It imports no command module (tests/cli/test_cli_package.py).

The argument types check values with the library's own validators, so a bad value is a usage
error (64) before anything connects; this is the one module of the command line that imports
them from inside the library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from typing import Final, NoReturn, TextIO, TypeAlias
from urllib.parse import urlsplit

from .. import LockClient, LockConnectionError, LockError
from .._core.periods import validate_period
from .._core.replies import validate_label
from .._keys import (
    DEFAULT_PREFIX,
    MAX_TTL,
    MIN_LEASE,
    validate_name,
    validate_prefix,
    validate_timeout,
    validate_ttl,
)

# Exit statuses of the commands themselves (sysexits.h), besides a COMMAND's own
EX_REFUSED: Final = 1  # inspect, leader: nobody holds NAME; release: another grant holds it
EX_USAGE: Final = 64  # EX_USAGE
EX_UNAVAILABLE: Final = 69  # no server reachable (Redlock: no majority of them), or it refused
EX_LOST: Final = 70  # EX_SOFTWARE: the lock was lost while COMMAND ran
EX_BUSY: Final = 75  # EX_TEMPFAIL: the lock stayed busy until --timeout

DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"
URL_HELP: Final = (
    "the server, redis://host:port/db (default: $FENCELOCK_URL, then $REDIS_URL, "
    f"then {DEFAULT_URL})"
)


class Parser(argparse.ArgumentParser):
    """Usage errors exit with EX_USAGE (64) instead of 2, here and in subparsers."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


Commands: TypeAlias = "argparse._SubParsersAction[Parser]"  # what each command adds itself to
Handler: TypeAlias = Callable[[argparse.Namespace], int]


def default_url(environ: Mapping[str, str] = os.environ) -> str:
    """``$FENCELOCK_URL``, then ``$REDIS_URL``, then the local default server."""
    return environ.get("FENCELOCK_URL") or environ.get("REDIS_URL") or DEFAULT_URL


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return url.rpartition("@")[2]
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def shown(text: str | None, width: int | None = None) -> str:
    """A name or label for a terminal: control characters escaped, cut to ``width``."""
    if text is None:
        return "-"
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def as_json(value: object) -> object:
    """A result of the library (a dataclass, or None) as JSON values."""
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


def print_json(value: object, out: TextIO) -> None:
    print(json.dumps(as_json(value)), file=out)


# -- argument types: a bad value is a usage error, said before anything connects -------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _checked(check: Callable[[float, str], float | None]) -> Callable[[str], float | None]:
    """An argparse type from one of the library's validators of seconds."""

    def convert(text: str) -> float | None:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        try:
            return check(value, "value")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


# a lease's ttl, with the library's minimum for a lease (a lock would refuse less)
lease = _checked(lambda value, arg: validate_ttl(value, arg, minimum=MIN_LEASE))
timeout = _checked(validate_timeout)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    # at most a year, as a ttl: a longer wait would overflow threading's timeouts
    if not 0 <= value <= MAX_TTL:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_TTL:.0f} seconds, got {text}")
    return value


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """A once_per period: seconds, or a number with a unit: 90, 90s, 15m, 6h, 1d."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (90, 15m, 6h, 1d): {text!r}") from None
    try:
        return validate_period(value, 0.0)[0]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lock_name(text: str) -> str:
    try:
        return validate_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def label(text: str) -> str:
    try:
        checked = validate_label(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert checked is not None
    return checked


def prefix(text: str) -> str:
    try:
        return validate_prefix(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- the operator commands: one client for --url and --prefix, and what its errors mean ----

OPERATOR_STATUSES: Final = (
    "exit statuses: 0 done, 1 {}, 64 bad usage, 69 no server reachable (Redlock: no majority "
    "of them) or the server refused"
)


def add_operator_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"{URL_HELP}; repeat it for Redlock (a majority's view)",
    )
    add_prefix_option(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_prefix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefix",
        type=prefix,
        default=DEFAULT_PREFIX,
        metavar="P",
        help=f"the clients' key prefix (default {DEFAULT_PREFIX!r})",
    )


class _Usage(Exception):
    pass


class _Unavailable(Exception):
    pass


@contextmanager
def _client(urls: Sequence[str], key_prefix: str) -> Iterator[LockClient]:
    """A client for ``urls`` (several: Redlock); errors become the exit statuses above."""
    where = ", ".join(redact(u) for u in urls)
    try:
        client = LockClient.from_url(urls[0] if len(urls) == 1 else list(urls), prefix=key_prefix)
    except (ValueError, TypeError) as exc:
        raise _Usage(f"bad --url or --prefix: {exc}") from None
    try:
        yield client
    except LockConnectionError as exc:
        raise _Unavailable(f"no server reachable at {where}: {exc}") from None
    except LockError as exc:
        raise _Unavailable(f"{where}: {exc}") from None
    finally:
        client.close()


def operator(action: Callable[[LockClient, argparse.Namespace], int]) -> Handler:
    """The handler of an operator command: ``action`` with a client for --url and --prefix; its
    status, or the status of what went wrong."""

    def handle(args: argparse.Namespace) -> int:
        urls: list[str] = args.url or [default_url()]
        try:
            with _client(urls, args.prefix) as client:
                return action(client, args)
        except (_Usage, _Unavailable) as exc:
            print(f"fencelock: {exc}", file=sys.stderr)
            return EX_USAGE if isinstance(exc, _Usage) else EX_UNAVAILABLE

    return handle
