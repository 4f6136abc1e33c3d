"""The plan task against real Postgres, with the model provider faked (the edge we don't own):
invalid output is re-asked a bounded number of times, charged, then escalated with the raw text."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import run_transitions
from models.engine.runs import submit_run
from models.plans.tools import load_tool_modules
from models.settings import get_settings
from models.tables import Escalation, Run, RunEvent, Step
from worker.model_calls import calls
from worker.model_calls.providers import Completion, ModelRequest
from worker.phases import planner

pytestmark = pytest.mark.integration


class ScriptedProvider:
    """Answers each call with the next scripted text."""

    name = "scripted"

    def __init__(self, answers: list[tuple[str, str]]) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> Completion:
        self.requests.append(request)
        text, finish = self.answers.pop(0)
        return Completion(text, "scripted", 100, 10, finish, offline=False)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ScriptedProvider]]:
    load_tool_modules(get_settings().tool_modules)

    def install(*answers: tuple[str, str]) -> ScriptedProvider:
        fake = ScriptedProvider(list(answers))
        monkeypatch.setattr(calls, "provider", lambda: fake)
        return fake

    yield install


def _planning_run(engine: object) -> int:
    with session_scope() as session:
        run = submit_run(session, settings=get_settings(), user_id="p", goal="plan me")
        run_id = run.id or 0
    with session_scope() as session:
        run_transitions.start_planning(session, run_id)
    return run_id


def _events(run_id: int, kind: str) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def test_invalid_plans_are_reasked_then_escalated(
    engine: object, scripted: Callable[..., ScriptedProvider]
) -> None:
    fake = scripted(
        ("   ", "stop"),
        ('{"steps": [{"name": "a", "kind": "tool", "tool": "no', "length"),
        ('{"steps": [{"name": "a", "kind": "tool", "tool": "rm_rf"}]}', "stop"),
    )
    run_id = _planning_run(engine)
    assert planner.plan(run_id) is True
    assert len(fake.requests) == get_settings().plan_max_attempts == 3
    # each re-ask carries the previous answer and why it was refused
    assert "unknown tool 'rm_rf'" not in str(fake.requests[2].messages)
    assert "cut off" in fake.requests[2].messages[-1]["content"]
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.status == "waiting_review" and run.plan_version == 0
        assert run.tokens_used == 3 * 110
        esc = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
        steps = session.exec(select(Step).where(Step.run_id == run_id)).all()
    assert esc.reason == "invalid_plan" and "rm_rf" in esc.detail["raw_output"]
    assert "unknown tool 'rm_rf'" in esc.detail["error"]
    assert steps == []  # invalid output is never taken as a plan, not even an empty one
    assert len(_events(run_id, "plan.invalid")) == 3
    assert len(_events(run_id, "model.call")) == 3


def test_a_valid_answer_after_an_invalid_one_is_written(
    engine: object, scripted: Callable[..., ScriptedProvider]
) -> None:
    fake = scripted(
        ("not json at all", "stop"),
        ('{"steps": [{"name": "a", "kind": "tool", "tool": "noop", "args": {}}]}', "stop"),
    )
    run_id = _planning_run(engine)
    assert planner.plan(run_id) is True
    assert "invalid plan" in fake.requests[1].messages[-1]["content"]
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and (run.status, run.plan_version) == ("running", 1)
        (step,) = session.exec(select(Step).where(Step.run_id == run_id)).all()
    assert (step.name, step.tool, step.status) == ("a", "noop", "pending")
    assert planner.plan(run_id) is False  # a duplicate plan message changes nothing


def test_a_context_that_cannot_fit_escalates_instead_of_hanging(
    engine: object, scripted: Callable[..., ScriptedProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = scripted()
    run_id = _planning_run(engine)
    monkeypatch.setenv("AGENTQ_CONTEXT_WINDOW_TOKENS", "1100")
    monkeypatch.setenv("AGENTQ_RESERVED_OUTPUT_TOKENS", "1000")
    get_settings.cache_clear()
    try:
        assert planner.plan(run_id) is True
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert fake.requests == []  # nothing was sent
    with session_scope() as session:
        run = session.get(Run, run_id)
        esc = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
    assert run is not None and run.status == "waiting_review"
    assert esc.reason == "context_overflow" and "ContextOverflow" in esc.detail["error"]
