"""The translation of lock events into spans, without a server: events made by hand go through
``enable_tracing`` into the OpenTelemetry SDK's in-memory exporter; and tracing is opt-in."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from opentelemetry.trace import StatusCode

from fencelock import _events as events
from fencelock import metrics
from fencelock._core.lease import Grant
from fencelock.errors import LockConnectionError
from tests.traced import Traced

NAME = "unit:1"


def a_grant(token: int) -> Grant:
    return Grant(holder="h", fence=token, pid=0, deadline=0.0)


def test_a_hold_ends_once_by_its_loss(traced: Traced) -> None:
    grant = a_grant(7)
    events.emit(events.AcquireEnded("lock", NAME, "granted", 0.25, 7, grant))
    acquire = traced.one("acquire", NAME)
    assert acquire.end_time is not None and acquire.start_time is not None
    assert acquire.end_time - acquire.start_time == 250_000_000
    assert traced.spans("hold", NAME) == []  # open while held
    events.emit(events.LeaseLost("lock", NAME, 7, "expired", grant))
    events.emit(events.HoldEnded("lock", NAME, 12.0, 7, grant))  # the release after the loss
    hold = traced.one("hold", NAME)
    assert dict(hold.attributes or {})["fencelock.hold.end"] == "lost"
    assert hold.status.status_code == StatusCode.ERROR


def test_a_released_hold_lasts_its_seconds(traced: Traced) -> None:
    grant = a_grant(8)
    events.emit(events.AcquireEnded("reentrant_lock", NAME, "granted", 0.0, 8, grant))
    events.emit(events.HoldEnded("reentrant_lock", NAME, 1.5, 8, grant))
    events.emit(events.LeaseLost("reentrant_lock", NAME, 8, "expired", grant))  # too late
    hold = traced.one("hold", NAME)
    assert hold.start_time is not None and hold.end_time is not None
    assert hold.end_time - hold.start_time == 1_500_000_000
    attributes = dict(hold.attributes or {})
    assert attributes["fencelock.hold.end"] == "released"
    assert attributes["fencelock.primitive"] == "reentrant_lock"
    assert hold.status.status_code == StatusCode.UNSET and hold.events == ()


def test_acquires_that_got_nothing_have_no_hold(traced: Traced) -> None:
    error = LockConnectionError("no server")
    events.emit(events.AcquireEnded("semaphore", NAME, "timeout", 1.0, None))
    events.emit(events.AcquireEnded("semaphore", NAME, "error", 0.1, None, error=error))
    timeout, failed = traced.spans("acquire", NAME)
    assert dict(timeout.attributes or {})["fencelock.outcome"] == "timeout"
    assert timeout.status.status_code == StatusCode.UNSET
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "LockConnectionError: no server"
    (recorded,) = failed.events
    assert dict(recorded.attributes or {})["exception.message"] == "no server"
    traced.subscription.disable()
    assert traced.spans("hold", NAME) == []  # (none open, none ended at the switch-off)


def test_a_grant_dropped_while_held_takes_its_open_span(traced: Traced) -> None:
    grant = a_grant(9)
    events.emit(events.AcquireEnded("lock", NAME, "granted", 0.0, 9, grant))
    del grant  # a lock object dropped without a release: no event will end the hold
    gc.collect()
    traced.subscription.disable()  # would end the hold's span, were it still kept
    assert traced.spans("hold", NAME) == []


def test_a_name_label_must_be_a_function() -> None:
    with pytest.raises(TypeError, match="name_label"):
        metrics.enable_tracing(name_label="order:*")  # type: ignore[arg-type]
    assert not events.on


def test_nothing_of_tracing_is_imported_unless_switched_on() -> None:
    # redis-py imports some of opentelemetry itself when it is installed: count only the rest
    code = """
import sys
import redis, redis.asyncio
before = {m for m in sys.modules if m.startswith("opentelemetry")}
import fencelock, fencelock.asyncio, fencelock.metrics
after = {m for m in sys.modules if m.startswith("opentelemetry")}
assert after == before and "fencelock._tracing" not in sys.modules, sorted(after - before)
fencelock.metrics.enable_tracing().disable()
assert "fencelock._tracing" in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
