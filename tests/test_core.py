"""Plain unit tests of the sans-I/O decisions: no server needed."""

from __future__ import annotations

import math

import pytest
from redis.crc import key_slot
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from fencelock import LockConnectionError, LockError, StaleToken
from fencelock._core.replies import (
    Busy,
    Granted,
    acquire_reply,
    fenced_set_reply,
    new_holder_token,
    owned_reply,
    translate_error,
)
from fencelock._core.timing import drift, lease_deadline, remaining, retry_delay
from fencelock.keys import (
    LockKeys,
    escape,
    fence_key_for,
    validate_name,
    validate_prefix,
    validate_timeout,
    validate_ttl,
)


def test_keys_share_one_hash_slot() -> None:
    for name in ["job", "{job}", "a}b{c", "}", "{", "%", "ünï", "x" * 4096]:
        keys = LockKeys.for_name(name)
        slots = {key_slot(k.encode()) for k in (keys.lock, keys.fence, keys.channel)}
        assert len(slots) == 1, name
        assert keys.lock.startswith("fencelock:{")


def test_escaping_is_injective() -> None:
    names = ["{a}", "%7Ba%7D", "%7Ba}", "a", "%", "%25", "{", "%7B"]
    assert len({escape(n) for n in names}) == len(names)
    assert all("{" not in escape(n) and "}" not in escape(n) for n in names)


def test_custom_prefix() -> None:
    assert LockKeys.for_name("n", "app:").lock == "app:{n}:lock"
    with pytest.raises(ValueError, match="prefix"):
        validate_prefix("a{b")
    with pytest.raises(TypeError, match="prefix"):
        validate_prefix(3)


@pytest.mark.parametrize("resource", ["balance", "{user:1}:balance", "x{tag}y", "a{b"])
def test_fence_companion_in_resource_slot(resource: str) -> None:
    assert key_slot(fence_key_for(resource).encode()) == key_slot(resource.encode())


def test_validation() -> None:
    assert validate_ttl(1) == 1.0
    assert validate_timeout(None) is None and validate_timeout(0) == 0.0
    assert validate_timeout(math.inf) is None
    for bad in (0, -0.5, math.nan, math.inf, 10**9):
        with pytest.raises(ValueError, match="ttl"):
            validate_ttl(bad)
    for bad_type in ("1", None, True, [1]):
        with pytest.raises(TypeError, match="ttl"):
            validate_ttl(bad_type)
    with pytest.raises(ValueError, match="name"):
        validate_name("x" * 5000)


def test_holder_tokens_are_long_and_unique() -> None:
    tokens = {new_holder_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) >= 27 for t in tokens)  # 20 bytes of url-safe base64


def test_acquire_reply() -> None:
    assert acquire_reply([1, 7]) == Granted(7)
    assert acquire_reply([0, 1500]) == Busy(1.5)
    assert acquire_reply([0, -1]) == Busy(None)
    assert acquire_reply([b"1", b"3"]) == Granted(3)
    with pytest.raises(LockError):
        acquire_reply(None)


def test_owned_and_fenced_replies() -> None:
    assert owned_reply(1) and not owned_reply(0)
    fenced_set_reply([1, b"0"], "k", 3)
    with pytest.raises(StaleToken) as info:
        fenced_set_reply([0, b"9"], "k", 3)
    assert (info.value.token, info.value.seen) == (3, 9)


def test_translate_error() -> None:
    assert isinstance(translate_error(ConnectionError("x"), "k"), LockConnectionError)
    assert isinstance(translate_error(TimeoutError("x"), "k"), LockConnectionError)
    wrong = translate_error(ResponseError("WRONGTYPE Operation against a key"), "k")
    assert type(wrong) is LockError and "another Redis type" in str(wrong)


def test_retry_delay_never_past_deadline() -> None:
    assert retry_delay(0.3, 10.0, 1.0) == 0.3  # the holder's lease ends first
    assert retry_delay(30.0, 10.0, 1.0) == 1.0  # bounded fallback poll
    assert retry_delay(30.0, 0.05, 1.0) == 0.05  # never past the caller's deadline
    assert retry_delay(None, None, 1.0) == 1.0  # a key without expiry: poll
    assert retry_delay(0.3, 0.0, 1.0) == 0.0
    assert (
        remaining(None, 5.0) is None and remaining(4.0, 5.0) == 0.0 and remaining(6.0, 5.0) == 1.0
    )


def test_lease_deadline_is_conservative() -> None:
    assert drift(10.0) == pytest.approx(0.102)
    assert lease_deadline(100.0, 10.0) == pytest.approx(109.898)
    assert lease_deadline(100.0, 10.0) < 100.0 + 10.0
