"""Who may write a shared template's model steps (`models.memory.procedures.template_refused`), and
whose rights an adopted template's steps act with (`worker.phases.adoption.author`,
`worker.phases.procedure_context.reviewers_procedure`): issue 27, item 1."""

from __future__ import annotations

from typing import Any

import pytest

from models.memory.procedures import Actor, Procedure, ProcedureSpec, template_refused
from models.memory.retrieval import Scored
from worker.phases.adoption import author
from worker.phases.procedure_context import reviewers_procedure

MODEL = {"name": "pay", "kind": "model", "instruction": "Pay it."}
TOOL = {"name": "file", "kind": "tool", "tool": "noop", "args": {}}
REVIEWER, ADMIN = Actor("token:rev", "reviewer"), Actor("cli:ops", "admin")


def spec(scope: str, *steps: dict[str, Any]) -> ProcedureSpec:
    where = {"user": {"user_id": "ana"}, "tool": {"tool": "noop"}}.get(scope, {})
    template = {"steps": list(steps)} if steps else None
    return ProcedureSpec(title="t", when_to_use="w", scope=scope, plan_template=template, **where)


@pytest.mark.parametrize("scope", ["everyone", "tool"])
def test_a_reviewers_shared_template_holds_tool_steps_only(scope: str) -> None:
    refused = template_refused(REVIEWER, spec(scope, TOOL, MODEL))
    assert refused is not None
    assert str(refused).startswith("plan_template: step 'pay' is a model step")
    assert "only an admin writes model steps" in str(refused)
    assert template_refused(REVIEWER, spec(scope, TOOL)) is None
    assert template_refused(ADMIN, spec(scope, TOOL, MODEL)) is None


def test_a_users_own_template_may_hold_model_steps() -> None:
    assert template_refused(Actor("token:ana", "submitter", "ana"), spec("user", MODEL)) is None


def carried(*roles: str | None) -> dict[str, Any]:
    """A plan call's payload whose context carried procedures written as `roles`."""
    entries = [
        {"id": i, "plan_template": {"steps": [MODEL]}, "written_as": r}
        for i, r in enumerate(roles, 1)
    ]
    return {"procedures": entries}


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ((), "planner"),
        (("submitter",), "planner"),
        (("admin", "submitter"), "planner"),
        (("reviewer",), "reviewer"),
        (("admin", "reviewer"), "reviewer"),
        ((None,), "reviewer"),  # written before roles were recorded: the safe side
    ],
)
def test_a_plan_is_its_procedures_writers(roles: tuple[str | None, ...], expected: str) -> None:
    assert author(carried(*roles), default="planner") == expected


def test_a_replan_keeps_its_own_author_unless_a_reviewer_wrote_what_it_read() -> None:
    assert author(carried("admin"), default="replanner") == "replanner"
    assert author(carried("reviewer"), default="replanner") == "reviewer"


def found(role: str | None, procedure_id: int = 7) -> Scored[Procedure]:
    row = Procedure(
        id=procedure_id,
        scope="everyone",
        title="t",
        when_to_use="w",
        body="b",
        version=3,
        written_as=role,
    )
    return Scored(row, 0.9, 0.0, False, 0.03, 1.0, 0.03)


def test_a_reviewers_procedure_recalled_into_a_call_is_named() -> None:
    assert reviewers_procedure([found("admin"), found("submitter")]) is None
    got = reviewers_procedure([found("admin", 1), found("reviewer", 2), found(None, 3)])
    assert got == {"procedure": 2, "version": 3, "author": "reviewer"}
    assert reviewers_procedure([found(None)]) == {"procedure": 7, "version": 3, "author": "unknown"}
