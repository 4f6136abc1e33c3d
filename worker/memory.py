"""Long-term memory in the engine: recall before a call, and remember a run when it ends.

Recall is scoped to the run's user (DESIGN.md, invariant 7) and to the configured embedding
model. Remembering writes one episode per run (goal, plan, what failed and what fixed it,
outcome, answer) and the facts a model extracts from it, reconciled by `models.facts.remember`
(add, duplicate, or supersede). Memory never decides a run's outcome: a failure to remember is
recorded as an event and the run goes on.
"""

from __future__ import annotations

from typing import Any

import structlog
from pydantic import ValidationError
from sqlmodel import Session, col, select

from models import transitions
from models.db import session_scope
from models.episodes import record_episode
from models.errors import AgentqError
from models.facts import remember
from models.memory import check_embedding_model, embedder
from models.plans import current_steps
from models.runs import get_run
from models.settings import get_settings
from models.storable import parse_json
from models.tables import Run, Step
from worker.prompts import FactsSpec, extract_prompt
from worker.structured import InvalidOutput, ask

log = structlog.get_logger("agentq.worker")


def failures_of(session: Session, run: Run) -> list[dict[str, Any]]:
    """Each failed step of the run, with what later succeeded under the same name (`fixed_by`:
    a tool name, `reviewer` for an answer, None when nothing did)."""
    steps = list(session.exec(select(Step).where(Step.run_id == run.id).order_by(col(Step.id))))
    out = []
    for failed in (s for s in steps if s.status == "failed"):
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
        fixed_by = None if fix is None else ("reviewer" if fix.kind == "human" else fix.tool)
        out.append(
            {"step": failed.name, "tool": failed.tool, "error": failed.error, "fixed_by": fixed_by}
        )
    return out


def remember_run(run_id: int, *, outcome: str, final_answer: str) -> None:
    """Write the run's episode and its extracted facts; failures are recorded, never raised."""
    try:
        with session_scope() as session:
            run = get_run(session, run_id)
            failures = failures_of(session, run)
            _record_episode(session, run, failures, outcome=outcome, final_answer=final_answer)
        counts = _extract_and_remember(run, failures)
    except (AgentqError, ValidationError, ValueError) as exc:
        log.warning("memory.failed", run_id=run_id, error=str(exc))
        with session_scope() as session:
            transitions.record_event(session, run_id, "memory.failed", error=str(exc)[:500])
        return
    with session_scope() as session:
        transitions.record_event(session, run_id, "memory.remembered", outcome=outcome, **counts)


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


def _extract_and_remember(run: Run, failures: list[dict[str, Any]]) -> dict[str, int]:
    answer = ask(run.id or 0, extract_prompt(run.goal, failures), _facts_answer)
    if answer.value is None:
        raise InvalidOutput(f"no valid facts after re-asking: {answer.error}")
    facts = answer.value.facts
    model, s = embedder(), get_settings()
    vectors = model.embed([f.text for f in facts]) if facts else []
    counts = {"added": 0, "duplicate": 0, "superseded": 0}
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
