# GENERATED from tests/primitives/_async/test_idempotent.py by tools/gen_sync.py: edit that file instead.
"""idempotent: once per idempotency key, a repeat while it runs waits for it, a repeat after it
gets its stored result, a repeat with another fingerprint is refused, a first attempt that died
is taken over with a larger token.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import fencelock
from fencelock._sync.client import LockClient
from fencelock._backend import SyncEvent
from fencelock._context import current_token
from fencelock._core.compute import IDEMPOTENT, ComputeKeys
from fencelock._keys import DEFAULT_PREFIX
from tests.concurrency import TIMEOUT, SyncCall, sync_until


class Charge:
    """A payment's ``compute``: counts its runs and returns the token it ran under; with
    ``hold``, it runs until ``go`` is set."""

    def __init__(self, *, hold: bool = False) -> None:
        self.runs: list[int] = []
        self.started, self.go = SyncEvent(), SyncEvent()
        if not hold:
            self.go.set()

    def __call__(self) -> dict[str, Any]:
        self.runs.append(current_token())
        self.started.set()
        assert self.go.wait(TIMEOUT)
        return {"charged": 100, "token": self.runs[-1]}


def keys(name: str) -> ComputeKeys:
    return ComputeKeys.for_compute(name, DEFAULT_PREFIX, IDEMPOTENT)


def test_a_repeat_waits_for_the_first_attempt_then_gets_its_result(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    charge = Charge(hold=True)
    first = SyncCall(lambda: sync_client.idempotent("i-pay", charge, fingerprint="sha:1"))
    assert charge.started.wait(TIMEOUT)
    repeat = SyncCall(lambda: sync_client_b.idempotent("i-pay", charge, fingerprint="sha:1"))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    charge.go.set()
    result = first.result()
    assert repeat.result() == result
    assert sync_client_b.idempotent("i-pay", charge, fingerprint=b"sha:1") == result
    assert sync_client_b.idempotent("i-pay", charge) == result  # (None: not checked)
    assert len(charge.runs) == 1 and result["token"] == charge.runs[0]
    assert 86_000_000 < raw.pttl(keys("i-pay").result) <= 86_400_000  # keep_for
    assert raw.hget(keys("i-pay").result, "p") == "sha:1"


def test_a_repeat_with_another_fingerprint_is_refused(
    sync_client: LockClient, sync_client_b: LockClient, raw: redis.Redis
) -> None:
    charge = Charge(hold=True)
    first = SyncCall(lambda: sync_client.idempotent("i-other", charge, fingerprint="sha:1"))
    assert charge.started.wait(TIMEOUT)
    other = Charge()
    with pytest.raises(fencelock.FingerprintMismatch, match="i-other") as refused:
        sync_client_b.idempotent("i-other", other, fingerprint="sha:2")  # while it runs
    assert refused.value.key == "i-other"
    charge.go.set()
    result = first.result()
    with pytest.raises(fencelock.FingerprintMismatch):  # after it
        sync_client_b.idempotent("i-other", other, fingerprint="sha:2")
    assert other.runs == []
    assert sync_client_b.idempotent("i-other", other, fingerprint="sha:1") == result


def test_a_first_attempt_that_died_is_taken_over_with_a_larger_token(
    sync_client: LockClient, raw: redis.Redis
) -> None:
    # what a first attempt killed mid-run leaves: its fingerprint, its lease (0.3 s left), and
    # the counter at its token
    k = keys("i-dead")
    raw.hset(k.result, "p", "sha:1")
    raw.set(k.lock, "a-dead-attempt", px=300)
    died = raw.time()[0] * 1_000_000
    raw.set(k.fence, died, px=300)
    charge = Charge()
    result = sync_client.idempotent("i-dead", charge, fingerprint="sha:1")
    assert result["token"] > died
    assert sync_client.statistics().compute_takeovers == 1
    with pytest.raises(fencelock.FingerprintMismatch):  # the key is still the first request's
        sync_client.idempotent("i-dead", Charge(), fingerprint="sha:2")


def test_an_attempt_that_raised_runs_again_on_the_next_repeat(
    sync_client: LockClient,
) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the payment provider hung up")
        return "charged"

    with pytest.raises(ConnectionError):
        sync_client.idempotent("i-flaky", flaky, fingerprint="sha:1")
    with pytest.raises(fencelock.FingerprintMismatch):  # still the first request's key
        sync_client.idempotent("i-flaky", flaky, fingerprint="sha:2")
    assert sync_client.idempotent("i-flaky", flaky, fingerprint="sha:1") == "charged"
    assert sync_client.idempotent("i-flaky", flaky, fingerprint="sha:1") == "charged"
    assert len(calls) == 2


def test_idempotent_keys_are_apart_from_compute_once_and_checked(
    sync_client: LockClient,
) -> None:
    def one() -> int:
        return 1

    def two() -> int:
        return 2

    assert sync_client.idempotent("i-apart", one) == 1
    assert sync_client.compute_once("i-apart", two, fresh_for=60) == 2
    assert sync_client.forget("i-apart")  # both dropped
    assert sync_client.idempotent("i-apart", two) == 2
    with pytest.raises(ValueError, match="keep_for"):
        sync_client.idempotent("i-bad", one, keep_for=-1)
    with pytest.raises(TypeError, match="fingerprint"):
        sync_client.idempotent("i-bad", one, fingerprint=12)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fingerprint"):
        sync_client.idempotent("i-bad", one, fingerprint="")
