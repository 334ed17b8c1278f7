"""The spans ``fencelock.metrics.enable_tracing`` made, read back through the OpenTelemetry SDK's
in-memory exporter (the tracing tests' helper)."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from fencelock import metrics


class Traced:
    """Tracing switched on into an SDK provider of its own. Names are attributes here
    (``name_label``), so that a leftover client of another test cannot add a span to a name."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.subscription = metrics.enable_tracing(self.provider, name_label=str)
        # the application's own spans, the callers of the locks
        self.tracer: Tracer = self.provider.get_tracer("the application")

    def close(self) -> None:
        self.subscription.disable()
        self.provider.shutdown()

    def spans(self, kind: str, name: str) -> list[ReadableSpan]:
        """The ended ``fencelock.<kind>`` spans of the lock ``name``, oldest first."""
        return [
            span
            for span in self.exporter.get_finished_spans()
            if span.name == f"fencelock.{kind}"
            and span.attributes is not None
            and span.attributes.get("fencelock.name") == name
        ]

    def one(self, kind: str, name: str) -> ReadableSpan:
        (span,) = self.spans(kind, name)
        return span

    def application(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.exporter.get_finished_spans() if s.name == name]
        return span
