"""OpenTelemetry tracing: one trace per run, across every process (issue 15, part 2).

The design. A run's trace is rooted at its submit span (`agentq.submit`,
`models.engine.submissions`); `submit_run` stores that span's W3C traceparent in `runs.traceparent`
(migration 0028). Every task of a run joins that trace where it *starts*, not where it is sent: on
Celery's `task_prerun`, before the Celery instrumentation opens the task's span, `join_run_trace`
reads the run's traceparent (one primary-key query) and, when the context the message carries in its
headers belongs to another trace or to none, puts the run's in its place. Why at the start: a
run's tasks are sent by many senders (the submitter, the run's own tasks, the coordinator, the
reconciler under beat, the review API, the CLI), and some of them have no context of the run at
hand (the reconciler re-sends a step by its row; the CLI may trace nothing). The start of a task
is the one place every message passes, and the row is there to say whose it is; no sender has to
remember anything. A task sent from inside the run's trace keeps its sender as parent (so the
chain reads submit -> plan -> coordinate -> step -> synthesize); one sent from elsewhere hangs
from the submit span. A header alone (the instrumentation's own propagation) would leave each
re-sent task in the reconciler's trace.

A run submitted by a process without tracing still gets a traceparent (random ids, sampled), so
traced workers join its tasks in one trace, whose root span is then missing from the collector.

Off by default: with no `AGENTQ_OTLP_ENDPOINT`, `setup` installs nothing (no provider, no
exporter, no instrumentation, no signal handler) and `span` is a `nullcontext`, so the hot path
pays one boolean test per span site. With it, spans go by OTLP/HTTP (protobuf) to
`<endpoint>/v1/traces` in batches (the SDK's `BatchSpanProcessor`); the exporter also honours the
standard `OTEL_EXPORTER_OTLP_*` variables for headers, compression and timeouts.
"""

from __future__ import annotations

import secrets
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

import sqlalchemy as sa
from celery import Task
from celery.signals import task_prerun
from opentelemetry import trace

from models.db import session_scope
from models.engine.queue import task_subject
from models.settings import Settings
from models.tables import Run, Step

TRACER_NAME: Final = "agentq"
TRACES_PATH: Final = "/v1/traces"  # OTLP/HTTP's path for spans (OTLP specification, 1.0)
_state: dict[str, bool] = {"enabled": False}


def enabled() -> bool:
    """Whether this process traces (`setup` found `AGENTQ_OTLP_ENDPOINT` set)."""
    return _state["enabled"]


def setup(settings: Settings, *, service: str) -> bool:
    """Trace this process as `agentq-<service>` when `settings.otlp_endpoint` is set: a tracer
    provider exporting over OTLP/HTTP, and the Celery (with `join_run_trace`), SQLAlchemy and
    httpx instrumentations (the openai SDK calls models through httpx). Call it once per process,
    after any fork (a Celery pool process: on `worker_process_init`). Returns whether tracing is
    on; with no endpoint it does nothing at all."""
    if settings.otlp_endpoint is None or enabled():
        return enabled()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: f"agentq-{service}"}))
    endpoint = settings.otlp_endpoint.rstrip("/") + TRACES_PATH
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    _instrument()
    _state["enabled"] = True
    return True


def _instrument() -> None:
    """The official instrumentations; `join_run_trace` is connected before Celery's, so it has
    set the parent by the time the task's span opens (Celery calls receivers in order)."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    task_prerun.connect(join_run_trace, weak=False)
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
    # Its 0.66b2 declares SQLAlchemy < 2.1 and would instrument nothing under 2.1; its engine
    # event hooks work unchanged there (tests/integration/test_observability.py sees its spans).
    SQLAlchemyInstrumentor().instrument(skip_dep_check=True)
    HTTPXClientInstrumentor().instrument()


def instrument_app(app: Any) -> None:
    """Trace the requests of FastAPI `app` (a server span each), if this process traces."""
    if enabled():
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app)


def span(name: str, **ids: int | None) -> AbstractContextManager[Any]:
    """A span `name` (e.g. `agentq.step`) around a block, current inside it, with `ids` as
    attributes `agentq.<key>` (`agentq.run_id`, `agentq.step_id`, `agentq.attempt`; None ones
    left out); a `nullcontext` when not tracing."""
    if not enabled():
        return nullcontext()
    attributes = {f"agentq.{key}": value for key, value in ids.items() if value is not None}
    return trace.get_tracer(TRACER_NAME).start_as_current_span(name, attributes=attributes)


def new_traceparent() -> str:
    """The W3C traceparent (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, W3C Trace
    Context, level 1) a new run stores: the current span's (`agentq.submit`), or, in a process
    that does not trace, fresh random ids marked sampled."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def trace_id(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C traceparent; None for None or a malformed one."""
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def join_run_trace(task: Task | None = None, args: Any = None, **_: Any) -> None:
    """Celery `task_prerun` receiver: make the run's traceparent the parent of the task about to
    start, unless the message already carries a context of the run's trace (then its sender
    stays the parent). A task of no run (the reconciler, beat's periodic work) is left alone."""
    if task is None:
        return
    run_id, step_id = task_subject(task.name, tuple(args or ()))
    stored = run_traceparent(run_id=run_id, step_id=step_id)
    carried = getattr(task.request, "traceparent", None)
    if stored is not None and trace_id(carried) != trace_id(stored):
        task.request.traceparent = stored


def run_traceparent(*, run_id: int | None, step_id: int | None) -> str | None:
    """`runs.traceparent` of run `run_id`, or of the run of step `step_id`; None for neither,
    an unknown id, or a run submitted before migration 0028."""
    if run_id is None and step_id is None:
        return None
    query = sa.select(Run.traceparent)  # type: ignore[call-overload]
    if run_id is not None:
        query = query.where(Run.id == run_id)
    else:
        query = query.join(Step, Step.run_id == Run.id).where(Step.id == step_id)
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation(), session_scope() as session:  # no lone span of its own
        return session.execute(query).scalar_one_or_none()
