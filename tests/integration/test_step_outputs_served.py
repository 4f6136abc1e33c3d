"""A model step's declared output against a model server over real HTTP: a second embedded
engine whose workers call the OpenAI-compatible fake (`ops.fake_provider`) through the `openai`
provider. The step's request asks for JSON of its fields (`response_format` json_schema), an
answer that does not fit is re-asked with the reason, and only a fitting answer becomes the
step's result, which a later step reads as `${steps.NAME.FIELD}`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import submissions
from models.engine.submissions import RunRequest
from models.plans.plans import parse_plan
from models.plans.step_outputs import output_schema
from models.plans.tools import configured_tool_names, load_tool_modules
from models.settings import get_settings
from models.tables import RunEvent
from ops.fake_provider import FakeOpenAI, ok
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, fake_model_env, other_engine, run_steps
from tests.integration.conftest import wait_for_run as wait

pytestmark = pytest.mark.integration
OUTPUT = {"total": "number", "currency": "string"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def served(fake: FakeOpenAI) -> Iterator[LocalStack]:
    """An engine whose worker calls `fake`; this process talks to it until the module ends."""
    saved = os.environ.get("AGENTQ_TOOL_MODULES")
    os.environ["AGENTQ_TOOL_MODULES"] = TEST_ENV["AGENTQ_TOOL_MODULES"]
    try:
        with other_engine(fake_model_env(fake.url)) as stack:
            load_tool_modules(get_settings().tool_modules)
            yield stack
    finally:
        if saved is None:
            os.environ.pop("AGENTQ_TOOL_MODULES", None)
        else:
            os.environ["AGENTQ_TOOL_MODULES"] = saved


@pytest.fixture
def mark(served: LocalStack) -> str:
    """A marker for this test's prompts."""
    return f"MARK-{uuid.uuid4().hex[:10]}"


def submit(mark: str, *, replans: int = 1) -> int:
    read = {
        "name": "read",
        "kind": "model",
        "instruction": f"Read the report's total and currency ({mark}).",
        "output": OUTPUT,
    }
    use = {
        "name": "file",
        "kind": "tool",
        "tool": "echo",
        "args": {"value": {"total": "${steps.read.total}", "currency": "${steps.read.currency}"}},
    }
    plan = parse_plan({"steps": [read, use]}, tools=configured_tool_names())
    request = RunRequest(user_id="outputs", goal=f"file it {mark}", plan=plan, replans=replans)
    return submissions.submit(request, settings=get_settings()).run_id


def refusals(run_id: int) -> list[dict[str, Any]]:
    with session_scope() as session:
        stmt = select(RunEvent).where(
            RunEvent.run_id == run_id, RunEvent.kind == "step.output.invalid"
        )
        return [e.detail for e in session.exec(stmt.order_by(col(RunEvent.id)))]


def test_a_served_answer_is_held_to_the_output_and_feeds_the_next_step(
    fake: FakeOpenAI, mark: str
) -> None:
    wrong = '{"total": "473.43 EUR", "currency": "EUR"}'  # the number as text, with its unit
    fake.script(ok(wrong), ok('{"total": 473.43, "currency": "EUR"}'), when=mark)
    run = wait(submit(mark))
    assert run.status == "succeeded", run.error
    read, filed = run_steps(run.id or 0)
    assert read.result == {"total": 473.43, "currency": "EUR"}
    assert filed.result == {"value": {"total": 473.43, "currency": "EUR"}}
    first, again = fake.received(mark)[:2]
    asked = first.body["response_format"]
    assert asked == {
        "type": "json_schema",
        "json_schema": {"name": "step", "schema": output_schema(OUTPUT)},
    }
    assert "total (a number), currency (a text)" in first.text
    reason = 'output.total: expected a number, got "473.43 EUR"'
    assert again.body["messages"][-2] == {"role": "assistant", "content": wrong}
    assert reason in again.body["messages"][-1]["content"]
    (refused,) = refusals(run.id or 0)
    assert (refused["answer"], refused["error"], refused["raw_output"]) == (1, reason, wrong)
    assert read.attempt == 1  # re-asked within the attempt, not retried


def test_answers_that_never_fit_fail_the_step_and_the_run_escalates(
    fake: FakeOpenAI, mark: str
) -> None:
    limit = get_settings().plan_max_attempts
    fake.script(*[ok('{"total": 473.43}')] * limit, when=mark)
    run = wait(submit(mark, replans=0))
    assert run.status == "waiting_review"
    (read,) = [s for s in run_steps(run.id or 0) if s.name == "read"]
    assert (read.status, read.result) == ("failed", None)  # nothing of an unfit answer kept
    assert read.error is not None and read.error.endswith(
        "output: missing 'currency'; declared: total, currency"
    )
    assert len(refusals(run.id or 0)) == limit
    received = fake.received(mark)
    assert len(received) == limit  # each answer asked once; the run waits for a reviewer
    assert all(r.body["response_format"]["json_schema"]["name"] == "step" for r in received)
