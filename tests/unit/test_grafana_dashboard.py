"""The Grafana dashboard (`ops/grafana/agentq-dashboard.json`) and the metric definitions cannot
drift: every series its expressions read is one `models/operations/metrics.py` or
`models/operations/metric_gauges.py` defines (with the suffixes Prometheus gives counters and
histograms), every `by (...)` label of a metric is one of its labels, and every metric defined is on
the dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Histogram

from models.operations import metric_gauges, metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "agentq-dashboard.json"
SERIES = re.compile(r"\bagentq_[a-z0-9_]+")
BY = re.compile(r"\bby \(([^)]*)\)")
SUFFIXES = {Counter: ("_total",), Histogram: ("_bucket", "_sum", "_count")}


def _exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def _defined() -> dict[str, tuple[str, frozenset[str]]]:
    """Every series name the processes expose: (the metric's name, its labels)."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for metric in metrics.ALL:
        name, labels = metric._name, frozenset(metric._labelnames)
        for suffix in SUFFIXES[type(metric)]:
            found[name + suffix] = (name, labels | ({"le"} if suffix == "_bucket" else set()))
    for name, (_, labels) in metric_gauges.GAUGES.items():
        found[name] = (name, frozenset(labels))
    return found


def test_the_dashboard_is_importable_json() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    assert dashboard["id"] is None  # an import creates it
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
    assert _exprs(), "no queries"


def test_every_series_the_dashboard_reads_is_defined() -> None:
    defined = _defined()
    assert "agentq_steps_total" in defined and "agentq_queue_depth" in defined  # both parsed
    for expr in _exprs():
        for series in SERIES.findall(expr):
            assert series in defined, f"{series} (in {expr!r}) is defined nowhere"


def test_every_label_the_dashboard_groups_by_is_the_metrics() -> None:
    defined = _defined()
    for expr in _exprs():
        labels = {defined[s][1] for s in SERIES.findall(expr)}
        if len(labels) != 1 or not (known := labels.pop()):
            continue  # a mixed expression, or a metric without labels
        for group in BY.findall(expr):
            used = {label.strip() for label in group.split(",")}
            assert used <= known, f"{expr!r} groups by {used - known}, not labels of its metric"


def test_every_metric_defined_is_on_the_dashboard() -> None:
    shown = {_defined()[s][0] for expr in _exprs() for s in SERIES.findall(expr)}
    missing = {name for name, _ in _defined().values()} - shown
    assert not missing, f"defined but not on the dashboard: {sorted(missing)}"
