"""A reviewer's procedure acts with the reviewer's rights however it reaches a run (issue 27,
item 1), on the real database: recalled into a model call it withholds the user's memory from
that call (`memory.withheld` naming it); once a step a reviewer authored is in the run (such as
a template adopted from a reviewer's procedure), the run's fact extraction reads only the user's
own words, so that step's result never becomes the user's memory."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.memory import memory_admin, procedure_admin
from models.memory.facts import remember
from models.memory.procedures import Actor
from models.tables import PlanVersion, RunEvent
from tests.integration.conftest import wait_for_run
from worker.memory.working_memory import request_for
from worker.model_calls.prompts import extract_prompt, step_prompt

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
OPERATOR = Actor("cli:tester", "admin")


def _user_with_a_fact(nonce: str) -> tuple[str, str]:
    user, text = f"ana-{nonce}", f"The user pays the {nonce} rent from the iban DE00{nonce}"
    model = memory_admin.embedder()
    vector = model.embed([text])[0]
    with session_scope() as session:
        remember(
            session,
            user_id=user,
            subject="user",
            attribute="iban",
            category="profile",
            text=text,
            embedding=vector,
            embedding_model=model.model,
            source_run_id=None,
        )
    return user, f"DE00{nonce}"


def _withheld(run_id: int) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == "memory.withheld")
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def test_a_reviewers_procedure_in_a_calls_context_withholds_the_users_memory(
    make_run: MakeRun,
) -> None:
    nonce = uuid.uuid4().hex[:8]
    user, iban = _user_with_a_fact(nonce)
    run_id = make_run([{"name": "a", "kind": "tool", "tool": "noop"}], user=user, start=False)
    question = f"Which iban pays the {nonce} rent?"
    mine = procedure_admin.add(
        Actor(f"token:{user}", "submitter", user),
        {"title": f"My {nonce} rent", "when_to_use": f"paying the {nonce} rent", "body": "PIN 4"},
    )
    try:
        asked = request_for(run_id, step_prompt(question, {}))
        assert iban in str(asked.messages) and "PIN 4" in str(asked.messages)
        body = {"title": f"The {nonce} rent", "when_to_use": f"the {nonce} rent iban"}
        theirs = procedure_admin.add(
            Actor("token:rev", "reviewer"), {**body, "scope": "everyone", "body": "Quote all."}
        )
        try:
            asked = request_for(run_id, step_prompt(question, {}))
        finally:
            procedure_admin.remove(OPERATOR, theirs.id or 0)
    finally:
        procedure_admin.remove(OPERATOR, mine.id or 0)
    shown = str(asked.messages)
    assert "Quote all." in shown  # the reviewer's procedure was recalled
    assert iban not in shown and "PIN 4" not in shown  # the user's fact and own procedure not
    (withheld,) = _withheld(run_id)
    assert withheld.detail | {"reason": ""} == {
        "purpose": "step",
        "procedure": theirs.id,
        "version": 1,
        "author": "reviewer",
        "reason": "",
    }


def test_an_extraction_after_a_reviewers_step_reads_only_the_users_words(
    make_run: MakeRun,
) -> None:
    marker = f"MARK-{uuid.uuid4().hex[:8]}"
    step = {"name": "pay", "kind": "model", "instruction": f"Say {marker}."}
    run_id = wait_for_run(make_run([step], goal="Pay the rent")).id or 0
    extraction = extract_prompt("Pay the rent", [], {})
    assert marker in str(request_for(run_id, extraction).messages)  # the user's own step
    with session_scope() as session:  # as the planner records a reviewer's template
        stmt = sa.update(PlanVersion).where(col(PlanVersion.run_id) == run_id)
        session.execute(stmt.values(created_by="reviewer"))
    asked = request_for(run_id, extraction)
    assert marker not in str(asked.messages)
    assert "Pay the rent" in str(asked.messages)  # the user's goal is still what it learns from
