"""After a run is remembered: how the procedures it adopted did, and what it taught (issue 31).

`learn_from(run_id)` runs in the run's memory task (`worker.memory.remembering`), off the run's
hot path, in three parts, no embedding inside a transaction (DESIGN.md, invariant 11):

1. read (one transaction): the run's adoptions, recorded at once with their outcome
   (`models.memory.procedure_outcomes`: held, replanned or failed; demotion and retirement; a
   replan records `replanned` at once, `record_replanned`), and
   the lesson it teaches, if any (`models.memory.procedure_learning.distill`);
2. embed the lesson's text;
3. write (one transaction): the user's procedures nearest to it decide between a new procedure, a
   new version of the same one, or nothing (`models.memory.procedure_learning.decide`); the run's
   timeline gets `procedures.learned` (`{"action", "procedure_id", "version", "reason"}`).

Off with `AGENTQ_LEARN_PROCEDURES=false` (the outcomes are still recorded: they are about
procedures people wrote too). A lesson that cannot be written (a tool since removed, a concurrent
edit) is logged and recorded as `procedures.not_learned`, and never fails the run's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import sqlalchemy as sa
import structlog
from sqlmodel import Session, col, select

from models.db import session_scope
from models.engine import events
from models.engine.runs import pinned_by_author
from models.errors import Conflict, InvalidInput, NotFound
from models.memory import procedures as book
from models.memory.memory_admin import embedder
from models.memory.procedure_admin import template_of
from models.memory.procedure_learning import Candidate, Lesson, decide, distill, lesson_reason
from models.memory.procedure_outcomes import Adoption, Judged, judge, record
from models.memory.procedure_recall import RECALLED, used_by_run
from models.memory.procedures import Embedded, Procedure
from models.plans.plan_checks import PlanCheck
from models.plans.tools import configured_tool_names
from models.review.authorship import reviewer_in_run
from models.settings import get_settings
from models.tables import Escalation, Run, Step

log = structlog.get_logger("agentq.worker")
LEARNED: Final = "procedures.learned"
NOT_LEARNED: Final = "procedures.not_learned"
CANDIDATES_K: Final = 5
# learned_candidates: the user's own procedures nearest to a lesson, with their cosine similarity.
CANDIDATES: Final = """
SELECT id, version, plan_template,
       1 - (embedding::vector({dim}) <=> CAST(:q AS vector({dim}))) AS similarity
FROM procedures
WHERE scope = 'user' AND user_id = :user_id AND embedding_model = :model
  AND embedding_dim = {dim}
ORDER BY embedding::vector({dim}) <=> CAST(:q AS vector({dim})), id
LIMIT :k"""
# has_lessons: whether run :run_id has anything `learn_from` reads on: a `procedures.recalled`
# event (an adoption to judge), or a success after a replan, a should-replan check answering
# `replan`, or a reviewer's `edit` or answer, stored as `respond` (`lesson_reason`'s grounds).
# Most runs have none: one statement instead of the four reads that find out (issue 29).
HAS_LESSONS: Final = """
SELECT EXISTS (SELECT 1 FROM run_events ev WHERE ev.run_id = r.id AND ev.kind = :recalled)
    OR (r.status = 'succeeded' AND (
        r.replans_used > 0
        OR EXISTS (SELECT 1 FROM plan_checks c WHERE c.run_id = r.id AND c.verdict = 'replan')
        OR EXISTS (SELECT 1 FROM escalations e
                   WHERE e.run_id = r.id AND e.decision IN ('edit', 'respond'))))
FROM runs r WHERE r.id = :run_id"""


def learn_from(run_id: int) -> None:
    """Record run `run_id`'s adoptions' outcomes, then learn what it teaches (module docstring).
    Raises `DatabaseUnavailable` (the memory task waits out the outage); a lesson's own problems
    are recorded, not raised."""
    with session_scope() as session:
        found = session.execute(sa.text(HAS_LESSONS), {"run_id": run_id, "recalled": RECALLED})
        if not found.scalar():  # no such run, or nothing to judge or learn
            return
        run = session.get(Run, run_id)
        if run is None:
            return
        adopted = _record_outcomes(session, run)
        lesson = _lesson(session, run, adopted) if get_settings().learn_procedures else None
    if lesson is None:
        return
    model = embedder()
    vector = Embedded(model.embed([lesson.spec.embedded_text()])[0], model.model)
    try:
        with session_scope() as session:
            detail = _write(session, lesson, vector)
            events.record_event(session, run_id, LEARNED, **detail)
    except (Conflict, NotFound, InvalidInput) as exc:
        not_learned(run_id, str(exc))
        return
    log.info("procedures.learned", run_id=run_id, **detail)


def record_replanned(session: Session, run_id: int, why: str) -> None:
    """Record, in the replan's own transaction, that each procedure the run adopted did not hold:
    its plan needed a replan (`why`). At once, not when the run ends: a run that then waits for
    a reviewer has no memory task yet, and its procedure would go on being adopted meanwhile.
    The run's end finds the outcome recorded (one per procedure and run)."""

    def replanned(adoption: Adoption) -> tuple[Judged, str]:
        return "replanned", f"plan version {adoption.plan_version} needed a replan: {why}"[:500]

    _record_adopted(session, run_id, replanned)


def _record_outcomes(session: Session, run: Run) -> int | None:
    """Record the outcome of each procedure the ended run adopted (`judge`); the id of the last
    one adopted."""
    return _record_adopted(
        session,
        run.id or 0,
        lambda a: judge(a, run_status=run.status, plan_versions=run.plan_version),
    )


