"""Replies as redis-py's parser gives them (``decode_responses=False``), in RESP2 or RESP3 (what
redis-py 8 speaks by default), and the few ways the two servers the suite runs word or decide
things differently (``Flavor``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from redis._parsers import BaseParser
from redis.exceptions import ResponseError

# bytes (a bulk string, or a Status), int, None (a nil), a list of replies, or an error reply as
# the exception redis-py's parser makes of it (NoScriptError for NOSCRIPT, and so on); in RESP3
# also a float (a double) and a dict (a map)
Reply: TypeAlias = "bytes | int | float | list[Reply] | dict[bytes, Reply] | ResponseError | None"


class Status(bytes):
    """A status reply (``+OK``): plain bytes to the caller, as redis-py parses it, and
    ``{ok=...}`` to a script."""


class Push(list["Reply"]):
    """What the server sends unasked (pub/sub: a message, a subscription's confirmation): a RESP3
    push, an array in RESP2."""


class CommandError(Exception):
    """An error reply, worded as the server words it, code first (``ERR syntax error``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unsupported(Exception):
    """A command or option the simulation does not have: raised to the caller, never answered
    with a guess."""


def reply_error(message: str) -> ResponseError:
    """The error redis-py's parser makes of ``-message`` (the server puts no line break in it)."""
    line = message.replace("\r", " ").replace("\n", " ")
    error: ResponseError = BaseParser.parse_error(line)  # type: ignore[no-untyped-call]
    return error


@dataclass(frozen=True)
class Flavor:
    """What differs between the servers the differential test compares with."""

    name: str
    version: str  # what HELLO shows
    noscript: str  # EVALSHA of a script not cached
    script_suffix: str  # added to an error raised in a script: {sha}, {line}
    unknown_in_script: str
    arity_in_script: str
    not_allowed_in_script: str
    script_arguments: str  # a script passed a command something else than a string or number
    script_no_arguments: str  # redis.call()
    wait_in_scripts: bool  # whether a script may call WAIT
    set_deletes_past_expiry: bool  # SET ... PXAT at or before the clock: deleted at once (else
    # stored, and gone once the clock has passed it, as an expiry always is)
    double_text: Callable[[float], str]  # a double that is not a small integer

    def script_error(self, sha: str, line: int) -> str:
        return self.script_suffix.format(sha=sha, line=line)


REDIS_7 = Flavor(
    name="redis",
    version="7.0.15",
    noscript="NOSCRIPT No matching script. Please use EVAL.",
    script_suffix=" script: {sha}, on @user_script:{line}.",
    unknown_in_script="Unknown Redis command called from script",
    arity_in_script="Wrong number of args calling Redis command from script",
    not_allowed_in_script="This Redis command is not allowed from script",
    script_arguments="Lua redis lib command arguments must be strings or integers",
    script_no_arguments="Please specify at least one argument for this redis lib call",
    wait_in_scripts=False,
    set_deletes_past_expiry=False,
    double_text=lambda x: f"{x:.17g}",
)
VALKEY_9 = Flavor(
    name="valkey",
    version="9.1.2",
    noscript="NOSCRIPT No matching script.",
    script_suffix=" script: on @user_script:{line}.",
    unknown_in_script="Unknown command called from script",
    arity_in_script="Wrong number of args calling command from script",
    not_allowed_in_script="This Valkey command is not allowed from script",
    script_arguments="Command arguments must be strings or integers",
    script_no_arguments="Please specify at least one argument for this call",
    wait_in_scripts=True,
    set_deletes_past_expiry=True,
    double_text=repr,  # the shortest text that reads back the same double
)
FLAVORS = {flavor.name: flavor for flavor in (REDIS_7, VALKEY_9)}


def number_text(x: float, flavor: Flavor) -> bytes:
    """A double as the server writes it (a Lua number passed to a command, a sorted set score):
    an integer below 1e17 in plain digits, anything else as the flavor prints doubles."""
    if x.is_integer() and abs(x) < 1e17:
        return b"%d" % x
    if math.isinf(x):
        return b"inf" if x > 0 else b"-inf"
    return flavor.double_text(x).encode()
