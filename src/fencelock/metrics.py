"""Metrics of the locks of this process, for Prometheus and OpenTelemetry, OpenTelemetry spans,
and a log of slow acquires.

Off until switched on, and free while off: the locks report what they do to one internal stream
of events (``_events.py``) only when something listens::

    fencelock.metrics.enable_prometheus()     # prometheus_client's default registry
    fencelock.metrics.enable_opentelemetry()  # the global MeterProvider
    fencelock.metrics.enable_tracing()        # spans, by the global TracerProvider
    fencelock.metrics.log_slow_acquires(1.0)  # a warning per acquire of 1 s or more

Each returns a ``Subscription``; ``disable()`` stops it. The metrics (Prometheus names; the
OpenTelemetry instruments are ``fencelock.<name>`` with the unit apart, which an OpenTelemetry
Prometheus exporter turns into the same names):

========================================  =========  ==================  ========================
metric                                    type       labels              what
========================================  =========  ==================  ========================
fencelock_acquire_wait_seconds            histogram  primitive, outcome  an acquire's duration,
                                                                         waits included
fencelock_hold_seconds                    histogram  primitive           a grant's time held
fencelock_grants_total                    counter    primitive           grants
fencelock_lost_leases_total               counter    primitive, reason   leases lost
fencelock_renewals_total                  counter    primitive           renewals confirmed
fencelock_renewal_failures_total          counter    primitive           renewals unanswered
fencelock_handoffs_total                  counter    primitive           local hand-offs
fencelock_wakeups_total                   counter    primitive           wake-ups by a release
fencelock_compute_seconds                 histogram  primitive, outcome  a compute_once or
                                                                         idempotent call
fencelock_takeovers_total                 counter    primitive           builds taken over
fencelock_given_back_total                counter    primitive           grants a silent
                                                                         server made or kept,
                                                                         given back late
fencelock_stale_writes_refused_total      counter                        fenced_set refusals
fencelock_event_loop_stall_seconds        histogram                      asyncio loops blocked
fencelock_held_locks                      gauge                          grants held now
fencelock_waiting_acquires                gauge                          acquires waiting now
========================================  =========  ==================  ========================

``primitive``: ``lock``, ``reentrant_lock``, ``semaphore``, ``read_lock``, ``write_lock``,
``multi_lock``; ``compute`` or ``idempotent`` (the last two metrics');
``outcome``: ``granted``, ``timeout`` or ``error``; a compute's ``hit``, ``stale``, ``built``,
``waited``, ``timeout`` or ``error``; ``reason``: ``expired``, ``unreachable``,
``taken_over`` or ``data_loss`` (docs/operations.md says what each means). Lock names are
not labels: their number has no bound. ``name_label=`` maps a name to a label of a bounded set
(``"order:123"`` -> ``"order:*"``), added as the ``name`` label of every metric but the last
three.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import __version__
from . import _events as events
from ._core.stats import Statistics
from ._keys import validate_ttl
from ._live_clients import LIVE_CLIENTS

__all__ = [
    "Subscription",
    "enable_opentelemetry",
    "enable_prometheus",
    "enable_tracing",
    "log_slow_acquires",
]

HISTOGRAM, COUNTER = "histogram", "counter"
# Acquires wait from a round trip (under a millisecond) to a holder's whole lease (minutes);
# grants are held from a millisecond to an hour.
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
HOLD_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


@dataclass(frozen=True, slots=True)
class _Metric:
    name: str
    kind: str
    labels: tuple[str, ...]
    doc: str
    buckets: tuple[float, ...] = ()


_METRICS = (
    _Metric(
        "acquire_wait",
        HISTOGRAM,
        ("primitive", "outcome"),
        "Time an acquire took, waits included, by how it ended",
        WAIT_BUCKETS,
    ),
    _Metric("hold", HISTOGRAM, ("primitive",), "Time a grant was held", HOLD_BUCKETS),
    _Metric("grants", COUNTER, ("primitive",), "Grants taken"),
    _Metric("lost_leases", COUNTER, ("primitive", "reason"), "Leases lost, by why"),
    _Metric("renewals", COUNTER, ("primitive",), "Lease renewals confirmed by the server"),
    _Metric("renewal_failures", COUNTER, ("primitive",), "Lease renewals that got no answer"),
    _Metric("handoffs", COUNTER, ("primitive",), "Grants handed to a lock object of the client"),
    _Metric("wakeups", COUNTER, ("primitive",), "Waits ended by a release message"),
    _Metric(
        "compute",
        HISTOGRAM,
        ("primitive", "outcome"),
        "Time a compute_once or idempotent call took, by how its result was had",
        WAIT_BUCKETS,
    ),
    _Metric(
        "takeovers",
        COUNTER,
        ("primitive",),
        "Builds taken over from a builder whose lease ended without a result",
    ),
    _Metric(
        "given_back",
        COUNTER,
        ("primitive",),
        "Grants a silent server made (an acquire left unanswered) or kept (a release left "
        "unanswered), given back once it answered again",
    ),
)
_STALE = _Metric("stale_writes_refused", COUNTER, (), "Writes fenced_set refused: a stale token")
_STALL = _Metric(
    "event_loop_stall",
    HISTOGRAM,
    (),
    "Times an asyncio event loop was blocked for more than a third of a lease held",
    HOLD_BUCKETS,
)
_UNLABELLED = (_STALE, _STALL)  # about no lock: no primitive, no name
_GAUGES: dict[str, tuple[str, Callable[[Statistics], int]]] = {
    "held_locks": ("Grants the lock objects of this process hold now", lambda s: s.held),
    "waiting_acquires": (
        "Acquires waiting now (for a wake-up, or behind a lock object of the same client)",
        lambda s: s.waiting + s.queued,
    ),
}

Record = Callable[[float, dict[str, str]], object]  # a value and its labels, to one metric


class Subscription:
    """An exporter or log switched on; ``disable()`` switches it off (idempotent)."""

    def __init__(self, listener: events.Listener, on_disable: Callable[[], None]) -> None:
        self._stop = events.subscribe(listener)
        self._on_disable = on_disable
        self.enabled = True

    def disable(self) -> None:
        if self.enabled:
            self.enabled = False
            self._stop()
            self._on_disable()


def _name_label(name_label: Callable[[str], str] | None) -> Callable[[str], str] | None:
    if name_label is not None and not callable(name_label):
        kind = type(name_label).__name__
        raise TypeError(f"name_label must be a function of a lock name, not {kind}")
    return name_label


def _listener(
    records: dict[str, Record], name_label: Callable[[str], str] | None
) -> events.Listener:
    """The one translation of events into metrics, whatever the exporter."""

    def listen(event: events.Event) -> None:
        if isinstance(event, events.StaleWriteRefused):
            records[_STALE.name](1, {})
            return
        if isinstance(event, events.LoopStalled):
            records[_STALL.name](event.seconds, {})
            return
        labels = {"primitive": event.primitive}
        if name_label is not None:
            labels["name"] = name_label(event.name)
        if isinstance(event, events.AcquireEnded):
            records["acquire_wait"](event.seconds, {**labels, "outcome": event.outcome})
            if event.outcome == events.GRANTED:
                records["grants"](1, labels)
        elif isinstance(event, events.HoldEnded):
            records["hold"](event.seconds, labels)
        elif isinstance(event, events.LeaseLost):
            records["lost_leases"](1, {**labels, "reason": event.reason})
        elif isinstance(event, events.Renewal):
            records["renewals" if event.ok else "renewal_failures"](1, labels)
        elif isinstance(event, events.HandedOff):
            records["handoffs"](1, labels)
        elif isinstance(event, events.ComputeEnded):
            records["compute"](event.seconds, {**labels, "outcome": event.outcome})
        elif isinstance(event, events.TookOver):
            records["takeovers"](1, labels)
        elif isinstance(event, events.GivenBack):
            records["given_back"](1, labels)
        else:
            records["wakeups"](1, labels)

    return listen


# -- Prometheus -------------------------------------------------------------------------------


def _child(metric: Any) -> Callable[[dict[str, str]], Any]:
    """``metric.labels(**labels)``, kept per set of label values: prometheus_client looks the
    child up under a lock and checks the labels on every call, which cost as much as the rest of
    an event (``python -m bench.metrics``)."""
    children: dict[tuple[str, ...], Any] = {}

    def child(labels: dict[str, str]) -> Any:
        key = tuple(labels.values())  # (always built in the same order: _listener)
        found = children.get(key)
        if found is None:
            found = children[key] = metric.labels(**labels)
        return found

    return child


def _observe(histogram: Any) -> Record:
    child = _child(histogram)
    return lambda value, labels: child(labels).observe(value)


def _inc(counter: Any) -> Record:
    child = _child(counter)
    return lambda value, labels: child(labels).inc(value)


def _record(method: Callable[[float], object]) -> Record:
    """A metric without labels: ``method`` of the metric itself."""
    return lambda value, labels: method(value)


_prometheus: dict[int, Subscription] = {}  # id(registry) -> its subscription
_guard = threading.Lock()


def enable_prometheus(
    registry: Any = None, *, name_label: Callable[[str], str] | None = None
) -> Subscription:
    """Register fencelock's metrics in ``registry`` (None: prometheus_client's default
    ``REGISTRY``) and feed them from now on. Needs ``pip install 'fencelock[prometheus]'``.
    Enabled twice for one registry: the first subscription is returned."""
    try:
        import prometheus_client
        from prometheus_client.core import GaugeMetricFamily
    except ImportError as exc:
        raise ImportError(
            "fencelock.metrics.enable_prometheus needs prometheus_client: "
            "pip install 'fencelock[prometheus]'"
        ) from exc
    name_label = _name_label(name_label)
    if registry is None:
        registry = prometheus_client.REGISTRY
    with _guard:
        if id(registry) in _prometheus:
            return _prometheus[id(registry)]
        extra = ("name",) if name_label is not None else ()
        records: dict[str, Record] = {}
        collectors: list[Any] = []
        for metric in (*_METRICS, *_UNLABELLED):
            full = f"fencelock_{metric.name}" + ("_seconds" if metric.kind == HISTOGRAM else "")
            names = (*metric.labels, *extra) if metric.labels else ()
            if metric.kind == HISTOGRAM:
                hist = prometheus_client.Histogram(
                    full, metric.doc, names, registry=registry, buckets=metric.buckets
                )
                records[metric.name] = _observe(hist) if names else _record(hist.observe)
                collectors.append(hist)
            else:
                count = prometheus_client.Counter(full, metric.doc, names, registry=registry)
                records[metric.name] = _inc(count) if names else _record(count.inc)
                collectors.append(count)

        class Gauges:
            """The gauges, read from the live clients' statistics when collected."""

            def describe(self) -> Iterator[Any]:
                for name, (doc, _) in _GAUGES.items():
                    yield GaugeMetricFamily(f"fencelock_{name}", doc)

            def collect(self) -> Iterator[Any]:
                for name, (doc, gauge) in _GAUGES.items():
                    yield GaugeMetricFamily(f"fencelock_{name}", doc, LIVE_CLIENTS.total(gauge))

        gauges = Gauges()
        registry.register(gauges)
        collectors.append(gauges)

        def unregister() -> None:
            with _guard:
                del _prometheus[id(registry)]
                for collector in collectors:
                    registry.unregister(collector)

        subscription = Subscription(_listener(records, name_label), unregister)
        _prometheus[id(registry)] = subscription
        return subscription


