"""The pieces of tracing and JSON logs that need no services: which run a task is about, W3C
traceparents, the settings, and what is (not) installed with tracing off."""

from __future__ import annotations

import json
import logging
import re

import pytest
import structlog
from pydantic import ValidationError

from models.engine import tracing
from models.engine.queue import (
    TASK_COORDINATE,
    TASK_EXECUTE_STEP,
    TASK_PLAN,
    TASK_RECONCILE,
    TASK_REPLAN,
    task_subject,
)
from models.operations.logs import bind_work, formatter, task_bound
from models.settings import Settings

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")  # W3C Trace Context


@pytest.mark.parametrize(
    ("task", "args", "subject"),
    [
        (TASK_PLAN, (7,), (7, None)),
        (TASK_COORDINATE, (7,), (7, None)),
        (TASK_REPLAN, (7, 9), (7, 9)),
        (TASK_EXECUTE_STEP, (9,), (None, 9)),
        (TASK_RECONCILE, (), (None, None)),
    ],
)
def test_a_task_names_its_run_or_step(
    task: str, args: tuple[int, ...], subject: tuple[int | None, int | None]
) -> None:
    assert task_subject(task, args) == subject


def test_a_run_submitted_without_tracing_gets_a_fresh_sampled_traceparent() -> None:
    assert not tracing.enabled()
    first, second = tracing.new_traceparent(), tracing.new_traceparent()
    assert TRACEPARENT.match(first) and first.endswith("-01")
    assert tracing.trace_id(first) != tracing.trace_id(second)


def test_trace_id_reads_only_well_formed_traceparents() -> None:
    assert tracing.trace_id("00-" + "a" * 32 + "-" + "b" * 16 + "-01") == "a" * 32
    assert tracing.trace_id("00-abc-def-01") is None
    assert tracing.trace_id(None) is None


def test_with_tracing_off_nothing_is_installed() -> None:
    assert tracing.setup(Settings(otlp_endpoint=None), service="test") is False
    assert not tracing.enabled()
    with tracing.span("agentq.step", run_id=1) as span:
        assert span is None  # a nullcontext: no span object at all


@pytest.mark.parametrize(
    ("field", "value"), [("otlp_endpoint", "collector:4318"), ("log_format", "xml")]
)
def test_bad_operations_settings_name_the_field(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


def test_a_json_line_carries_what_the_task_bound() -> None:
    structlog.contextvars.clear_contextvars()  # what an earlier test in this process bound
    record = logging.LogRecord("celery.app.trace", logging.INFO, "", 0, "done %s", ("x",), None)
    with task_bound(step_id=5):
        bind_work(run_id=3, step_id=5, attempt=2)
        line = formatter("json").format(record)
    after = formatter("json").format(record)
    assert json.loads(line) | {"timestamp": ""} == {
        "event": "done x",
        "level": "info",
        "logger": "celery.app.trace",
        "run_id": 3,
        "step_id": 5,
        "attempt": 2,
        "timestamp": "",
    }
    assert "run_id" not in json.loads(after)  # unbound once the task's block ends
    assert structlog.contextvars.get_contextvars() == {}
