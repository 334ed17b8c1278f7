"""The one translation of lock events into metrics, without a server: events made by hand go
through each exporter and are read back through its own API."""

from __future__ import annotations

import pytest

from fencelock import _events as events
from tests.exported import Exported

NAME = "unit:1"
GRANT = object()  # what ties a hold's events together (tracing's key, not the metrics')


def emit_one_of_each() -> None:
    for event in (
        events.AcquireEnded("lock", NAME, "granted", 0.002, 7, GRANT),
        events.AcquireEnded("lock", NAME, "timeout", 1.5, None),
        events.AcquireEnded("reentrant_lock", NAME, "error", 0.1, None),
        events.HoldEnded("lock", NAME, 12.0, 7, GRANT),
        events.LeaseLost("lock", NAME, 7, "data_loss", GRANT),
        events.Renewal("lock", NAME, True),
        events.Renewal("lock", NAME, True),
        events.Renewal("lock", NAME, False),
        events.HandedOff("lock", NAME),
        events.WokenUp("lock", NAME),
        events.GivenBack("lock", NAME),
        events.StaleWriteRefused("resource", 6),
        events.ComputeEnded("compute", NAME, "hit", 0.001),
        events.ComputeEnded("compute", NAME, "built", 0.25),
        events.ComputeEnded("idempotent", NAME, "waited", 0.2),
        events.TookOver("compute", NAME),
    ):
        events.emit(event)


@pytest.mark.parametrize("kind", ["prometheus", "opentelemetry"])
def test_each_event_lands_in_its_metric(kind: str) -> None:
    exported = Exported(kind)
    try:
        emit_one_of_each()
        check_one_of_each(exported)
    finally:
        exported.close()


def check_one_of_each(exported: Exported) -> None:
    labels = {"primitive": "lock", "name": NAME}
    assert exported.count("acquire_wait", **labels, outcome="granted") == 1
    assert exported.count("acquire_wait", **labels, outcome="timeout") == 1
    assert exported.total("acquire_wait", **labels, outcome="timeout") == 1.5
    reentrant = {"primitive": "reentrant_lock", "name": NAME, "outcome": "error"}
    assert exported.count("acquire_wait", **reentrant) == 1
    assert exported.count("grants", **labels) == 1  # granted acquires only
    assert (exported.count("hold", **labels), exported.total("hold", **labels)) == (1, 12.0)
    assert exported.count("lost_leases", **labels, reason="data_loss") == 1
    assert exported.count("renewals", **labels) == 2
    assert exported.count("renewal_failures", **labels) == 1
    assert exported.count("handoffs", **labels) == 1
    assert exported.count("wakeups", **labels) == 1
    assert exported.count("given_back", **labels) == 1
    assert exported.count("stale_writes_refused") == 1
    computed = {"primitive": "compute", "name": NAME}
    assert exported.count("compute", **computed, outcome="hit") == 1
    assert exported.total("compute", **computed, outcome="built") == 0.25
    assert exported.count("compute", primitive="idempotent", name=NAME, outcome="waited") == 1
    assert exported.count("takeovers", **computed) == 1


def test_nothing_listens_unless_asked() -> None:
    assert not events.on
    seen: list[events.Event] = []
    stop = events.subscribe(seen.append)
    assert events.on
    events.emit(events.WokenUp("lock", NAME))
    stop()
    stop()  # twice: harmless
    events.emit(events.WokenUp("lock", NAME))
    assert not events.on and seen == [events.WokenUp("lock", NAME)]
