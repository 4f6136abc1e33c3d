"""A model step's tool call gated by the operator's policy (issue 30, items 1-3): an engine of its
own whose workers call a fake OpenAI-compatible server (`ops.fake_provider`) with
`AGENTQ_TOOL_APPROVALS` gating `append_marker` when its marker starts with "pay". The model's
answers are scripted; every effect is a line in a file, and every model request is counted.

After a decision the step goes on from the model's answer that asked for the gated call: the
model is not asked again for what it already answered (those calls were paid), the calls that
ran before the stop are answered from the journal, and the gated call is answered as decided."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from models.db import session_scope
from models.engine.submissions import RunRequest, submit
from models.front import commands
from models.plans.plans import parse_plan
from models.plans.tools import configured_tool_names
from models.settings import get_settings
from models.tables import Escalation
from ops.fake_provider import FakeOpenAI, ok, tool_calls
from ops.stack import LocalStack
from tests.integration.conftest import fake_model_env, other_engine, run_steps, wait_for_run

pytestmark = pytest.mark.integration
POLICY = {"append_marker": {"when": [{"arg": "marker", "startswith": "pay"}]}}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def gated_engine(fake: FakeOpenAI) -> Iterator[LocalStack]:
    env = fake_model_env(fake.url, AGENTQ_TOOL_APPROVALS=json.dumps(POLICY))
    tools = os.environ.get("AGENTQ_TOOL_MODULES")
    os.environ["AGENTQ_TOOL_MODULES"] = env["AGENTQ_TOOL_MODULES"]  # this process checks plans
    try:
        with other_engine(env) as stack:
            yield stack
    finally:
        if tools is None:
            os.environ.pop("AGENTQ_TOOL_MODULES", None)
        else:
            os.environ["AGENTQ_TOOL_MODULES"] = tools
        get_settings.cache_clear()


def _submit(mark: str) -> int:
    step = {
        "name": "file",
        "kind": "model",
        "instruction": f"{mark}: file the expense",
        "tools": ["echo", "append_marker"],
    }
    plan = parse_plan({"steps": [step]}, tools=configured_tool_names())
    request = RunRequest(user_id="gated", goal=f"{mark} file it", plan=plan)
    return submit(request, settings=get_settings()).run_id


def _calls(path: Path, marker: str) -> Any:
    return tool_calls(
        ("echo", '{"value": 1}'),
        ("append_marker", json.dumps({"path": str(path), "marker": marker})),
    )


def _escalation(run_id: int) -> Escalation:
    with session_scope() as session:
        return session.exec(
            select(Escalation).where(Escalation.run_id == run_id, Escalation.status == "open")
        ).one()


def _step_requests(fake: FakeOpenAI, mark: str) -> list[Any]:
    """The requests of the model step (they offer tools; the synthesis's do not)."""
    return [r for r in fake.received(mark) if r.body.get("tools")]


def _tool_answers(request_body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request_body["messages"] if m["role"] == "tool"]


def test_an_approved_call_runs_once_and_the_step_goes_on_from_where_it_stopped(
    fake: FakeOpenAI, gated_engine: LocalStack, tmp_path: Path
) -> None:
    mark, path = "MARK-approved", tmp_path / "effects.txt"
    fake.script(_calls(path, "pay 40"), ok("filed it"), when=mark)
    run_id = _submit(mark)
    assert wait_for_run(run_id).status == "waiting_review"
    esc = _escalation(run_id)
    assert (esc.reason, esc.detail["tool"]) == ("approval_required", "append_marker")
    assert (
        esc.detail["why"]
        == 'the operator\'s policy: append_marker: marker "pay 40" startswith "pay"'
    )
    assert not path.exists()
    assert len(_step_requests(fake, mark)) == 1
    commands.approve(esc.id or 0, reviewer="ann")
    run = wait_for_run(run_id, ("succeeded", "failed"))
    assert run.status == "succeeded"
    assert path.read_text().splitlines() == ["pay 40"]
    _first, second = _step_requests(fake, mark)  # not asked again for the answer it gave
    answers = _tool_answers(second.body)
    assert answers == ['{"value": 1}', '{"lines": 1}']
    (step,) = run_steps(run_id)
    assert step.result is not None and step.result["text"] == "filed it"
    assert [c["tool"] for c in step.result["tool_calls"]] == ["echo", "append_marker"]


def test_a_rejected_call_is_the_tools_answer_and_the_model_goes_on(
    fake: FakeOpenAI, gated_engine: LocalStack, tmp_path: Path
) -> None:
    mark, path = "MARK-rejected", tmp_path / "effects.txt"
    fake.script(_calls(path, "pay 900"), ok("did not file it"), when=mark)
    run_id = _submit(mark)
    assert wait_for_run(run_id).status == "waiting_review"
    commands.reject(_escalation(run_id).id or 0, reviewer="bob", comment="over the limit")
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    assert not path.exists()
    _, second = _step_requests(fake, mark)
    assert _tool_answers(second.body)[1] == "error: rejected by bob: over the limit"


def test_a_call_the_policy_does_not_gate_runs_at_once(
    fake: FakeOpenAI, gated_engine: LocalStack, tmp_path: Path
) -> None:
    mark, path = "MARK-ungated", tmp_path / "effects.txt"
    fake.script(_calls(path, "note 3"), ok("noted"), when=mark)
    run_id = _submit(mark)
    assert wait_for_run(run_id).status == "succeeded"
    assert path.read_text().splitlines() == ["note 3"]
    with session_scope() as session:
        assert session.exec(select(Escalation).where(Escalation.run_id == run_id)).all() == []
