"""The rules of compute_once (``fencelock._core.compute``), without a server: what a caller does
with what it found, the look's reply, the codec and the arguments."""

from __future__ import annotations

import json
import pickle

import pytest

from fencelock._core.compute import (
    BUILDERS,
    COMPUTE,
    IDEMPOTENT,
    JSON,
    ComputeKeys,
    Failure,
    Found,
    Step,
    check_codec,
    check_fingerprint,
    check_key_of,
    decoded,
    encoded,
    failure_args,
    found_reply,
    key_for,
    next_step,
    stored_reply,
    told,
)
from fencelock._keys import LockKeys
from fencelock.errors import LockError, ResultError


def found(
    value: bytes | None = None,
    token: int = 0,
    age: float = 0.0,
    building: int | None = None,
    failure: Failure | None = None,
) -> Found:
    return Found(value, token, age, None, building, None if building is None else 1.0, failure)


@pytest.mark.parametrize(
    ("seen", "waited_for", "step"),
    [
        (found(), None, Step.BUILD),  # nothing, nobody builds it
        (found(building=7), None, Step.WAIT),
        (found(b"1", 5, age=10), None, Step.HIT),
        (found(b"1", 5, age=10, building=7), None, Step.HIT),  # (a refresh under way)
        (found(b"1", 5, age=70), None, Step.REFRESH),  # stale, nobody refreshes it
        (found(b"1", 5, age=70, building=7), None, Step.STALE),
        (found(b"1", 5, age=700), None, Step.BUILD),  # past stale_for: as good as none
        (found(b"1", 5, age=700, building=7), None, Step.WAIT),
        # a waiter takes the result of the build it waited for, however old...
        (found(b"1", 7, age=700), 7, Step.WAITED),
        (found(b"1", 8, age=700), 7, Step.WAITED),
        # ...not an older one
        (found(b"1", 5, age=700, building=7), 7, Step.WAIT),
        (found(b"1", 5, age=700), 7, Step.BUILD),  # (that build ended without a result)
        # the failure of the build it waited for, or of a later one, is its own
        (found(failure=Failure(7, "KeyError", "x")), 7, Step.FAILED),
        (found(failure=Failure(9, "KeyError", "x")), 7, Step.FAILED),
        # an older one is not: a caller that came after it builds afresh
        (found(failure=Failure(5, "KeyError", "x")), 7, Step.BUILD),
        (found(failure=Failure(5, "KeyError", "x")), None, Step.BUILD),
        (found(failure=Failure(5, "KeyError", "x"), building=7), 7, Step.WAIT),
    ],
)
def test_what_a_caller_does_next(seen: Found, waited_for: int | None, step: Step) -> None:
    assert next_step(seen, 60.0, 600.0, waited_for) is step


def test_the_look_reply_reads_alike_in_resp2_and_resp3() -> None:
    reply = [b'"v"', b"12", 1500, None, 250, b"14", b"14", b"ValueError", b"bad"]
    assert found_reply(reply) == Found(
        b'"v"', 12, 1.5, None, 14, 0.25, Failure(14, "ValueError", "bad")
    )
    # nothing stored, no build, no failure
    assert found_reply([None, b"0", -1, None, -2, None, None, b"", b""]) == Found(
        None, 0, -0.001, None, None, None, None
    )
    with pytest.raises(LockError, match="unexpected"):
        found_reply([1, 2])
    with pytest.raises(LockError, match="unexpected"):
        found_reply([None, b"x", -1, None, -2, None, None, b"", b""])
    assert stored_reply([1]) == (True, 0, None)
    assert stored_reply([0, b"9", b'"newer"']) == (False, 9, b'"newer"')


def test_a_stores_message_tells_its_result_only_when_it_carries_it() -> None:
    assert told(b'v41:{"a":[1,2]}', 41) == Found(b'{"a":[1,2]}', 41, 0.0, None, None, None, None)
    assert told(b"v7:", 5) == Found(b"", 7, 0.0, None, None, None, None)  # (a later build's)
    assert told(b"v7:a:b", None) == Found(b"a:b", 7, 0.0, None, None, None, None)
    assert told(b"v5:x", 6) is None  # an older build's than the one waited for: look
    # what a waiter then reads: a plain store's, a release's, a failure's, nothing, garbage
    for message in (b"v", b"1", b"e", None, b"vx:1", b"v:1", b"v12"):
        assert told(message, None) is None


