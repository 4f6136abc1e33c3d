"""The gauges that describe the database and the broker, read when `/metrics` is scraped.

Counted from rows at scrape time rather than kept by the processes that change them: a gauge
kept in a Celery pool would need every process's view added up, and a process that died would
leave its share behind; the rows are the truth (DESIGN.md, invariant 1). One statement
(`GAUGE_ROWS`, by the partial indexes `ix_runs_active`, `ix_steps_unfinished` and the open
escalations' index) and one passive `queue_declare` per queue, made outside any transaction.

Queue depth is the broker's: the messages waiting in each queue (`models.engine.queue.depth`), which
is what a worker would take next and the only count there is of the `coordinator` and `memory`
queues (their tasks have no rows); Postgres' side of it, steps `ready` (held for a dispatch slot,
not in the broker) and `queued` (sent, or due later), is `agentq_steps_unfinished`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from models import sql
from models.db import session_scope
from models.engine import queue
from models.states import RUN_ACTIVE

RUNS: Final = tuple(sorted(RUN_ACTIVE))
STEPS: Final = ("pending", "ready", "queued", "running")  # not ended
ESCALATIONS: Final = ("open", "claimed")  # not decided
QUEUES: Final = (queue.QUEUE_STEPS, queue.QUEUE_COORDINATOR, queue.QUEUE_MEMORY)

# gauge_rows: (family, label, value) of every gauge of rows: active runs and unfinished steps
# by status, undecided escalations by status, and the age in seconds of the oldest of them.
GAUGE_ROWS: Final = """
SELECT 'runs' AS family, status AS label, count(*)::float8 AS value FROM runs
    WHERE status NOT IN ('succeeded', 'failed', 'cancelled') GROUP BY status
UNION ALL
SELECT 'steps', status, count(*)::float8 FROM steps
    WHERE status IN ('pending', 'ready', 'queued', 'running') GROUP BY status
UNION ALL
SELECT 'escalations', status, count(*)::float8 FROM escalations
    WHERE status <> 'decided' GROUP BY status
UNION ALL
SELECT 'oldest_escalation', '',
    coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 FROM escalations
    WHERE status <> 'decided'"""


def gauge_rows() -> dict[tuple[str, str], float]:
    """`{(family, label): value}` of `GAUGE_ROWS`, in a read-only transaction of its own."""
    with session_scope() as session:
        return {(r.family, r.label): r.value for r in sql.execute(session, GAUGE_ROWS)}


# name -> (help, label names) of every gauge `DatabaseCollector` serves, in the order it does.
GAUGES: Final = {
    "agentq_queue_depth": ("Messages waiting in each broker queue.", ("queue",)),
    "agentq_runs": ("Runs not ended, by status.", ("status",)),
    "agentq_steps_unfinished": ("Steps not ended, by status.", ("status",)),
    "agentq_escalations_open": (
        "Escalations not decided, by status (open, claimed).",
        ("status",),
    ),
    "agentq_escalation_oldest_age_seconds": (
        "Seconds since the oldest undecided escalation was opened; 0 when there is none.",
        (),
    ),
}


def _gauge(name: str) -> GaugeMetricFamily:
    """An empty family of gauge `name` (`GAUGES`)."""
    doc, labels = GAUGES[name]
    return GaugeMetricFamily(name, doc, labels=labels)


def _family(
    name: str, rows: str, known: tuple[str, ...], found: dict[tuple[str, str], float]
) -> GaugeMetricFamily:
    """Gauge `name` by `status`: `found`'s values of family `rows`, 0 for each of `known` with
    no row."""
    gauge = _gauge(name)
    seen = {k: v for (f, k), v in found.items() if f == rows}
    for status in sorted({*known, *seen}):
        gauge.add_metric([status], seen.get(status, 0.0))
    return gauge


class DatabaseCollector(Collector):
    """The gauges of rows and queues, read at each scrape (see the module docstring). A database
    or broker that does not answer leaves its gauges out of that scrape (the counters of the
    processes are still served) and is logged by the caller's `/readyz`, not here."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """Every gauge, without values: what a registry checks names against at registration
        (instead of a scrape), and what docs/reference/metrics.md lists."""
        return (_gauge(name) for name in GAUGES)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = _gauge("agentq_queue_depth")
        for name in QUEUES:
            waiting = queue.depth(name)
            if waiting is not None:
                depth.add_metric([name], float(waiting))
        yield depth
        try:
            found = gauge_rows()
        except Exception:  # a scrape must not fail for the database: the counters still count
            return
        yield _family("agentq_runs", "runs", RUNS, found)
        yield _family("agentq_steps_unfinished", "steps", STEPS, found)
        yield _family("agentq_escalations_open", "escalations", ESCALATIONS, found)
        oldest = _gauge("agentq_escalation_oldest_age_seconds")
        oldest.add_metric([], found.get(("oldest_escalation", ""), 0.0))
        yield oldest
