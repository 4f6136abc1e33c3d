"""Long-term memory in the engine: recall before a call, and remember a run when it ends.

Recall is scoped to the run's user (DESIGN.md, invariant 7) and to the configured embedding
model. Remembering writes one episode per run (goal, plan, what failed and what fixed it,
outcome, answer), the reviewers' answers their reviewers asked to remember (source
`reviewer:<name>`), and the facts a model extracts from the run (source `run:<id>`), reconciled
by `models.facts.remember` (add, duplicate, or supersede). Extraction reads only the user's own
words (the goal and the facts the user pinned), never what a reviewer set (issue 9, finding 5).
Steps that act for a reviewer (`models.authorship.reviewers_steps`: a reviewer wrote them, or
they were built from what a reviewer wrote) act with the reviewer's rights: their failures are
left out of the episode and of extraction, and a fix they made counts as `reviewer`, so nothing
they produce becomes the user's memory (issue 9).
A run whose user was forgotten after it was created remembers nothing (`models.erasures`).
Memory never decides a run's outcome: a failure to remember is recorded as an event and the run
goes on.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from sqlmodel import Session, col, select

from models import erasures, transitions
from models.authorship import reviewers_steps, steps_with_versions
from models.db import session_scope
from models.episodes import record_episode
from models.errors import AgentqError
from models.facts import remember
from models.memory import check_embedding_model, embedder
from models.plans import current_steps
from models.runs import get_run, pinned_facts
from models.settings import get_settings
from models.storable import parse_json
from models.tables import Escalation, Run, Step
from worker.prompts import FactsSpec, extract_prompt
from worker.structured import InvalidOutput, ask

log = structlog.get_logger("agentq.worker")
ANSWER_FACT_MAX_CHARS = 1_000  # a remembered answer is a sentence of memory, not a document


def failures_of(session: Session, run: Run) -> tuple[list[dict[str, Any]], int]:
    """The run's failures the user's memory may keep (`failures`), and how many failed steps
    were left out because they act for a reviewer."""
    rows = steps_with_versions(session, run.id or 0)
    theirs = reviewers_steps(rows, reviewer_facts=pinned_facts(session, run.id or 0, by_user=False))
    steps = [step for step, _ in rows]
    left_out = sum(1 for s in steps if s.status == "failed" and s.id in theirs)
    return remembered_failures(steps, theirs), left_out


def remembered_failures(steps: list[Step], reviewers: Collection[int]) -> list[dict[str, Any]]:
    """Each failed step of `steps` (a run's, in id order) but those acting for a reviewer (ids
    in `reviewers`), with what later succeeded under the same name (`fixed_by`: a tool name,
    `reviewer` for an answer or a reviewer's step, None when nothing did)."""
    out = []
    for failed in (s for s in steps if s.status == "failed" and s.id not in reviewers):
        fix = next(
            (
                s
                for s in steps
                if s.name == failed.name
                and s.status == "succeeded"
                and (s.id or 0) > (failed.id or 0)
            ),
            None,
        )
        fixed_by = None
        if fix is not None:
            fixed_by = "reviewer" if fix.kind == "human" or fix.id in reviewers else fix.tool
        out.append(
            {"step": failed.name, "tool": failed.tool, "error": failed.error, "fixed_by": fixed_by}
        )
    return out


def remember_run(run_id: int, *, outcome: str, final_answer: str) -> None:
    """Write the run's episode, the answers reviewers asked to remember and the extracted facts;
    failures are recorded, never raised. A run whose user was forgotten after it was created
    records `memory.dropped` instead, and calls no model."""
    try:
        with session_scope() as session:
            run = get_run(session, run_id)
            if _erased(session, run):
                return
            failures, left_out = failures_of(session, run)
            _record_episode(session, run, failures, outcome=outcome, final_answer=final_answer)
            stated = pinned_facts(session, run_id, by_user=True)
            answers = remembered_answers(session, run_id)
        counts = {**_remember_answers(run, answers), "withheld_failures": left_out}
        for kind, n in _extract_and_remember(run, failures, stated).items():
            counts[kind] = counts.get(kind, 0) + n
    except (AgentqError, ValidationError, ValueError) as exc:
        log.warning("memory.failed", run_id=run_id, error=str(exc))
        with session_scope() as session:
            transitions.record_event(session, run_id, "memory.failed", error=str(exc)[:500])
        return
    with session_scope() as session:
        transitions.record_event(session, run_id, "memory.remembered", outcome=outcome, **counts)


def _erased(session: Session, run: Run) -> bool:
    """Whether the run's user was forgotten after the run was created (then `memory.dropped`
    is recorded): its memory would be dropped write by write, so no model is asked for it."""
    point = erasures.erased_at(session, run_id=run.id or 0, user_id=run.user_id)
    if point is not None:
        transitions.record_event(
            session, run.id or 0, "memory.dropped", what="run", erased_at=point.isoformat()
        )
    return point is not None


@dataclass(frozen=True)
class AnswerFact:
    """The fact a remembered reviewer answer becomes."""

    subject: str
    attribute: str
    text: str
    source: str


def remembered_answers(session: Session, run_id: int) -> list[AnswerFact]:
    """The run's reviewer answers whose reviewers asked to remember them, oldest first, as the
    facts they become."""
    rows = session.exec(
        select(Escalation)
        .where(Escalation.run_id == run_id, Escalation.decision == "respond")
        .where(col(Escalation.remember_answer), col(Escalation.answer).is_not(None))
        .order_by(col(Escalation.id))
    )
    return [answer_fact(esc) for esc in rows]


def answer_fact(esc: Escalation) -> AnswerFact:
    """The fact a remembered reviewer answer becomes: about the step it answered (subject
    `review`, attribute `answer:<step>`, so a newer answer for that step replaces it), saying
    who answered; its source is `reviewer:<name>`."""
    step = str(esc.detail.get("step") or "")
    tool = str(esc.detail.get("tool") or "")
    answer = json.dumps(esc.answer, ensure_ascii=False)
    if len(answer) > ANSWER_FACT_MAX_CHARS:
        answer = answer[: ANSWER_FACT_MAX_CHARS - 3] + "..."
    what = f"step {step}" + (f" ({tool})" if tool else "") if step else f"a run ({esc.reason})"
    return AnswerFact(
        subject="review",
        attribute=f"answer:{step}" if step else "answer",
        text=f"Reviewer {esc.decided_by} answered for {what}: {answer}",
        source=f"reviewer:{esc.decided_by}",
    )


def _remember_answers(run: Run, answers: list[AnswerFact]) -> dict[str, int]:
    """Write the remembered answers as facts of the run's user (embedded outside the
    transaction: DESIGN.md, invariant 11); counts by outcome."""
    model = embedder()
    vectors = model.embed([a.text for a in answers]) if answers else []
    counts = {"answers": len(answers)}
    with session_scope() as session:
        for answer, vector in zip(answers, vectors, strict=True):
            done = remember(
                session,
                user_id=run.user_id,
                subject=answer.subject,
                attribute=answer.attribute,
                category="knowledge",
                text=answer.text,
                embedding=vector,
                embedding_model=model.model,
                source_run_id=run.id,
                source=answer.source,
            )
            counts[done.outcome] = counts.get(done.outcome, 0) + 1
    return counts


def _record_episode(
    session: Session,
    run: Run,
    failures: list[dict[str, Any]],
    *,
    outcome: str,
    final_answer: str,
) -> None:
    steps = current_steps(session, run)
    plan = [{"name": s.name, "tool": s.tool, "status": s.status} for s in steps]
    lines = [f"Goal: {run.goal}", f"Outcome: {outcome}"]
    lines += [f"{f['tool']} failed ({f['error']}); fixed by {f['fixed_by']}" for f in failures]
    summary = "\n".join(lines)
    model = embedder()
    record_episode(
        session,
        user_id=run.user_id,
        run_id=run.id or 0,
        goal=run.goal,
        plan=plan,  # type: ignore[arg-type]
        failures=failures,  # type: ignore[arg-type]
        outcome=outcome,
        final_answer=final_answer,
        summary=summary,
        embedding=model.embed([summary])[0],
        embedding_model=model.model,
    )


def _extract_and_remember(
    run: Run, failures: list[dict[str, Any]], stated: dict[str, str]
) -> dict[str, int]:
    """Ask the model for the run's facts (from the user's own words only: `stated` are the
    facts the user pinned) and remember each, source `run:<id>`; counts by outcome."""
    answer = ask(run.id or 0, extract_prompt(run.goal, failures, stated), _facts_answer)
    if answer.value is None:
        raise InvalidOutput(f"no valid facts after re-asking: {answer.error}")
    facts = answer.value.facts
    model, s = embedder(), get_settings()
    vectors = model.embed([f.text for f in facts]) if facts else []
    counts = {"added": 0, "duplicate": 0, "superseded": 0, "dropped": 0}
    with session_scope() as session:
        for fact, vector in zip(facts, vectors, strict=True):
            outcome = remember(
                session,
                user_id=run.user_id,
                subject=fact.subject,
                attribute=fact.attribute,
                category=fact.category,
                text=fact.text,
                embedding=vector,
                embedding_model=model.model,
                source_run_id=run.id,
                ttl_s=s.fact_ttl_s.get(fact.category),
            )
            counts[outcome.outcome] += 1
    return counts


def remember_finished_run(run_id: int) -> None:
    """`remember_run` for a run that ended another way than synthesis (a reviewer's reject)."""
    with session_scope() as session:
        run = get_run(session, run_id)
        outcome, answer = run.status, run.error or ""
    if outcome in ("failed", "cancelled"):
        remember_run(run_id, outcome=outcome, final_answer=answer)


def check_memory_model() -> None:
    """At start-up: refuse an embedding model other than the stored rows' (see
    `models.memory.check_embedding_model`), and make sure its indexes exist."""
    with session_scope() as session:
        check_embedding_model(session, embedder())


def _facts_answer(text: str) -> FactsSpec:
    """A fact-extraction answer; raises `InvalidOutput` for text that is not JSON and pydantic's
    `ValidationError` for JSON of the wrong shape."""
    try:
        data = parse_json(text)
    except ValueError as exc:
        raise InvalidOutput(f"the answer is not JSON: {exc}") from exc
    return FactsSpec.model_validate(data)
