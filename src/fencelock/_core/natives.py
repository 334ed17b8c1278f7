"""Scripts or native commands: which a client may run, and which its server has (no I/O).

Every grant of fencelock is a Lua script. Some operators deny scripts to applications (an ACL
with ``-@scripting``, after CVE-2025-49844), and some services run none. A plain lock can still
be safe there, with the native conditional commands of recent servers: a compare-and-delete
(Valkey >= 9.0 ``DELIFEQ``, Redis >= 8.4 ``DELEX ... IFEQ``) and a compare-and-set (Valkey >=
8.1 and Redis >= 8.4 ``SET ... IFEQ``). A client learns which its server has once, from the
``HELLO`` of its first request (``HELLO`` answers every user, whatever its ACL), and runs no
scripts when told so (``LockClient(r, scripts="never")``) or when the server refuses them
(``scripts="auto"``, the default): docs/modes.md, "Without scripts".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

SCRIPT_MODES: Final = ("auto", "never")

# the first versions with each native command
VALKEY_DELIFEQ: Final = (9, 0)
VALKEY_IFEQ: Final = (8, 1)
REDIS_DELEX_IFEQ: Final = (8, 4)

# A refusal of the script command itself (an ACL without it, or a server or proxy without
# scripting), not of a key or a channel a script touched: "NOPERM User u has no permissions to
# run the 'evalsha' command", "ERR unknown command 'EVALSHA', with args beginning with: ..."
_REFUSED = re.compile(r"(?:no permissions to run the|unknown command) [`']?eval(?:sha)?\b", re.I)


def scripts_refused(error: BaseException) -> bool:
    """Whether an error reply to EVALSHA or EVAL says that the server runs no script for this
    client (nothing ran)."""
    return _REFUSED.search(str(error)) is not None


@dataclass(frozen=True, slots=True)
class ServerCommands:
    """How a client's requests are spelled on its server: ``PUBLISH`` (or ``SPUBLISH`` on a
    Cluster), and the native conditional commands the server has (none until detected)."""

    publish: str = "PUBLISH"
    server: str = ""  # "valkey 9.1.2", for messages ('' : not known)
    compare_delete: str = ""  # "DELIFEQ", "DELEX" or '' (none)
    compare_set: bool = False  # SET ... IFEQ

    @property
    def script_free(self) -> bool:
        """Whether a plain lock can be held safely here without scripts."""
        return bool(self.compare_delete) and self.compare_set

    def lacking(self) -> str:
        """The native commands a lock needs without scripts that the server lacks, for
        messages ('': none)."""
        missing = []
        if not self.compare_set:
            missing.append("SET ... IFEQ (Valkey >= 8.1, Redis >= 8.4)")
        if not self.compare_delete:
            missing.append("a compare-and-delete (DELIFEQ: Valkey >= 9.0, DELEX: Redis >= 8.4)")
        return " and ".join(missing)

    def delete_if(self, key: str, value: str) -> tuple[str, ...]:
        """Delete ``key`` if, and only if, it holds ``value``: 1 if deleted, else 0."""
        if self.compare_delete == "DELEX":
            return ("DELEX", key, "IFEQ", value)
        return ("DELIFEQ", key, value)

    def detected(self, hello: object) -> ServerCommands:
        """These commands with what ``HELLO``'s reply (a map, or RESP2's flat list) shows."""
        fields = _fields(hello)
        name, version = fields.get("server", ""), parse_version(fields.get("version", ""))
        described = f"{name} {fields.get('version', '')}".strip()
        if name == "valkey":
            delete = "DELIFEQ" if version >= VALKEY_DELIFEQ else ""
            return replace(
                self, server=described, compare_delete=delete, compare_set=version >= VALKEY_IFEQ
            )
        native = name == "redis" and version >= REDIS_DELEX_IFEQ
        return replace(
            self, server=described, compare_delete="DELEX" if native else "", compare_set=native
        )


def left_without_scripts(commands: ServerCommands, one_server: bool) -> str:
    """What a client can still do where its server refuses scripts (``commands``: what the
    server has; ``one_server``: not a Cluster, which needs scripts for every grant): for the
    warning that says so once."""
    if not one_server:
        return "nothing: a Cluster needs them for every grant (each raises ScriptsRequired)"
    if commands.script_free:
        return (
            "plain locks only, by the server's native commands (anything else raises "
            "ScriptsRequired)"
        )
    server = commands.server or "the server"
    return (
        f"nothing: {server} lacks {commands.lacking()} too, so every lock and every other "
        "primitive raises ScriptsRequired"
    )


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _fields(hello: object) -> dict[str, str]:
    pairs: Sequence[Any] | Any
    if isinstance(hello, Mapping):
        pairs = list(hello.items())
    elif isinstance(hello, list | tuple):
        pairs = list(zip(hello[::2], hello[1::2], strict=False))
    else:
        return {}
    return {_text(k).lower(): _text(v) for k, v in pairs if not isinstance(v, list | dict)}


def parse_version(text: str) -> tuple[int, ...]:
    """(major, minor, ...) of a version string; () when it is none."""
    parts = re.findall(r"\d+", text.partition("-")[0])
    return tuple(int(p) for p in parts[:3])


class ScriptMode:
    """Whether a client runs scripts now, and what its server has natively: one per client,
    shared by its topology and by the asyncio client's renewal twin (``_offloop.py``). It
    changes once at most: "auto" turns script-free when the server refuses a script."""

    __slots__ = ("auto", "commands", "detected", "no_scripts")

    def __init__(self, scripts: str, publish: str) -> None:
        self.auto = scripts == "auto"
        # why this client runs no scripts ('' : it runs them)
        self.no_scripts = "" if self.auto else 'it was made with scripts="never"'
        self.commands = ServerCommands(publish)
        self.detected = False  # whether the server was asked what it is (``commands``)
