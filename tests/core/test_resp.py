"""Requests packed by ``_core/resp.py`` are the bytes redis-py packs, a script call's head kept
once per name (no server)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio.connection
import redis.connection
import redis.utils
from redis.exceptions import DataError

from fencelock._core import resp
from fencelock._core.resp import Packer
from fencelock._transport import Template


def redis_py(*commands: tuple[Any, ...], encoding: str = "utf-8") -> bytes:
    conn = redis.connection.Connection(encoding=encoding)
    return b"".join(b"".join(conn.pack_command(*command)) for command in commands)


SHA = "a" * 40
COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", SHA, 3, "fencelock:{n}:lock", "fencelock:{n}:fence", "q", "holder", 10000, 1, ""),
    ("EVALSHA", SHA, 0, "no keys", -5, 2.5, b"\x00\xff", memoryview(b"view")),
    ("EVALSHA", SHA, 1, "fencelock:{é}:lock", "ünïcode"),
    ("EVAL", "return 1", 1, "k", "a"),
    ("INFO", "memory"),
    ("CONFIG GET", "maxmemory-policy"),
    ("SET", "k", "x" * 10_000),  # (redis-py sends a large value in a chunk of its own)
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_a_command_packs_as_redis_py_packs_it(command: tuple[Any, ...]) -> None:
    packer = Packer()
    assert packer.pack([command]) == redis_py(command)
    assert packer.pack([command]) == redis_py(command)  # again, with its head kept


def test_a_pipeline_is_its_commands_one_after_the_other() -> None:
    commands = [COMMANDS[0], ("WAIT", 1, 100)]
    assert Packer().pack(commands) == redis_py(*commands)


def test_the_same_head_with_other_arguments() -> None:
    packer = Packer()
    first = ("EVALSHA", SHA, 1, "k", "holder-1", 10)
    second = ("EVALSHA", SHA, 1, "k", "holder-2", 20, "more")
    assert packer.pack([first]) == redis_py(first)
    assert packer.pack([second]) == redis_py(second)


def test_strings_in_the_connections_encoding() -> None:
    command = ("EVALSHA", SHA, 1, "clé", "valeur ü")
    # (redis-py's asyncio connection packs in Python, in its encoding, hiredis or not)
    in_python = redis.asyncio.connection.Connection(encoding="latin-1").pack_command(*command)
    assert Packer("latin-1").pack([command]) == b"".join(in_python)
    assert Packer("latin-1").pack([command]) != Packer().pack([command])


@pytest.mark.parametrize("hiredis", [False, True], ids=["python", "hiredis"])
@pytest.mark.parametrize("asyncio", [False, True], ids=["sync", "asyncio"])
def test_a_templates_packer_writes_what_its_connection_writes(
    hiredis: bool, asyncio: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py's sync connection packs with hiredis where installed, and hiredis writes UTF-8
    # whatever the connection's encoding (a latin-1 name would be another key than redis-py's)
    if hiredis and not redis.utils.HIREDIS_AVAILABLE:
        pytest.skip("hiredis is not installed")
    monkeypatch.setattr(redis.connection, "HIREDIS_AVAILABLE", hiredis)
    kind = redis.asyncio.connection.Connection if asyncio else redis.connection.Connection
    template = Template(kind, {"encoding": "latin-1"}, 1, 1.0)
    command = ("EVALSHA", SHA, 1, "clé", "valeur ü")
    written = b"".join(template.make().pack_command(*command))
    assert Packer(*template.encoding).pack([command]) == written


@pytest.mark.parametrize("bad", [True, None, object(), ["list"]])
def test_what_redis_py_refuses_is_refused(bad: object) -> None:
    with pytest.raises(DataError, match="Invalid input of type"):
        Packer().pack([("EVALSHA", SHA, 1, "k", bad)])
    with pytest.raises(DataError, match="Invalid input of type"):
        Packer().pack([("EVALSHA", SHA, 1, bad)])  # in the head


def test_the_heads_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resp, "HEADS", 3)
    packer = Packer()
    for i in range(10):
        command = ("EVALSHA", SHA, 1, f"name-{i}", "holder")
        assert packer.pack([command]) == redis_py(command)
        assert len(packer._heads) <= 3
