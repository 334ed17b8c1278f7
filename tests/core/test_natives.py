"""Scripts or native commands (``fencelock._core.natives``) and what the script-free kind's
replies mean (``NativeMutex``), without a server."""

from __future__ import annotations

import pytest
import redis.exceptions

from fencelock._core.kinds import NATIVE_MUTEX, Mutex, Released
from fencelock._core.natives import ServerCommands, left_without_scripts, scripts_refused
from fencelock._core.options import ClientOptions
from fencelock._core.replies import GONE, RENEWED, TAKEN, Busy, Granted
from fencelock.errors import ScriptsRequired

MUTEX = Mutex()
WRONGTYPE = redis.exceptions.ResponseError(
    "WRONGTYPE Operation against a key holding the wrong kind of value"
)


@pytest.mark.parametrize(
    ("hello", "delete", "compare_set"),
    [
        ({b"server": b"valkey", b"version": b"9.1.2", b"proto": 3}, "DELIFEQ", True),
        ({"server": "valkey", "version": "9.0.0"}, "DELIFEQ", True),  # decoded replies
        ({b"server": b"valkey", b"version": b"8.1.4"}, "", True),  # SET IFEQ, no DELIFEQ
        ({b"server": b"valkey", b"version": b"8.0.2"}, "", False),
        ({b"server": b"redis", b"version": b"8.4.0"}, "DELEX", True),
        ({b"server": b"redis", b"version": b"8.6.1-rc1"}, "DELEX", True),
        ({b"server": b"redis", b"version": b"8.2.3"}, "", False),
        ({b"server": b"redis", b"version": b"7.0.15"}, "", False),
        ([b"server", b"valkey", b"version", b"9.1.2", b"modules", []], "DELIFEQ", True),  # RESP2
        ({b"server": b"dragonfly", b"version": b"9.9"}, "", False),
        (None, "", False),
        ({b"server": b"redis", b"version": b"garbled"}, "", False),
    ],
)
def test_native_commands_are_read_from_hello(hello: object, delete: str, compare_set: bool) -> None:
    commands = ServerCommands("PUBLISH").detected(hello)
    assert (commands.compare_delete, commands.compare_set) == (delete, compare_set)
    assert commands.script_free == (bool(delete) and compare_set)
    assert commands.publish == "PUBLISH"


def test_the_compare_and_delete_is_spelled_as_the_server_has_it() -> None:
    valkey = ServerCommands().detected({"server": "valkey", "version": "9.0.0"})
    redis_ = ServerCommands().detected({"server": "redis", "version": "8.4.0"})
    assert valkey.delete_if("k", "h") == ("DELIFEQ", "k", "h")
    assert redis_.delete_if("k", "h") == ("DELEX", "k", "IFEQ", "h")
    assert valkey.server == "valkey 9.0.0"


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        # Redis 7.0, Redis >= 7.2 and Valkey: an ACL without the command
        ("this user has no permissions to run the 'evalsha' command or its subcommand", True),
        ("User app has no permissions to run the 'evalsha' command", True),
        ("User app has no permissions to run the 'eval' command", True),
        # a server or a proxy without scripting
        ("unknown command 'EVALSHA', with args beginning with: 'abc' '1' ", True),
        ("unknown command `EVALSHA`, with args beginning with: ", True),
        # not the script command refused: a key, a channel, another command, the script's own
        ("No permissions to access a key", False),
        ("User app has no permissions to run the 'evalsha_ro' command", False),
        ("User app has no permissions to run the 'get' command", False),
        ("ERR Error running script: @user_script:1: NOPERM ... 'eval'", False),
        ("NOSCRIPT No matching script. Please use EVAL.", False),
    ],
)
def test_a_refusal_of_scripts_is_told_from_other_errors(message: str, refused: bool) -> None:
    assert scripts_refused(redis.exceptions.ResponseError(message)) is refused


def test_scripts_option_is_checked_with_wake() -> None:
    options = dict(
        prefix="fencelock:",
        socket_timeout=5.0,
        max_poll=None,
        min_replicas=0,
        replica_timeout=1.0,
        node_timeout=None,
        max_handoffs=10,
        label=None,
    )
    auto = ClientOptions.checked(**options, wake=None)
    assert (auto.scripts, auto.wake) == ("auto", "one")
    never = ClientOptions.checked(**options, wake=None, scripts="never")
    assert (never.scripts, never.wake) == ("never", "all")
    assert ClientOptions.checked(**options, wake="all", scripts="never").wake == "all"
    # a queue served by releases cannot be kept without scripts: refused, not ignored
    with pytest.raises(ScriptsRequired, match='wake="one" needs Lua scripts'):
        ClientOptions.checked(**options, wake="one", scripts="never")
    with pytest.raises(ValueError, match="scripts must be one of"):
        ClientOptions.checked(**options, wake=None, scripts="sometimes")
    with pytest.raises(ValueError, match="wake must be one of"):
        ClientOptions.checked(**options, wake="some", scripts="auto")


# -- NativeMutex: its replies -------------------------------------------------------------------


# a SET done: as sent, decoded, or through redis-py's callback
@pytest.mark.parametrize("done", [b"OK", "OK", True])
def test_a_native_acquire_is_granted_with_the_counters_token(done: object) -> None:
    # SET IFEQ (ours from before), SET NX ... GET (None: there was no value), SET NX of the
    # counter, INCRBY, PTTL
    assert NATIVE_MUTEX.acquire_result([None, None, None, 1234, 5000]) == Granted(1234)
    # a request sent again after its grant: the IFEQ finds it ours, the NX its value
    assert NATIVE_MUTEX.acquire_result([done, b"h", None, 1240, 5000]) == Granted(1240)