# -- OpenTelemetry ----------------------------------------------------------------------------


def enable_opentelemetry(
    meter_provider: Any = None, *, name_label: Callable[[str], str] | None = None
) -> Subscription:
    """Create fencelock's instruments with ``meter_provider`` (None: the global one, set by the
    application's OpenTelemetry SDK set-up) and feed them from now on. Needs only
    ``opentelemetry-api``: ``pip install 'fencelock[opentelemetry]'``."""
    try:
        from opentelemetry import metrics as otel
    except ImportError as exc:
        raise ImportError(
            "fencelock.metrics.enable_opentelemetry needs opentelemetry-api: "
            "pip install 'fencelock[opentelemetry]'"
        ) from exc
    name_label = _name_label(name_label)
    provider = otel.get_meter_provider() if meter_provider is None else meter_provider
    meter = provider.get_meter("fencelock", __version__)
    records: dict[str, Record] = {}
    for metric in (*_METRICS, *_UNLABELLED):
        full = f"fencelock.{metric.name}"
        if metric.kind == HISTOGRAM:
            hist = meter.create_histogram(
                full,
                unit="s",
                description=metric.doc,
                explicit_bucket_boundaries_advisory=list(metric.buckets),
            )
            records[metric.name] = hist.record
        else:
            count = meter.create_counter(full, description=metric.doc)
            records[metric.name] = count.add
    live = threading.Event()  # the gauges report only while subscribed
    live.set()

    def observer(gauge: Callable[[Statistics], int]) -> Callable[[Any], list[Any]]:
        def observe(options: Any) -> list[Any]:
            return [otel.Observation(LIVE_CLIENTS.total(gauge))] if live.is_set() else []

        return observe

    for name, (doc, gauge) in _GAUGES.items():
        meter.create_observable_up_down_counter(
            f"fencelock.{name}", callbacks=[observer(gauge)], description=doc
        )
    return Subscription(_listener(records, name_label), live.clear)


