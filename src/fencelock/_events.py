"""The event stream of this process: who listens, and the emit that sends each event (the values
of ``_core/events.py``, re-exported here so that an emit site imports one module) to them.

Nobody listens by default, and then nothing is measured or built: every place that emits reads
``events.on`` first (one module attribute read), and only then takes the time and makes the
event. The listeners run in the thread or task that emits, so they must be quick and must not
block; one that raises is logged and the lock carries on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ._core.events import (
    BUILT,
    ERROR,
    GRANTED,
    HIT,
    STALE,
    TIMEOUT,
    WAITED,
    AcquireEnded,
    ComputeEnded,
    Event,
    GivenBack,
    HandedOff,
    HoldEnded,
    LeaseLost,
    Listener,
    LoopStalled,
    Renewal,
    StaleWriteRefused,
    TookOver,
    WokenUp,
)

__all__ = [
    "BUILT",
    "ERROR",
    "GRANTED",
    "HIT",
    "STALE",
    "TIMEOUT",
    "WAITED",
    "AcquireEnded",
    "ComputeEnded",
    "Event",
    "GivenBack",
    "HandedOff",
    "HoldEnded",
    "LeaseLost",
    "Listener",
    "LoopStalled",
    "Renewal",
    "StaleWriteRefused",
    "TookOver",
    "WokenUp",
    "emit",
    "on",
    "subscribe",
]

logger = logging.getLogger("fencelock.metrics")

on = False  # whether anybody listens: read before any work is done for an event
_listeners: tuple[Listener, ...] = ()
_guard = threading.Lock()


def subscribe(listener: Listener) -> Callable[[], None]:
    """Send every event to ``listener`` from now on; returns the function that stops it."""
    global on, _listeners
    with _guard:
        _listeners = (*_listeners, listener)
        on = True

    def unsubscribe() -> None:
        global on, _listeners
        with _guard:
            _listeners = tuple(each for each in _listeners if each is not listener)
            on = bool(_listeners)

    return unsubscribe


def emit(event: Event) -> None:
    for listener in _listeners:  # (a tuple, replaced whole: safe to iterate in any thread)
        try:
            listener(event)
        except Exception:
            logger.exception("fencelock: a metrics listener failed on %r", event)