def test_a_native_acquire_reads_busy_and_its_lease() -> None:
    other = b"someone else"
    assert NATIVE_MUTEX.acquire_result([None, other, None, 9, 2500]) == Busy(2.5)
    assert NATIVE_MUTEX.acquire_result([None, other, None, 9, -1]) == Busy(None)  # no expiry
    assert NATIVE_MUTEX.acquire_result([None, other, None, 9, -2]) == Busy(0.0)  # gone: re-try
    # a reentrant lock's hash holds the name: busy, not an error
    assert NATIVE_MUTEX.acquire_result([WRONGTYPE, WRONGTYPE, None, 9, 700]) == Busy(0.7)
    refused = redis.exceptions.NoPermissionError("No permissions to access a key")
    with pytest.raises(redis.exceptions.NoPermissionError):
        NATIVE_MUTEX.acquire_result([refused, refused, refused, refused, refused])


def test_a_granted_acquire_without_a_token_raises() -> None:
    # the counter holds something else: the grant must not be used (the caller gives it back)
    bad = redis.exceptions.ResponseError("ERR value is not an integer or out of range")
    with pytest.raises(redis.exceptions.ResponseError, match="not an integer"):
        NATIVE_MUTEX.acquire_result([None, None, None, bad, 5000])


def test_a_native_release_reads_what_it_did() -> None:
    # DELIFEQ, GET, PUBLISH
    assert NATIVE_MUTEX.release_result([0, b"someone else", 3]) is Released.NOT_HELD
    assert NATIVE_MUTEX.release_result([1, None, 0]) is Released.RELEASED
    assert NATIVE_MUTEX.release_result([1, None, 2]) is Released.WOKE
    # no right to publish: released all the same (waiters re-try at the lease's end)
    denied = redis.exceptions.NoPermissionError("No permissions to access a channel")
    assert NATIVE_MUTEX.release_result([1, None, denied]) is Released.RELEASED


def test_a_native_renewal_tells_gone_from_taken() -> None:
    holder = "h" * 27
    assert NATIVE_MUTEX.renew_result([b"OK", holder.encode(), 1], holder) == RENEWED
    assert NATIVE_MUTEX.renew_result([True, holder, 0], holder) == RENEWED
    assert NATIVE_MUTEX.renew_result([None, None, 0], holder) == GONE
    assert NATIVE_MUTEX.renew_result([None, b"someone else", 0], holder) == TAKEN
    assert NATIVE_MUTEX.renew_result([WRONGTYPE, WRONGTYPE, 0], holder) == TAKEN


def test_a_native_handoff_reserves_its_block() -> None:
    # SET IFEQ, GET, SET NX of the counter, INCRBY
    assert NATIVE_MUTEX.handoff_result([b"OK", b"h", None, 57]) == Granted(57)
    assert NATIVE_MUTEX.handoff_result([None, None, None, 57]) == Busy(None)


def test_a_grant_made_by_a_script_is_found_by_the_value_it_is_stored_with() -> None:
    """A script's grant is stored as 'holder token' (one key per held lock), which the native
    commands compare with exactly: the second reply of an acquire (its SET ... GET), a release,
    renewal or hand-off (the key's GET) gives that value, with which the request is sent again,
    for the holder's own grant only."""
    holder = "h" * 27 + "~a%20label"
    stored = f"{holder} 1764430000123456"
    for read in (stored.encode(), stored):  # as sent, or decoded
        assert NATIVE_MUTEX.held_as([0, read, 1], holder) == stored
        assert NATIVE_MUTEX.held_as([None, read, 0], holder) == stored
        # an acquire: busy to the holder token alone, its grant found by that value
        acquire = [None, read, None, 9, 2500]
        assert NATIVE_MUTEX.acquire_result(acquire) == Busy(2.5)
        assert NATIVE_MUTEX.held_as(acquire, holder) == stored
    not_ours = (
        None,  # gone
        holder.encode(),  # the holder token alone: that was compared already
        f"{'x' * 27} 1764430000123456".encode(),  # another holder's grant
        f"{holder}x 1764430000123456".encode(),  # another token that starts as ours
        f"{holder} 17644300001234x".encode(),  # not 'holder token'
        WRONGTYPE,  # a reentrant lock's hash
    )
    for read in not_ours:
        assert NATIVE_MUTEX.held_as([0, read, 1], holder) is None, read
    # a value found once is not found again: the request sent with it has the last word
    assert NATIVE_MUTEX.held_as([0, stored.encode(), 1], stored) is None
    # a kind of scripts has nothing to send again
    assert MUTEX.held_as([0, stored.encode(), 1], holder) is None


def test_what_is_left_without_scripts_names_what_the_server_lacks() -> None:
    redis7 = ServerCommands().detected({"server": "redis", "version": "7.0.15"})
    valkey81 = ServerCommands().detected({"server": "valkey", "version": "8.1.4"})
    valkey9 = ServerCommands().detected({"server": "valkey", "version": "9.0.0"})
    assert valkey9.lacking() == ""
    assert (
        valkey81.lacking() == "a compare-and-delete (DELIFEQ: Valkey >= 9.0, DELEX: Redis >= 8.4)"
    )
    assert redis7.lacking().startswith("SET ... IFEQ (Valkey >= 8.1, Redis >= 8.4) and a ")
    # the warning of a client whose server refused a script: what it can still take there
    assert left_without_scripts(valkey9, one_server=True).startswith("plain locks only")
    for lacking in (redis7, valkey81, ServerCommands()):  # (unknown: HELLO refused)
        left = left_without_scripts(lacking, one_server=True)
        assert left.startswith("nothing: ") and lacking.lacking() in left
        assert "every lock and every other primitive raises ScriptsRequired" in left
    assert left_without_scripts(valkey9, one_server=False).startswith("nothing: a Cluster")
