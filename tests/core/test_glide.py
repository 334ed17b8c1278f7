"""valkey-glide's replies and error replies read in redis-py's terms (``fencelock._glide``): the
messages below are glide 2.6's own renderings, measured against Redis 7 and Valkey 9."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    BusyLoadingError,
    NoPermissionError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
)

from fencelock._async.glide_route import primaries
from fencelock._core.natives import ServerCommands, scripts_refused
from fencelock._glide import argument, decoded, error_reply, package_of

SIGNALLED = "An error was signalled by the server: - "


@pytest.mark.parametrize(
    ("message", "error", "text"),
    [
        (f"{SIGNALLED}NoScriptError: No matching script. Please use EVAL.", NoScriptError,
         "No matching script. Please use EVAL."),
        (f"{SIGNALLED}ResponseError: value is not an integer or out of range", ResponseError,
         "value is not an integer or out of range"),
        (f"{SIGNALLED}PermissionDenied: User u has no permissions to run the 'evalsha' command",
         NoPermissionError, "User u has no permissions to run the 'evalsha' command"),
        (f"{SIGNALLED}ReadOnly: You can't write against a read only replica.", ReadOnlyError,
         "You can't write against a read only replica."),
        (f"{SIGNALLED}BusyLoadingError: Redis is loading", BusyLoadingError, "Redis is loading"),
        (f"{SIGNALLED}Moved: 12 127.0.0.1:7001", ResponseError, "MOVED 12 127.0.0.1:7001"),
        ("WRONGTYPE: Operation against a key holding the wrong kind of value", ResponseError,
         "WRONGTYPE Operation against a key holding the wrong kind of value"),
        ("NOREPLICAS: Not enough good replicas to write.", ResponseError,
         "NOREPLICAS Not enough good replicas to write."),
        ("BUSY: x", ResponseError, "BUSY x"),
        ("something glide says itself", ResponseError, "something glide says itself"),
    ],
)  # fmt: skip
def test_an_error_reply_is_redis_pys(message: str, error: type[Exception], text: str) -> None:
    found = error_reply(message)
    assert type(found) is error and str(found) == text


def test_a_refusal_of_scripts_is_recognised_through_glide() -> None:
    unknown = f"{SIGNALLED}ResponseError: unknown command 'EVALSHA', with args beginning with: "
    denied = f"{SIGNALLED}PermissionDenied: User u has no permissions to run the 'eval' command"
    assert scripts_refused(error_reply(unknown)) and scripts_refused(error_reply(denied))
    assert not scripts_refused(error_reply(f"{SIGNALLED}NoScriptError: No matching script."))


def test_replies_read_as_on_a_resp2_connection() -> None:
    assert decoded("OK") == b"OK"  # glide's simple string OK
    assert decoded(b"v") == b"v" and decoded(7) == 7 and decoded(None) is None
    assert decoded(True) == 1 and decoded(False) == 0  # RESP3 booleans
    assert decoded(0.5) == b"0.5"  # a RESP3 double: RESP2's bulk string
    assert decoded([1, [b"x", "OK"], None]) == [1, [b"x", b"OK"], None]
    nested = decoded([b"ok", RuntimeError(f"{SIGNALLED}NoScriptError: No matching script.")])
    assert nested[0] == b"ok" and isinstance(nested[1], NoScriptError)
    hello = {b"server": b"valkey", b"version": b"9.0.0", b"proto": 3, b"modules": []}
    flat = decoded(hello)
    assert flat == [b"server", b"valkey", b"version", b"9.0.0", b"proto", 3, b"modules", []]
    assert ServerCommands().detected(flat).server == "valkey 9.0.0"


def test_arguments_are_written_as_fencelocks_own_packer_writes_them() -> None:
    assert [argument(a) for a in ("k", b"b", 12, 0.25)] == ["k", b"b", "12", "0.25"]


def test_a_glide_client_is_known_without_importing_glide() -> None:
    glide_like = type("GlideClient", (), {"__module__": "glide.glide_client"})()
    sync_like = type("GlideClient", (), {"__module__": "glide_sync.glide_client"})()
    assert package_of(glide_like) == "glide" and package_of([sync_like]) == "glide_sync"
    assert package_of(object()) is None and package_of([]) is None and package_of("glide") is None


def test_a_failing_primary_is_listed_while_it_serves_slots() -> None:
    """Its names are on no other node: a listing without it would not be whole."""
    nodes = (
        b"a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n"
        b"a2 10.0.0.2:7001@17001 master,fail? - 0 0 2 connected 5461-10922\n"
        b"a3 10.0.0.3:7002@17002 master,fail - 0 0 3 connected 10923-16383\n"
        b"a4 10.0.0.4:7003@17003 master,fail - 0 0 4 connected\n"  # (failed over: no slots)
        b"a5 10.0.0.5:7004@17004 slave a1 0 0 1 connected\n"
    )
    assert primaries(nodes) == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("10.0.0.3", 7002)]
