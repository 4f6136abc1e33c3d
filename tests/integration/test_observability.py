"""Tracing and JSON logs across the real processes (issue 15, parts 2 and 3).

An engine of its own (worker, scheduler with beat, API) runs with `AGENTQ_OTLP_ENDPOINT` naming an
OTLP/HTTP receiver in this process and `AGENTQ_LOG_FORMAT=json`. The spans are what the
processes exported over HTTP (protobuf, decoded with opentelemetry-proto), so the test sees the
context cross processes the way a collector does: in task headers and through `runs.traceparent`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from models.access import api_tokens
from models.db import session_scope
from models.engine import step_transitions
from models.engine.runs import submit_run
from models.engine.tracing import trace_id
from models.plans.plans import parse_plan
from models.plans.tools import configured_tool_names
from models.settings import get_settings
from ops.local import start_api
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, other_engine, run_steps, wait_for_run
from tests.support.net import free_port
from tests.support.otlp import Span, wait_for_spans
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Traced:
    stack: LocalStack
    receiver: Receiver
    api: httpx.Client


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    with Receiver() as receiver:
        env = {
            **TEST_ENV,
            "AGENTQ_OTLP_ENDPOINT": receiver.url.removesuffix("/hook"),
            "AGENTQ_LOG_FORMAT": "json",
            "OTEL_BSP_SCHEDULE_DELAY": "200",  # ms between exports (the SDK's default: 5 s)
        }
        with other_engine(env) as stack:
            url = start_api(stack, host="127.0.0.1", port=free_port(), extra_env=env)
            with session_scope() as session:
                _, token = api_tokens.create_token(
                    session, name=f"t-{uuid.uuid4().hex[:8]}", role="submitter", user_id="tracer"
                )
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=60, trust_env=False) as api:
                yield Traced(stack, receiver, api)


def of_run(spans: list[Span], run_id: int) -> list[Span]:
    """The spans agentq made for run `run_id` (attribute `agentq.run_id`)."""
    return [span for span in spans if span.attributes.get("agentq.run_id") == run_id]


def ancestors(span: Span, spans: list[Span]) -> list[Span]:
    """`span`'s parent, its parent's parent, ... as far as they were exported."""
    by_id = {each.span_id: each for each in spans}
    chain = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        chain.append(span)
    return chain


def test_one_run_is_one_trace_from_submit_to_synthesis(traced: Traced) -> None:
    created = traced.api.post("/api/v1/runs", json={"goal": "Summarise the tracing design"})
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    run = wait_for_run(run_id, ("succeeded",), memory=True)
    trace = trace_id(run.traceparent)
    assert trace is not None, run.traceparent

    def complete(spans: list[Span]) -> bool:  # with the task spans, which end after them
        ours = of_run(spans, run_id)
        names = {span.name for span in ours}
        rooted = all(ancestors(span, spans)[-1:] == [root(spans)] for span in ours)
        return {"agentq.synthesize", "agentq.remember"} <= names and rooted

    def root(spans: list[Span]) -> Span | None:
        return next((span for span in spans if span.name == "POST /api/v1/runs"), None)

    spans = wait_for_spans(traced.receiver, complete)
    ours = of_run(spans, run_id)
    assert {span.trace_id for span in ours} == {trace}  # plan, steps, synthesis, memory: one
    assert {"agentq.plan", "agentq.step"} <= {span.name for span in ours}
    in_trace = [span for span in spans if span.trace_id == trace]
    (submit,) = [span for span in in_trace if span.name == "agentq.submit"]
    assert submit.service == "agentq-api"
    assert (run.traceparent or "").split("-")[2] == submit.span_id  # the run's root
    for span in ours:  # every one descends from the submit span, over the processes' tasks
        chain = [each.name for each in ancestors(span, in_trace)]
        assert "agentq.submit" in chain, (span.name, chain)
    (synthesis,) = [span for span in ours if span.name == "agentq.synthesize"]
    chain = [each.name for each in ancestors(synthesis, in_trace)]
    assert "run/agentq.execute_step" in chain and "run/agentq.plan" in chain, chain
    # a plan applies its run's next decision in its own task (`models.engine.fair_queue`): a run
    # that needs no reviewer crosses the API and the worker, and the scheduler only if it is called
    # in
    assert {"agentq-api", "agentq-worker"} <= {s.service for s in in_trace}
    assert any(span.attributes.get("db.system") == "postgresql" for span in in_trace)


def test_a_step_the_reconciler_sends_joins_its_run(traced: Traced) -> None:
    """Inserted by this process (which does not trace) with no message sent: the reconciler,
    in beat's trace, sends the step; the worker still opens it under the run's traceparent."""
    plan = parse_plan(
        {"steps": [{"name": "only", "kind": "tool", "tool": "noop"}]},
        tools=configured_tool_names(),
    )
    with session_scope() as session:
        run = submit_run(session, settings=get_settings(), user_id="tracer", goal="g", plan=plan)
    run_id, root = run.id or 0, run.traceparent
    (step,) = run_steps(run_id)
    with session_scope() as session:
        step_transitions.ready_step(session, step.id or 0)
        step_transitions.enqueue_step(session, step.id or 0)
    wait_for_run(run_id, ("succeeded",))

    def stepped(spans: list[Span]) -> bool:  # the step's span and its task's (which ends later)
        steps = [span for span in of_run(spans, run_id) if span.name == "agentq.step"]
        return any(ancestors(span, spans) for span in steps)

    spans = wait_for_spans(traced.receiver, stepped)
    (step_span,) = [span for span in of_run(spans, run_id) if span.name == "agentq.step"]
    assert step_span.trace_id == trace_id(root)
    (task,) = ancestors(step_span, spans)[:1]
    assert task.name == "run/agentq.execute_step"
    assert task.parent_id == (root or "").split("-")[2]  # the stored span, not the reconciler's


def test_json_log_lines_of_a_task_carry_run_step_and_attempt(traced: Traced) -> None:
    plan = {"steps": [{"name": "a", "kind": "model", "instruction": "Write one line."}]}
    created = traced.api.post("/api/v1/runs", json={"goal": "json logs", "plan": plan})
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    wait_for_run(run_id, ("succeeded",), memory=True)
    (step,) = run_steps(run_id)
    text = traced.stack.log_path("worker").read_text()
    lines = [line for line in text.splitlines() if f'"run_id": {run_id},' in line]
    records = [json.loads(line) for line in lines]  # each one parses whole
    assert records, "no line of the run in the worker's log"
    assert {"event", "level", "logger", "timestamp"} <= set(records[0])
    of_step = [r for r in records if r.get("step_id") == step.id]  # its model call, at least
    assert of_step and all(r["attempt"] == step.attempt for r in of_step), records
    synthesis = [r for r in records if r.get("purpose") == "synthesize"]
    assert synthesis and synthesis[0]["step_id"] is None, records  # not the step's any more
    celery = [line for line in text.splitlines() if "Task agentq.execute_step[" in line]
    assert celery and all(json.loads(line)["logger"].startswith("celery") for line in celery)
    api_lines = traced.stack.log_path("api").read_text().splitlines()
    submits = [json.loads(line) for line in api_lines if "/api/v1/runs" in line]
    assert any(r.get("status") == 201 for r in submits), api_lines[-5:]  # the access log, as JSON
