"""Requests in RESP, the bytes redis-py's ``pack_command`` makes, made faster for the calls
fencelock repeats.

A script call, ``EVALSHA sha numkeys key...`` and its arguments, repeats its head (the command,
the script, the keys of one name) call after call: ``Packer`` encodes each head once and keeps
it, and encodes only the arguments (a holder token, a ttl) per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from redis.exceptions import DataError

# heads kept per packer: one per (script, name) in use; past that the packer starts afresh
HEADS: Final = 512


class Packer:
    """Commands to bytes, their strings encoded as ``encoding`` with ``errors`` (a server's
    connection settings: redis-py's ``encoding`` and ``encoding_errors``)."""

    __slots__ = ("_errors", "_heads", "encoding")

    def __init__(self, encoding: str = "utf-8", errors: str = "strict") -> None:
        self.encoding = encoding
        self._errors = errors
        self._heads: dict[tuple[Any, ...], bytes] = {}

    def pack(self, commands: Sequence[Sequence[Any]]) -> bytes:
        """``commands`` as one write (a pipeline of them, if several)."""
        if len(commands) == 1:
            return self._command(commands[0])
        return b"".join(self._command(command) for command in commands)

    def _command(self, command: Sequence[Any]) -> bytes:
        name = command[0]
        if name == "EVALSHA" and type(command[2]) is int:
            end = 3 + command[2]
            head = tuple(command[:end])
            try:
                packed = self._heads.get(head)
            except TypeError:  # an unhashable key: refused as redis-py does
                packed = self._args(head)
            if packed is None:
                if len(self._heads) >= HEADS:
                    self._heads.clear()
                packed = self._heads[head] = self._args(head)
            parts = [b"*%d\r\n" % len(command), packed]
            rest = command[end:]
        else:
            if isinstance(name, str) and " " in name:  # "CONFIG GET": words of their own
                command = (*name.split(), *command[1:])
            parts = [b"*%d\r\n" % len(command)]
            rest = command
        encoding, errors = self.encoding, self._errors
        for arg in rest:
            if type(arg) is str:
                data = arg.encode(encoding, errors)
            elif type(arg) is int:
                data = b"%d" % arg
            else:
                data = self._other(arg)
            parts += (b"$%d\r\n" % len(data), data, b"\r\n")
        return b"".join(parts)

    def _args(self, args: Sequence[Any]) -> bytes:
        parts: list[bytes] = []
        for arg in args:
            data = arg.encode(self.encoding, self._errors) if type(arg) is str else self._other(arg)
            parts += (b"$%d\r\n" % len(data), data, b"\r\n")
        return b"".join(parts)

    def _other(self, value: Any) -> bytes:
        """What is not a plain ``str`` or ``int``, as redis-py's ``Encoder`` takes it."""
        if isinstance(value, bytes):
            return value
        if isinstance(value, memoryview):
            return value.tobytes()
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise DataError(
                f"Invalid input of type: '{type(value).__name__}'. "
                "Convert to a bytes, string, int or float first."
            )
        if isinstance(value, str):  # (a subclass)
            return value.encode(self.encoding, self._errors)
        return repr(value).encode() if isinstance(value, float) else b"%d" % value
