"""Every Prometheus metric agentq records (issue 15), and the functions that record them.

The worker, the scheduler and the API record into these definitions; in a Celery pool each
process writes its own files under the multiprocess directory (`models.operations.metrics_export`),
which whoever serves `/metrics` adds up. Every metric here has labels, so no value exists before
the first `.labels(...)` (`labeled`): the process's start-up code can switch prometheus-client to
multiprocess mode after this module is imported (`models.operations.metrics_export.record_in`).

What a transaction makes true is counted once it commits (`on_commit`), never when it rolls back:
a step's outcome, a model call's spend. Nothing here makes a database round trip; the gauges that
describe rows (queue depth, active runs, open escalations) are read at scrape time
(`models.operations.metric_gauges`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase
from sqlalchemy import event
from sqlalchemy.orm import Session

# Step durations: a tool step takes milliseconds, a model step up to the step time limit
# (`AGENTQ_STEP_TIME_LIMIT_S`, 90 s by default) and a chain's soft limit (120 s): prometheus-
# client's default buckets (5 ms to 10 s) extended to 300 s.
STEP_BUCKETS_S: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Dispatch latency: milliseconds when a worker is free, up to the reconciler's stale time
# (`AGENTQ_QUEUED_STALE_S`, 60 s) and beyond behind a backlog or a user's dispatch cap.
DISPATCH_BUCKETS_S: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Model calls: up to `AGENTQ_MODEL_REQUEST_TIMEOUT_S` (30 s by default) per attempt.
MODEL_CALL_BUCKETS_S: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60)

STEPS: Final = Counter(
    "agentq_steps",
    "Step attempts whose outcome was committed, by outcome (succeeded, failed, escalated, retry, "
    "deferred) and tool (`model` for a model step).",
    ["status", "tool"],
)
STEP_DURATION: Final = Histogram(
    "agentq_step_duration_seconds",
    "Seconds from a step attempt's claim to its committed outcome, by tool.",
    ["tool"],
    buckets=STEP_BUCKETS_S,
)
DISPATCH_LATENCY: Final = Histogram(
    "agentq_step_dispatch_latency_seconds",
    "Seconds from a step becoming ready (or due) to a worker claiming it from the broker, by "
    "tool; a step its worker claimed itself at the end of the one before (a chain) is not sent, "
    "and not observed.",
    ["tool"],
    buckets=DISPATCH_BUCKETS_S,
)
MODEL_TOKENS: Final = Counter(
    "agentq_model_tokens",
    "Tokens charged to runs, by model and kind: prompt and completion as the provider reported "
    "them, reserved for a call cut off with its request out (charged its whole reservation).",
    ["model", "kind"],
)
MODEL_COST: Final = Counter(
    "agentq_model_cost_usd",
    "US dollars charged to runs for model calls, by model (AGENTQ_MODEL_PRICES_USD_PER_MTOK).",
    ["model"],
)
MODEL_CALL_DURATION: Final = Histogram(
    "agentq_model_call_duration_seconds",
    "Seconds one model request took to answer or fail, by provider and purpose (plan, step, "
    "synthesize, ...).",
    ["provider", "purpose"],
    buckets=MODEL_CALL_BUCKETS_S,
)
MODEL_CALL_ERRORS: Final = Counter(
    "agentq_model_call_errors",
    "Model requests that got no usable answer, by provider and kind: rate_limited, "
    "quota_exhausted, context_too_long, unavailable, error, cut_off (the `model.call` outcomes).",
    ["provider", "kind"],
)
RECONCILER_REPAIRS: Final = Counter(
    "agentq_reconciler_repairs",
    "What the reconciler repaired, by kind: leases_expired, steps_resent, runs_nudged, "
    "held_sent, memory_resent, dispatched, broker_restarted (scheduler.tasks.reconcile).",
    ["kind"],
)
ALL: Final = (
    STEPS,
    STEP_DURATION,
    DISPATCH_LATENCY,
    MODEL_TOKENS,
    MODEL_COST,
    MODEL_CALL_DURATION,
    MODEL_CALL_ERRORS,
    RECONCILER_REPAIRS,
)
"""Every metric recorded in a process (the gauges of rows are
`models.operations.metric_gauges`')."""

_PENDING: Final = "agentq.metrics.pending"  # Session.info key: records waiting for the commit


@functools.cache
def labeled(metric: MetricWrapperBase, *values: str) -> Any:
    """`metric.labels(*values)` (in the metric's label order), looked up once per process.
    prometheus-client keeps each labelled child for good too, but finds it again under a lock
    with every label checked, once per call: with a step's counter and histogram that was about
    a tenth of a chained step's worker CPU (issue 29's profile). The same child either way; its
    value still follows a fork (prometheus-client's multiprocess values check the pid)."""
    return metric.labels(*values)


def on_commit(session: Session, record: Callable[[], None]) -> None:
    """Run `record` once `session`'s transaction commits, and never if it rolls back."""
    session.info.setdefault(_PENDING, []).append(record)


@event.listens_for(Session, "after_commit")
def _committed(session: Session) -> None:
    for record in session.info.pop(_PENDING, []):
        record()


@event.listens_for(Session, "after_soft_rollback")
def _rolled_back(session: Session, _previous: Any) -> None:
    session.info.pop(_PENDING, None)


def step_tool(kind: str, tool: str | None) -> str:
    """The `tool` label of a step: its tool's name, or its kind (`model`, `human`)."""
    return tool or kind


def step_ended(
    session: Session,
    kind: str,
    tool: str | None,
    status: str,
    *,
    started_at: datetime | None,
    now: datetime,
) -> None:
    """Count a step attempt's outcome `status` and observe its duration (`now - started_at`),
    once `session` commits it."""
    label = step_tool(kind, tool)

    def record() -> None:
        labeled(STEPS, status, label).inc()
        if started_at is not None:
            labeled(STEP_DURATION, label).observe((now - started_at).total_seconds())

    on_commit(session, record)


def step_dispatched(session: Session, step: Any) -> None:
    """Observe the dispatch latency of `step` (a `models.tables.Step` just claimed from the
    broker: `started_at - queued_at`, s), once `session` commits its claim."""
    if step.queued_at is None or step.started_at is None:
        return
    latency = max(0.0, (step.started_at - step.queued_at).total_seconds())
    label = step_tool(step.kind, step.tool)
    on_commit(session, lambda: labeled(DISPATCH_LATENCY, label).observe(latency))


def model_spent(session: Session, *, model: str, tokens: dict[str, int], cost_usd: float) -> None:
    """Count `tokens` (kind -> count: prompt, completion, reserved) and `cost_usd` charged for a
    call to `model`, once `session` commits the charge."""

    def record() -> None:
        for kind, count in tokens.items():
            labeled(MODEL_TOKENS, model, kind).inc(count)
        labeled(MODEL_COST, model).inc(cost_usd)

    on_commit(session, record)


def model_answered(*, provider: str, purpose: str, seconds: float) -> None:
    """Observe one model request's duration."""
    labeled(MODEL_CALL_DURATION, provider, purpose).observe(seconds)


def model_failed(session: Session, *, provider: str, kind: str) -> None:
    """Count a request with no usable answer (`kind`: its `model.call` outcome), once `session`
    commits its event."""
    on_commit(session, lambda: labeled(MODEL_CALL_ERRORS, provider, kind).inc())


def repaired(counts: dict[str, int]) -> None:
    """Count a committed reconcile's repairs (`scheduler.tasks.reconcile`'s counts by kind)."""
    for kind, count in counts.items():
        if count:
            labeled(RECONCILER_REPAIRS, kind).inc(count)
