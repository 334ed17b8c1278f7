"""The metrics of one exporter, read back through its own API (the metrics tests' helper)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from fencelock import metrics


class Exported:
    """The metrics of one exporter as its own API shows them. Names are labels here
    (``name_label``), so that a leftover client of another test cannot change a count."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "prometheus":
            self.registry = CollectorRegistry()
            self.subscription = metrics.enable_prometheus(self.registry, name_label=str)
        else:
            self.reader = InMemoryMetricReader()
            self.provider = MeterProvider(metric_readers=[self.reader])
            self.subscription = metrics.enable_opentelemetry(self.provider, name_label=str)

    def close(self) -> None:
        self.subscription.disable()
        if self.kind == "opentelemetry":
            self.provider.shutdown()

    def count(self, metric: str, **labels: str) -> float:
        """A counter's value, or a histogram's count of observations (0 if never recorded)."""
        if self.kind == "prometheus":
            histogram = self.registry.get_sample_value(f"fencelock_{metric}_seconds_count", labels)
            if histogram is not None:
                return histogram
            return self.registry.get_sample_value(f"fencelock_{metric}_total", labels) or 0.0
        point = self._point(f"fencelock.{metric}", labels)
        if point is None:
            return 0.0
        return float(getattr(point, "count", None) or point.value)

    def total(self, metric: str, **labels: str) -> float:
        """A histogram's sum of observations (seconds)."""
        if self.kind == "prometheus":
            value = self.registry.get_sample_value(f"fencelock_{metric}_seconds_sum", labels)
            return value or 0.0
        point = self._point(f"fencelock.{metric}", labels)
        return 0.0 if point is None else float(point.sum)

    def gauge(self, metric: str) -> float:
        if self.kind == "prometheus":
            value = self.registry.get_sample_value(f"fencelock_{metric}")
            assert value is not None
            return value
        point = self._point(f"fencelock.{metric}", {})
        assert point is not None
        return float(point.value)

    def _point(self, name: str, labels: dict[str, str]) -> Any:
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        if dict(point.attributes or {}) == labels:
                            return point
        return None
