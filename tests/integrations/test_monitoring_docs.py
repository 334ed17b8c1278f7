"""The monitoring files in docs/ (the Grafana dashboard, the Prometheus alerts) name only
metrics that fencelock exports: checked against a registry the exporter filled."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from fencelock import metrics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def exported_names() -> set[str]:
    registry = CollectorRegistry()
    subscription = metrics.enable_prometheus(registry)
    try:
        names = set()
        for family in registry.collect():
            names.add(family.name)
            names.update(sample.name for sample in family.samples)
            if family.type == "histogram":  # (no samples until something is observed)
                names.update(f"{family.name}_{end}" for end in ("bucket", "count", "sum"))
            if family.type == "counter":
                names.add(f"{family.name}_total")
        return names
    finally:
        subscription.disable()


def named_metrics(text: str) -> set[str]:
    return set(re.findall(r"\bfencelock_[a-z_]+", text))


def test_the_dashboard_is_grafana_json_of_real_metrics() -> None:
    dashboard = json.loads((DOCS / "monitoring" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = set().union(*(named_metrics(e) for e in exprs))
    assert used and used <= exported_names(), used - exported_names()
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_the_alerts_name_real_metrics() -> None:
    used = named_metrics((DOCS / "monitoring" / "prometheus-alerts.yml").read_text())
    assert {"fencelock_lost_leases_total", "fencelock_stale_writes_refused_total"} <= used
    assert used <= exported_names(), used - exported_names()
