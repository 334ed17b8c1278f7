"""OpenTelemetry spans of the acquires and holds (``fencelock.metrics.enable_tracing``). Imported
only when tracing is switched on: it imports the OpenTelemetry API.

The events (``_core/events.py``) come after the fact: an acquire's when it has ended, with the
seconds it took. Its span is made then, its start set back by those seconds, in the thread or
task that called ``acquire``, whose current span (the application's) is thus its parent. A
hold's span starts at the grant and stays open, kept by its grant (weakly: a lock object dropped
while holding takes its open span with it, unexported); it ends at the release, or when the loss
is found, which may be in the watchdog's thread or task.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, Span, Status, StatusCode, Tracer

from ._core import events

ACQUIRE_SPAN = "fencelock.acquire"
HOLD_SPAN = "fencelock.hold"
# fencelock.hold.end: how a hold ended
RELEASED = "released"
LOST = "lost"
UNTRACED = "tracing_disabled"  # still held when tracing was switched off


def tracing(
    tracer: Tracer, name_label: Callable[[str], str] | None
) -> tuple[events.Listener, Callable[[], None]]:
    """The listener that makes the spans, and the function that ends the holds' open spans when
    tracing is switched off."""
    # each open hold's span and its start (ns)
    holds: weakref.WeakKeyDictionary[object, tuple[Span, int]] = weakref.WeakKeyDictionary()
    guard = threading.Lock()  # (holds end in any thread: the callers' and the watchdog's)

    def about(event: events.AcquireEnded | events.HoldEnded | events.LeaseLost) -> dict[str, Any]:
        attributes: dict[str, Any] = {"fencelock.primitive": event.primitive}
        if name_label is not None:  # names are no attribute unless mapped, as in the metrics
            attributes["fencelock.name"] = name_label(event.name)
        return attributes

    def acquired(event: events.AcquireEnded) -> None:
        end = time.time_ns()
        attributes = {
            **about(event),
            "fencelock.outcome": event.outcome,
            "fencelock.wait_seconds": event.seconds,
        }
        if event.token is not None:
            attributes["fencelock.token"] = event.token
        error = event.error
        if error is not None:
            attributes["error.type"] = f"{type(error).__module__}.{type(error).__qualname__}"
        start = end - round(event.seconds * 1e9)
        span = tracer.start_span(ACQUIRE_SPAN, attributes=attributes, start_time=start)
        if error is not None:
            span.record_exception(error, timestamp=end)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end(end_time=end)
        if event.grant is None:
            return
        # The hold is one more child of the caller's span; with no caller's span, the acquire's
        # child, so that an acquire and its hold are always one trace.
        in_a_span = trace.get_current_span().get_span_context().is_valid
        hold = tracer.start_span(
            HOLD_SPAN,
            context=None if in_a_span else trace.set_span_in_context(span),
            attributes={**about(event), "fencelock.token": event.token},
            links=[Link(span.get_span_context())],
            start_time=end,
        )
        if hold.is_recording():  # (else not sampled: nothing to end)
            with guard:
                holds[event.grant] = (hold, end)

    def hold_of(grant: object) -> tuple[Span, int] | None:
        with guard:
            return holds.pop(grant, None)

    def lost(event: events.LeaseLost) -> None:
        found = hold_of(event.grant)
        if found is not None:
            hold = found[0]
            reason = {"fencelock.loss_reason": event.reason}
            hold.add_event("fencelock.lease_lost", reason)
            hold.set_attributes({"fencelock.hold.end": LOST, **reason})
            hold.set_status(Status(StatusCode.ERROR, f"lease lost: {event.reason}"))
            hold.end()

    def listen(event: events.Event) -> None:
        if isinstance(event, events.AcquireEnded):
            acquired(event)
        elif isinstance(event, events.HoldEnded):
            found = hold_of(event.grant)  # (None: ended already by its loss)
            if found is not None:
                # at the release's call, not its reply: the next holder may have it by then
                hold, start = found
                hold.set_attribute("fencelock.hold.end", RELEASED)
                hold.end(end_time=start + round(event.seconds * 1e9))
        elif isinstance(event, events.LeaseLost):
            lost(event)
        elif isinstance(event, events.StaleWriteRefused):
            # on the span of the code that tried the write (a no-op outside any span)
            refused: dict[str, Any] = {"fencelock.token": event.token}
            if name_label is not None:
                refused["fencelock.key"] = name_label(event.key)
            trace.get_current_span().add_event("fencelock.stale_write_refused", refused)

    def end_open_holds() -> None:
        with guard:
            still = [hold for hold, _ in holds.values()]
            holds.clear()
        for hold in still:
            hold.set_attribute("fencelock.hold.end", UNTRACED)
            hold.end()

    return listen, end_open_holds