def _record_adopted(
    session: Session, run_id: int, judged: Callable[[Adoption], tuple[Judged, str] | None]
) -> int | None:
    """Record `judged` of each procedure the run adopted; the id of the last one adopted."""
    adopted: int | None = None
    retire_after = get_settings().procedure_retire_after
    for used in used_by_run(session, run_id):
        if not used.adopted:
            continue
        adoption = Adoption(used.id, used.version, used.plan_version)
        outcome = judged(adoption)
        if outcome is not None:
            moved = record(session, adoption, run_id, outcome, retire_after=retire_after)
            if moved is not None and moved[1]:
                log.info("procedures.retired", procedure_id=used.id, failures=moved[0])
        adopted = used.id
    return adopted


def _lesson(session: Session, run: Run, adopted: int | None) -> Lesson | None:
    """What the run teaches, or None (it does not, or its plan makes no valid procedure)."""
    if run.status != "succeeded":  # only a success teaches: no more reads
        return None
    run_id = run.id or 0
    decisions = session.exec(
        select(col(Escalation.decision)).where(
            Escalation.run_id == run_id, col(Escalation.decision).is_not(None)
        )
    ).all()
    checks = select(PlanCheck).where(PlanCheck.run_id == run_id, PlanCheck.verdict == "replan")
    doubts = {c.step_id: c.reason for c in session.exec(checks.order_by(col(PlanCheck.id)))}
    reason = lesson_reason(
        succeeded=run.status == "succeeded",
        replanned=run.replans_used > 0,
        decisions=[str(d) for d in decisions],
        doubted=bool(doubts),
    )
    if reason is None:
        return None
    failed = select(Step).where(Step.run_id == run_id, Step.status == "failed")
    failures = [(s.name, s.tool, s.error) for s in session.exec(failed.order_by(col(Step.id)))]
    words = reviewer_in_run(session, run_id)
    reviewer = None if words is None else str(words.get("reviewer") or words.get("author"))
    try:
        return distill(
            run_id=run_id,
            user_id=run.user_id,
            goal=run.goal,
            reason=reason,
            template=template_of(session, run),
            failures=failures,
            facts=pinned_by_author(session, run_id)[0],
            doubts=[(_name(session, step_id), why) for step_id, why in doubts.items()],
            reviewer=reviewer,
            adopted=adopted,
            tools=configured_tool_names(),
        )
    except (Conflict, InvalidInput) as exc:
        events.record_event(session, run_id, NOT_LEARNED, error=str(exc)[:500])
        log.info("procedures.not_learned", run_id=run_id, error=str(exc)[:200])
        return None


def _name(session: Session, step_id: int) -> str:
    step = session.get(Step, step_id)
    return step.name if step is not None else str(step_id)


def _write(session: Session, lesson: Lesson, vector: Embedded) -> dict[str, Any]:
    """Write `lesson` as `decide` says; the `procedures.learned` event's detail."""
    user_id = lesson.spec.user_id or ""
    candidates = _candidates(session, user_id, vector, lesson.adopted)
    template = lesson.spec.plan_template or {}
    decision = decide(template, candidates, adopted=lesson.adopted)
    reason = {"reason": lesson.reason}
    origin: book.Origin = "learned"
    if decision.action == "add":
        row = book.insert(
            session,
            lesson.spec,
            vector,
            by=lesson.writer,
            source_run_id=lesson.run_id,
            origin=origin,
        )
    elif decision.action == "version":
        current = session.get(Procedure, decision.target)
        assert current is not None  # a candidate of this transaction
        # the procedure keeps its title and when-to-use: a new version of how to do it
        spec = lesson.spec.model_copy(
            update={"title": current.title, "when_to_use": current.when_to_use}
        )
        row = book.update(
            session,
            decision.target or 0,
            expected=decision.expected or 0,
            spec=spec,
            embedded=vector,
            by=lesson.writer,
            origin=origin,
        )
    else:
        row_id, version = decision.target, decision.expected
        return {"action": "kept", "procedure_id": row_id, "version": version, **reason}
    return {"action": decision.action, "procedure_id": row.id, "version": row.version, **reason}


def _candidates(
    session: Session, user_id: str, vector: Embedded, adopted: int | None
) -> Sequence[Candidate]:
    """The user's procedures nearest to the lesson, and the one the run adopted if it is theirs."""
    dim = len(vector.vector)
    q = "[" + ",".join(repr(float(x)) for x in vector.vector) + "]"
    params = {"q": q, "user_id": user_id, "model": vector.model, "k": CANDIDATES_K}
    rows = session.execute(sa.text(CANDIDATES.format(dim=int(dim))), params)
    found = [Candidate(r.id, r.version, float(r.similarity), r.plan_template) for r in rows]
    if adopted is not None and all(c.id != adopted for c in found):
        mine = session.get(Procedure, adopted)
        if mine is not None and mine.scope == "user" and mine.user_id == user_id:
            found.append(Candidate(adopted, mine.version, 0.0, mine.plan_template))
    return found


def not_learned(run_id: int, error: str) -> None:
    """Record on run `run_id`'s timeline that what it taught could not be written, and why."""
    log.info("procedures.not_learned", run_id=run_id, error=error[:200])
    with session_scope() as session:
        events.record_event(session, run_id, NOT_LEARNED, error=error[:500])