def enable_tracing(
    tracer_provider: Any = None, *, name_label: Callable[[str], str] | None = None
) -> Subscription:
    """Make OpenTelemetry spans from now on, with ``tracer_provider``'s tracer (None: the global
    one, set by the application's OpenTelemetry SDK set-up): one ``fencelock.acquire`` span per
    acquire, a child of the caller's current span, and one ``fencelock.hold`` span per grant,
    from the grant to its release or loss, linked to its acquire's span. Apart from the
    metrics: switch on either or both. ``name_label`` as for the metrics: lock names are no
    attribute unless mapped. Needs only ``opentelemetry-api``: ``pip install
    'fencelock[opentelemetry]'``. docs/operations.md ("Tracing") lists the attributes."""
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ImportError(
            "fencelock.metrics.enable_tracing needs opentelemetry-api: "
            "pip install 'fencelock[opentelemetry]'"
        ) from exc
    from ._tracing import tracing

    name_label = _name_label(name_label)
    tracer = trace.get_tracer("fencelock", __version__, tracer_provider=tracer_provider)
    return Subscription(*tracing(tracer, name_label))


# -- logs -------------------------------------------------------------------------------------

acquire_logger = logging.getLogger("fencelock.acquire")


def log_slow_acquires(threshold: float = 1.0) -> Subscription:
    """Log a warning on ``fencelock.acquire`` for every acquire that takes ``threshold`` seconds
    or more, whatever its outcome, with ``event="slow_acquire"``, ``lock_name``, ``token``,
    ``reason`` (the outcome) and ``seconds`` as fields of the record (``extra``)."""
    threshold = validate_ttl(threshold, "threshold")

    def listen(event: events.Event) -> None:
        if isinstance(event, events.AcquireEnded) and event.seconds >= threshold:
            acquire_logger.warning(
                "fencelock: acquiring %r took %.3f s (%s)",
                event.name,
                event.seconds,
                event.outcome,
                extra={
                    "event": "slow_acquire",
                    "lock_name": event.name,
                    "token": event.token,
                    "reason": event.outcome,
                    "seconds": event.seconds,
                },
            )

    return Subscription(listen, lambda: None)
