"""``fencelock.metrics.enable_tracing``: the spans of acquires and holds against real servers,
read back through the OpenTelemetry SDK's in-memory exporter.

Sync twin generated into tests/_sync by tools/gen_sync.py."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import fencelock
from fencelock import metrics
from fencelock._async.client import AsyncLockClient
from fencelock_tools.servers.embedded import free_port
from tests.concurrency import AsyncCall, async_until
from tests.traced import Traced


def child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    return span.parent is not None and span.parent.span_id == parent.context.span_id


def attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


async def test_a_granted_acquire_and_its_hold(
    traced: Traced, async_client: AsyncLockClient
) -> None:
    lock = async_client.lock("t-granted", ttl=10)
    with traced.tracer.start_as_current_span("request"):
        async with lock:
            token = lock.token
    request = traced.application("request")
    acquire, hold = traced.one("acquire", "t-granted"), traced.one("hold", "t-granted")
    assert attributes(acquire) == {
        "fencelock.primitive": "lock",
        "fencelock.name": "t-granted",
        "fencelock.outcome": "granted",
        "fencelock.wait_seconds": attributes(acquire)["fencelock.wait_seconds"],
        "fencelock.token": token,
    }
    assert acquire.start_time is not None and acquire.end_time is not None
    waited = attributes(acquire)["fencelock.wait_seconds"]
    assert isinstance(waited, float)
    assert acquire.end_time - acquire.start_time == round(waited * 1e9)  # the span is the wait
    assert attributes(hold) == {
        "fencelock.primitive": "lock",
        "fencelock.name": "t-granted",
        "fencelock.token": token,
        "fencelock.hold.end": "released",
    }
    # both children of the caller's span; the hold starts at the grant and links to its acquire
    assert child_of(acquire, request) and child_of(hold, request)
    assert hold.start_time == acquire.end_time
    assert [link.context.span_id for link in hold.links] == [acquire.context.span_id]
    assert acquire.status.status_code == hold.status.status_code == StatusCode.UNSET


async def test_with_no_caller_span_the_hold_is_its_acquire_child(
    traced: Traced, async_client: AsyncLockClient
) -> None:
    async with async_client.semaphore("t-root", 2, ttl=10):
        pass
    acquire, hold = traced.one("acquire", "t-root"), traced.one("hold", "t-root")
    assert acquire.parent is None  # a trace of its own
    assert child_of(hold, acquire)  # and the hold in it
    assert attributes(acquire)["fencelock.primitive"] == "semaphore"


async def test_a_timed_out_acquire_has_no_hold(
    traced: Traced, async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    holder = async_client_b.lock("t-busy", ttl=10)
    assert await holder.acquire(timeout=0)
    with traced.tracer.start_as_current_span("request"):
        assert not await async_client.lock("t-busy", ttl=10).acquire(timeout=0)
    await holder.release()
    timed_out = [
        s for s in traced.spans("acquire", "t-busy") if child_of(s, traced.application("request"))
    ]
    (acquire,) = timed_out
    assert attributes(acquire)["fencelock.outcome"] == "timeout"
    assert "fencelock.token" not in attributes(acquire)
    assert acquire.status.status_code == StatusCode.UNSET  # busy is no error
    assert len(traced.spans("hold", "t-busy")) == 1  # the holder's only


async def test_a_failed_acquire_is_an_error_with_its_exception(traced: Traced) -> None:
    client = AsyncLockClient.from_url(f"redis://127.0.0.1:{free_port()}", socket_timeout=1)
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await client.lock("t-error").acquire(timeout=0)
    finally:
        await client.close()
    acquire = traced.one("acquire", "t-error")
    assert attributes(acquire)["fencelock.outcome"] == "error"
    assert attributes(acquire)["error.type"] == "fencelock.errors.LockConnectionError"
    assert acquire.status.status_code == StatusCode.ERROR
    assert [event.name for event in acquire.events] == ["exception"]
    assert traced.spans("hold", "t-error") == []


async def test_a_contended_acquire_spans_its_wait(
    traced: Traced, async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    holder = async_client_b.lock("t-contended", ttl=10)
    assert await holder.acquire(timeout=0)
    waiter = async_client.lock("t-contended", ttl=10)

    async def wait_in_a_span() -> None:
        with traced.tracer.start_as_current_span("worker"):
            assert await waiter.acquire(timeout=None)

    call = AsyncCall(wait_in_a_span)
    await async_until(lambda: async_client.statistics().waiting == 1)
    await holder.release()
    await call.result()
    await waiter.release()
    holders, waiters = traced.spans("hold", "t-contended")
    (waited,) = [
        s
        for s in traced.spans("acquire", "t-contended")
        if child_of(s, traced.application("worker"))
    ]
    assert attributes(waited)["fencelock.outcome"] == "granted"
    assert attributes(waited)["fencelock.wait_seconds"] > 0  # type: ignore[operator]
    # the waiter's hold: in its own trace, from its grant, with the next token
    assert child_of(waiters, traced.application("worker")) and waiters.start_time == waited.end_time
    assert attributes(waited)["fencelock.token"] == attributes(waiters)["fencelock.token"]
    assert attributes(waiters)["fencelock.token"] > attributes(holders)["fencelock.token"]  # type: ignore[operator]


async def test_a_lease_lost_to_force_release_ends_its_hold(
    traced: Traced, async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    lock = async_client.lock("t-lost", ttl=2, auto_renew=True, on_lost_policy="ignore")
    with traced.tracer.start_as_current_span("request"):
        assert await lock.acquire(timeout=0)
    assert await async_client_b.force_release("t-lost")
    # the watchdog finds it gone at its next renewal, in its own task (thread, in the sync API)
    await async_until(lambda: len(traced.spans("hold", "t-lost")) == 1)
    hold = traced.one("hold", "t-lost")
    assert child_of(hold, traced.application("request"))
    assert attributes(hold)["fencelock.hold.end"] == "lost"
    assert attributes(hold)["fencelock.loss_reason"] == "data_loss"
    assert hold.status.status_code == StatusCode.ERROR
    assert hold.status.description == "lease lost: data_loss"
    assert [(e.name, dict(e.attributes or {})) for e in hold.events] == [
        ("fencelock.lease_lost", {"fencelock.loss_reason": "data_loss"})
    ]
    with pytest.raises(fencelock.LockLost):
        await lock.release()
    assert len(traced.spans("hold", "t-lost")) == 1  # ended once


async def test_a_loss_found_by_the_release_is_on_the_hold(
    traced: Traced, async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    lock = async_client.lock("t-lost-at-release", ttl=10)
    assert await lock.acquire(timeout=0)
    assert await async_client_b.force_release("t-lost-at-release")
    with pytest.raises(fencelock.LockLost):
        await lock.release()
    hold = traced.one("hold", "t-lost-at-release")
    assert attributes(hold)["fencelock.hold.end"] == "lost"
    assert attributes(hold)["fencelock.loss_reason"] == "data_loss"
    assert hold.status.status_code == StatusCode.ERROR


async def test_a_stale_write_refused_is_an_event_of_the_writer(
    traced: Traced, async_client: AsyncLockClient
) -> None:
    await async_client.fenced_set("t-resource", "new", 20)
    with traced.tracer.start_as_current_span("writer"), pytest.raises(fencelock.StaleToken):
        await async_client.fenced_set("t-resource", "old", 10)
    writer = traced.application("writer")
    assert [(e.name, dict(e.attributes or {})) for e in writer.events] == [
        ("fencelock.stale_write_refused", {"fencelock.token": 10, "fencelock.key": "t-resource"})
    ]


async def test_names_are_no_attribute_unless_mapped(async_client: AsyncLockClient) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    subscription = metrics.enable_tracing(provider)
    try:
        lock = async_client.lock("t-unnamed", ttl=10)
        async with lock:
            token = lock.token
    finally:
        subscription.disable()
        provider.shutdown()
    spans = exporter.get_finished_spans()
    assert all("fencelock.name" not in (span.attributes or {}) for span in spans)
    assert any(attributes(span).get("fencelock.token") == token for span in spans)


async def test_switched_off_tracing_ends_the_open_holds(async_client: AsyncLockClient) -> None:
    traced = Traced()
    lock = async_client.lock("t-switched-off", ttl=10)
    try:
        assert await lock.acquire(timeout=0)
        traced.subscription.disable()
        (hold,) = traced.spans("hold", "t-switched-off")
        assert attributes(hold)["fencelock.hold.end"] == "tracing_disabled"
        await lock.release()
        async with lock:  # nothing traced any more
            pass
        assert len(traced.exporter.get_finished_spans()) == 2  # the acquire and its hold
    finally:
        traced.close()
