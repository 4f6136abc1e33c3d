"""The metrics reference page (`docs/reference/metrics.md`): every Prometheus metric agentq
serves at `/metrics`, from its definition: the counters and histograms the processes record
(`models.operations.metrics.ALL`) and the gauges read from rows and queues at scrape time
(`models.operations.metric_gauges.DatabaseCollector.describe`)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Histogram

from models.operations.metric_gauges import DatabaseCollector
from models.operations.metrics import ALL
from ops.docs.markdown import cell, code, table

# The names a family's samples are exposed under (prometheus-client's text format).
SAMPLES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}


@dataclass(frozen=True)
class Metric:
    """One metric family: name, type (counter, histogram, gauge), label names, help."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


def metrics() -> list[Metric]:
    """Every metric family, the processes' first, then the scrape-time gauges."""
    found = []
    for recorded in ALL:
        kind = "counter" if isinstance(recorded, Counter) else "histogram"
        assert isinstance(recorded, Counter | Histogram)
        (family,) = recorded.describe()
        found.append(Metric(family.name, kind, tuple(recorded._labelnames), family.documentation))
    for gauge in DatabaseCollector().describe():
        labels = tuple(gauge._labelnames)
        found.append(Metric(gauge.name, "gauge", labels, gauge.documentation))
    return found


def render() -> str:
    """The whole page, Markdown."""
    found = metrics()
    rows = [
        [
            "<br>".join(code(m.name + suffix) for suffix in SAMPLES[m.kind]),
            m.kind,
            ", ".join(code(label) for label in m.labels) or "-",
            cell(m.help),
        ]
        for m in found
    ]
    head = (
        "# Metrics reference\n\n"
        "Generated from the metrics' definitions by `python -m ops.docs.pages` "
        "(`ops/docs/metrics_reference.py`). The API serves them at `/metrics` (and the worker or "
        "scheduler on `AGENTQ_METRICS_PORT` when set), in Prometheus' text format. Counters and "
        "histograms are recorded by the processes once their transaction commits (a histogram's "
        "`_bucket` samples also carry `le`); the gauges "
        "are counted from rows and broker queues when `/metrics` is scraped. "
        f"{len(found)} metrics.\n\n"
    )
    return head + table(["name (samples)", "type", "labels", "meaning"], rows)
