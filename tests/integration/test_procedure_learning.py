"""Procedures learned from runs and demoted when they stop working (issue 31), on the real engine:
a run that succeeded after a replan teaches its user a procedure, which the next run of that kind
adopts at once; a procedure whose adopted plan then needed a replan loses rank, and is retired
after failures in a row."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.memory import memory_admin, procedure_admin
from models.memory.memory_admin import embedder
from models.memory.procedure_outcomes import Adoption, Judged, outcomes_of, record
from models.memory.procedure_recall import Visible, recall_procedures, used_by_run
from models.memory.procedures import Actor, Procedure, spec_of, versions_of
from models.review import reviews
from models.settings import get_settings
from models.tables import Escalation, RunEvent, Step
from ops.stack import LocalStack
from tests.integration.conftest import wait_for_run
from worker.memory import procedure_learning
from worker.tools.expenses import EXPENSE_PLAYBOOK

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
GOAL = "File my Lisbon trip expense report"
FACTS = {"currency": "EUR", "cost_centre": "CC-4410", "trip": "lisbon-2026-10"}
OTHER = {**FACTS, "cost_centre": "CC-4411"}  # the same kind of request, not the same request


def _user(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _events(run_id: int, kind: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The details of the run's `kind` events, once there is one (the memory task writes them
    after the run's episode)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
            found = [e.detail for e in session.exec(stmt.order_by(col(RunEvent.id)))]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _users_procedures(user: str) -> list[Procedure]:
    with session_scope() as session:
        stmt = select(Procedure).where(Procedure.user_id == user)
        return list(session.exec(stmt.order_by(col(Procedure.id))))


def test_a_replanned_run_teaches_a_procedure_the_next_run_adopts(make_run: MakeRun) -> None:
    ana = _user("ana")
    first = wait_for_run(make_run(None, user=ana, goal=GOAL, facts=FACTS, replans=1), memory=True)
    assert first.status == "succeeded" and first.replans_used == 1
    (learned,) = _events(first.id or 0, procedure_learning.LEARNED)
    assert learned["action"] == "add"
    (procedure,) = _users_procedures(ana)
    assert procedure.id == learned["procedure_id"] and procedure.origin == "learned"
    assert procedure.source_run_id == first.id and procedure.scope == "user"
    assert procedure.written_as == "submitter" and procedure.created_by == "agentq"
    tools = [s.get("tool") for s in (procedure.plan_template or {})["steps"]]
    assert "cached_rate" in tools and "live_rate" not in tools  # what worked, not what failed
    assert "live_rate failed" in procedure.body or "(live_rate) failed" in procedure.body

    # another request of the kind (the same request would start with first's plan: test_repeats)
    second = wait_for_run(make_run(None, user=ana, goal=GOAL, facts=OTHER, replans=1), memory=True)
    assert second.status == "succeeded"
    assert second.replans_used == 0 and second.plan_version == 1  # planned right away
    with session_scope() as session:
        used = used_by_run(session, second.id or 0)
    assert [u.id for u in used if u.adopted] == [procedure.id]
    deadline = time.monotonic() + 30
    while True:  # its outcome is recorded by its memory task
        with session_scope() as session:
            outcomes = [(o.run_id, o.outcome) for o in outcomes_of(session, procedure.id or 0)]
        if outcomes or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert outcomes == [(second.id, "held")]
    assert len(_users_procedures(ana)) == 1  # a run that found nothing new teaches nothing
    assert _users_procedures(_user("bob")) == []


def test_learning_is_idempotent_off_with_its_setting_and_forgotten_with_the_user(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    cara = _user("cara")
    run = wait_for_run(make_run(None, user=cara, goal=GOAL, facts=FACTS, replans=1), memory=True)
    assert _events(run.id or 0, procedure_learning.LEARNED)
    (procedure,) = _users_procedures(cara)
    procedure_learning.learn_from(run.id or 0)  # a memory task delivered twice: nothing new
    assert [p.version for p in _users_procedures(cara)] == [procedure.version]
    assert _events(run.id or 0, procedure_learning.LEARNED)[-1]["action"] == "kept"

    admin = Actor("admin", "admin")
    procedure_admin.remove(admin, procedure.id or 0)
    off = get_settings().model_copy(update={"learn_procedures": False})
    monkeypatch.setattr(procedure_learning, "get_settings", lambda: off)
    procedure_learning.learn_from(run.id or 0)
    assert _users_procedures(cara) == []  # off: nothing learned
    monkeypatch.undo()
    procedure_learning.learn_from(run.id or 0)
    (again,) = _users_procedures(cara)
    assert again.origin == "learned"

    memory_admin.forget(cara)
    assert _users_procedures(cara) == []


def test_a_procedure_whose_plans_need_replans_is_demoted_then_retired(make_run: MakeRun) -> None:
    admin = Actor("admin", "admin")
    shared = procedure_admin.add(
        admin,
        {
            "title": GOAL,
            "when_to_use": GOAL,
            "plan_template": {"steps": EXPENSE_PLAYBOOK},  # with live_rate, which will fail
            "scope": "everyone",
        },
    )
    pid = shared.id or 0
    try:
        dan = _user("dan")
        first = wait_for_run(
            make_run(None, user=dan, goal=GOAL, facts=FACTS, replans=1), memory=True
        )
        assert first.status == "succeeded" and first.replans_used == 1
        with session_scope() as session:
            assert [u.id for u in used_by_run(session, first.id or 0) if u.adopted] == [pid]
        (learned,) = _events(first.id or 0, procedure_learning.LEARNED)
        assert learned["action"] == "add" and learned["procedure_id"] != pid  # dan's own
        with session_scope() as session:
            row = session.get(Procedure, pid)
            assert row is not None and row.failures == 1 and row.retired_at is None
            assert [o.outcome for o in outcomes_of(session, pid)] == ["replanned"]

        # the next run: dan's own (no failures) ranks above the shared one (one failure, halved)
        second = wait_for_run(
            make_run(None, user=dan, goal=GOAL, facts=OTHER, replans=1), memory=True
        )
        assert second.status == "succeeded" and second.replans_used == 0
        with session_scope() as session:
            adopted = [u.id for u in used_by_run(session, second.id or 0) if u.adopted]
        assert adopted == [learned["procedure_id"]]

        runs = [
            make_run([{"name": "a", "kind": "tool", "tool": "noop"}], user=dan) for _ in range(2)
        ]
        for run_id in runs:
            wait_for_run(run_id)
        judged: tuple[Judged, str] = (
            "replanned",
            "the adopted plan needed 1 later plan version(s)",
        )
        with session_scope() as session:  # two more runs that adopted it and then needed a replan
            moved = [record(session, Adoption(pid, 1, 1), r, judged, retire_after=3) for r in runs]
            again = record(session, Adoption(pid, 1, 1), runs[0], judged, retire_after=3)
        assert moved == [(2, False), (3, True)]
        assert again is None  # one outcome per run: a memory task delivered twice counts once

        query = procedure_admin.embedded(spec_of(shared))
        with session_scope() as session:
            row = session.get(Procedure, pid)
            assert row is not None and row.retired_at is not None and row.failures == 3
            found = recall_procedures(
                session,
                visible=Visible(dan),
                query_text=GOAL,
                query_embedding=query.vector,
                embedding_model=query.model,
                min_similarity=0.0,
            )
            assert found and pid not in [f.item.id for f in found]  # retired: kept, never recalled
            assert [o.outcome for o in outcomes_of(session, pid)] == ["replanned"] * 3

        # a new version (a person's, or a learned one) starts again: recalled, no failures
        procedure_admin.edit(admin, pid, {"body": "Use cached_rate when live_rate is down."})
        with session_scope() as session:
            row = session.get(Procedure, pid)
            assert row is not None and row.retired_at is None and row.failures == 0
            assert [v.origin for v in versions_of(session, pid)] == ["person", "person"]
    finally:  # an everyone-procedure: other tests' runs would recall it
        procedure_admin.remove(admin, pid)


def test_procedures_are_ranked_by_bm25_so_a_rare_shared_word_counts_most(
    engine: LocalStack,
) -> None:
    """Recall scores procedures as facts are (`models.memory.rerank`): a word every visible
    procedure holds ("archive") weighs little, the one word only one holds ("ledger") much."""
    ana = _user("ana")
    actor = Actor("admin", "admin")  # writes any user's procedures
    titles = [
        "Archive the ledger",
        "Archive the invoices",
        "Archive the receipts",
        "Archive the reports",
    ]
    ids = {
        procedure_admin.add(
            actor, {"title": t, "when_to_use": t, "body": f"{t}.", "scope": "user", "user_id": ana}
        ).id: t
        for t in titles
    }
    model = embedder()
    query = "archive ledger"
    with session_scope() as session:
        found = recall_procedures(
            session,
            visible=Visible(ana),
            query_text=query,
            query_embedding=list(model.embed([query])[0]),
            embedding_model=model.model,
            k=4,
            min_similarity=0.0,
        )
    assert ids[found[0].item.id] == "Archive the ledger"
    ledger, *others = found
    assert ledger.text_match and not any(o.text_match for o in others)
    # BM25 with idf: ln(1 + 3.5 / 1.5) for "ledger" against ln(1 + 0.5 / 4.5) for "archive", about
    # 12 to 1 (Postgres' ts_rank_cd, which has no idf, scored them about 2 to 1)
    assert all(ledger.text_rank > 5 * o.text_rank > 0 for o in others)


def test_a_run_a_reviewer_answered_teaches_the_reviewers_procedure(make_run: MakeRun) -> None:
    """An answer is stored as the decision `respond` (the lesson looked for `answer`, which no
    escalation holds, so no answered run taught). Its plan refers to the answered step, which a
    template leaves out: the lesson is a how-to, with no template to adopt."""
    dana = _user("dana")
    run_id = make_run(None, user=dana, goal=GOAL, facts=FACTS, replans=0)
    waiting = wait_for_run(run_id, ("waiting_review",))
    with session_scope() as session:
        stmt = select(Escalation).where(Escalation.run_id == run_id, Escalation.decision == None)  # noqa: E711
        (asked,) = session.exec(stmt).all()
        failed = session.get(Step, asked.step_id)
        assert failed is not None and failed.tool == "live_rate"
        reviews.respond(session, asked.id or 0, reviewer="rita", answer={"rate": 1.0})
    assert waiting.replans_used == 0
    assert wait_for_run(run_id, memory=True).status == "succeeded"
    (learned,) = _events(run_id, procedure_learning.LEARNED)
    assert learned["action"] == "add" and learned["reason"] == "reviewer_answer"
    (procedure,) = _users_procedures(dana)
    assert procedure.origin == "learned" and procedure.source_run_id == run_id
    assert procedure.written_as == "reviewer"  # the reviewer's words, not the user's (issue 27)
    assert "rita" in procedure.created_by
    assert procedure.plan_template is None
    assert "live_rate" in procedure.body and "A reviewer answered in its place" in procedure.body