def test_every_key_of_a_computed_key_shares_its_hash_tag_and_family() -> None:
    keys = ComputeKeys.for_compute("report:{x}", "app:", COMPUTE)
    assert keys.result == "app:{report:%7Bx%7D}:compute:result"
    everything = (*keys.looked(), keys.channel, keys.queue)
    assert all(key.startswith("app:{report:%7Bx%7D}:compute:") for key in everything)
    assert BUILDERS[IDEMPOTENT].keys("r", "p:").lock == "p:{r}:idempotent:lock"
    assert BUILDERS[COMPUTE].keys("r", "p:").lock != LockKeys.for_name("r", "p:").lock
    assert BUILDERS[COMPUTE].without_scripts() is None


def test_the_default_codec_is_json_and_a_codec_is_checked() -> None:
    assert check_codec(None) is JSON
    assert check_codec(pickle) is pickle
    assert check_codec(json) is json  # dumps returns a str: stored as UTF-8
    assert decoded(json, encoded(json, {"a": "é"}, 100, "k"), "k") == {"a": "é"}
    assert encoded(JSON, {"a": [1, (2, 3)]}, 100, "k") == b'{"a":[1,[2,3]]}'
    with pytest.raises(TypeError, match="no loads"):
        check_codec(type("Half", (), {"dumps": staticmethod(lambda v: b"")})())


def test_a_result_that_cannot_be_stored_or_read_is_a_result_error() -> None:
    with pytest.raises(ResultError, match="JSON refused set"):
        encoded(JSON, {1, 2}, 100, "k")
    with pytest.raises(ResultError, match="5 bytes encoded, over max_size \\(4\\)"):
        encoded(JSON, "abc", 4, "k")
    assert encoded(JSON, "ab", 4, "k") == b'"ab"'
    with pytest.raises(ResultError, match="cannot be read by JSON"):
        decoded(JSON, pickle.dumps({1}), "k")
    with pytest.raises(ResultError, match="not bytes"):
        encoded(type("Odd", (), {"dumps": staticmethod(lambda v: 1)})(), 1, 10, "k")  # type: ignore[arg-type]


def test_a_failure_names_its_type_as_code_would() -> None:
    assert failure_args(KeyError("x")) == ("KeyError", "'x'")
    assert failure_args(json.JSONDecodeError("bad", "", 0))[0] == "json.decoder.JSONDecodeError"
    assert len(failure_args(ValueError("x" * 5000))[1]) == 1000


def test_a_fingerprint_is_bytes_of_a_bounded_length() -> None:
    assert check_fingerprint(None) is None
    assert check_fingerprint("sha256:ab") == b"sha256:ab"
    assert check_fingerprint(b"\x00\x01") == b"\x00\x01"
    with pytest.raises(ValueError, match="fingerprint"):
        check_fingerprint("")
    with pytest.raises(ValueError, match="fingerprint"):
        check_fingerprint(b"x" * 5000)
    with pytest.raises(TypeError, match="fingerprint"):
        check_fingerprint(12)


def test_a_decorated_functions_key_comes_from_its_arguments() -> None:
    def report(user_id: int, period: str = "day", *, detail: bool = False) -> None: ...

    signature = check_key_of("r:{user_id}:{period}:{detail}", report)
    assert key_for("r:{user_id}:{period}:{detail}", signature, (7,), {}) == "r:7:day:False"
    assert (
        key_for("r:{user_id}:{period}:{detail}", signature, (), {"user_id": 8}) == "r:8:day:False"
    )
    assert key_for(lambda *a, **k: f"f:{a}", signature, (7,), {}) == "f:(7,)"
    with pytest.raises(ValueError, match="'user', 'when'"):
        check_key_of("r:{user}:{when}", report)
    with pytest.raises(ValueError, match="''"):
        check_key_of("r:{}", report)
    with pytest.raises(TypeError):
        key_for("r:{user_id}", signature, (), {})  # a call missing an argument: as Python says
