"""Long-term memory in the engine: remember a run once it has ended, and warm the embedder up.

Remembering writes one episode per run (goal, plan, what failed and what fixed it, outcome,
answer), the reviewers' answers their reviewers asked to remember (source `reviewer:<name>`),
and the facts a model extracts from the run (source `run:<id>`, `worker.extraction`),
reconciled by `models.facts.remember` (add, duplicate, or supersede). It runs off the run's hot
path: a run is `succeeded` (or `failed`, `cancelled`) first, then the `agentq.remember_run` task
on the `memory` queue writes its memory (issue 10), so a memory write never delays a run's end
and a deployment may give it workers of its own. Steps that act for a reviewer
(`models.authorship.reviewers_steps`: a reviewer wrote them, or they were built from what a
reviewer wrote) act with the reviewer's rights: their failures are left out of the episode and
of extraction, and a fix they made counts as `reviewer`, so nothing they produce becomes the
user's memory (issue 9). A run whose user was forgotten after it was created remembers nothing
(`models.erasures`). Memory never decides a run's outcome: a failure to remember is recorded as
an event and the run stays as it ended.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from sqlmodel import Session, col, select

from models import embedders, erasures, transitions
from models.authorship import reviewers_steps, steps_with_versions
from models.db import session_scope
from models.episodes import record_episode
from models.errors import AgentqError
from models.facts import remember
from models.memory import check_embedding_model, embedder, memory_ended
from models.plans import current_steps
from models.runs import get_run, pinned_facts
from models.settings import get_settings
from models.tables import Escalation, Run, Step
from worker import extraction
from worker.prompts import FactSpec

log = structlog.get_logger("agentq.worker")
ANSWER_FACT_MAX_CHARS = 1_000  # a remembered answer is a sentence of memory, not a document
FACT_OUTCOMES = ("added", "duplicate", "superseded", "dropped")


def failures_of(session: Session, run: Run) -> tuple[list[dict[str, Any]], int, list[Step]]:
    """The run's failures the user's memory may keep (`failures`), how many failed steps were
    left out because they act for a reviewer, and every step of the run (all plan versions)."""
    rows = steps_with_versions(session, run.id or 0)
    theirs = reviewers_steps(rows, reviewer_facts=pinned_facts(session, run.id or 0, by_user=False))
    steps = [step for step, _ in rows]
    left_out = sum(1 for s in steps if s.status == "failed" and s.id in theirs)
    return remembered_failures(steps, theirs), left_out, steps


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


@dataclass(frozen=True)
class AnswerFact:
    """The fact a remembered reviewer answer becomes."""

    subject: str
    attribute: str
    text: str
    source: str


@dataclass(frozen=True)
class RunMemory:
    """What a run's memory is written from, read in one transaction: the episode's `plan` and
    `summary` (the text embedded), the failures the user's memory may keep and how many were
    `withheld`, the facts the user pinned (`stated`), the remembered reviewer `answers`, and
    `skipped`: why no facts are extracted (`extraction.skip_reason`), None to extract them."""

    run: Run
    outcome: str
    final_answer: str
    plan: list[dict[str, Any]]
    summary: str
    failures: list[dict[str, Any]]
    withheld: int
    stated: dict[str, str]
    answers: list[AnswerFact]
    skipped: str | None


def remember_run(run_id: int, *, outcome: str, final_answer: str) -> None:
    """Write the run's episode, the answers reviewers asked to remember and the extracted facts.

    Called after the run has ended (`agentq.remember_run`, on the `memory` queue). In order:
    read the run (one transaction); ask the model for facts unless `extraction.skip_reason`
    says there is nothing to learn; embed the episode's summary, the answers and the facts in
    one `embed` call; write the episode and the answers (one transaction), then the facts and
    the `memory.remembered` event (another): no model or embedding call inside a transaction
    (DESIGN.md, invariant 11). The event's detail: `outcome`, `answers`, counts by fact outcome
    (`added`, `duplicate`, `superseded`, `dropped`), `withheld_failures`, and `extraction`:
    `asked`, or `skipped` with the reason in `extraction_skipped`.

    Failures are recorded as `memory.failed` (`{"error"}`), never raised; a failed extraction
    still writes the episode and the answers. A run whose user was forgotten after it was
    created records `memory.dropped` instead and calls no model; a run whose memory task has
    already ended (a message delivered twice) is left alone.
    """
    try:
        with session_scope() as session:
            run = get_run(session, run_id)
            if memory_ended(session, run_id) is not None:
                log.info("memory.skipped", run_id=run_id, reason="already remembered")
                return
            if _erased(session, run):
                return
            found = _read(session, run, outcome=outcome, final_answer=final_answer)
        _remember(found)
    except (AgentqError, ValidationError, ValueError) as exc:
        with session_scope() as session:
            _record_failure(session, run_id, str(exc))


def _record_failure(session: Session, run_id: int, error: str) -> None:
    log.warning("memory.failed", run_id=run_id, error=error)
    transitions.record_event(session, run_id, "memory.failed", error=error[:500])


def _read(session: Session, run: Run, *, outcome: str, final_answer: str) -> RunMemory:
    failures, withheld, steps = failures_of(session, run)
    current = current_steps(session, run)
    plan = [{"name": s.name, "tool": s.tool, "status": s.status} for s in current]
    lines = [f"Goal: {run.goal}", f"Outcome: {outcome}"]
    lines += [f"{f['tool']} failed ({f['error']}); fixed by {f['fixed_by']}" for f in failures]
    stated = pinned_facts(session, run.id or 0, by_user=True)
    skipped = extraction.skip_reason(
        model_steps=extraction.model_steps(steps), failures=len(failures), stated_facts=len(stated)
    )
    return RunMemory(
        run, outcome, final_answer, plan, "\n".join(lines), failures, withheld, stated,
        remembered_answers(session, run.id or 0), skipped,
    )  # fmt: skip


def _remember(found: RunMemory) -> None:
    """Extract (unless skipped), embed once, write, and record how it went; raises what
    embedding and writing raise (the caller records it)."""
    run = found.run
    facts: list[FactSpec] = []
    error: str | None = None
    if found.skipped is None:
        try:
            facts = extraction.extract_facts(run.id or 0, run.goal, found.failures, found.stated)
        except (AgentqError, ValueError) as exc:  # the episode and answers are written all the same
            error = f"fact extraction: {exc}"
    model = embedder()
    texts = [found.summary, *(a.text for a in found.answers), *(f.text for f in facts)]
    vectors = model.embed(texts)  # one call for everything this run writes
    n = 1 + len(found.answers)
    counts: dict[str, Any] = {"outcome": found.outcome, "answers": len(found.answers)}
    counts |= dict.fromkeys(FACT_OUTCOMES, 0)
    with session_scope() as session:
        _record_episode(session, found, vectors[0], model.model)
        _count(counts, _remember_answers(session, found, vectors[1:n], model.model))
    with session_scope() as session:
        _count(counts, _remember_facts(session, run, facts, vectors[n:], model.model))
        if error is not None:
            _record_failure(session, run.id or 0, error)
            return
        counts["withheld_failures"] = found.withheld
        if found.skipped is None:
            counts["extraction"] = "asked"
        else:
            counts |= {"extraction": "skipped", "extraction_skipped": found.skipped}
        transitions.record_event(session, run.id or 0, "memory.remembered", **counts)


def _count(counts: dict[str, Any], outcomes: list[str]) -> None:
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1


def _erased(session: Session, run: Run) -> bool:
    """Whether the run's user was forgotten after the run was created (then `memory.dropped`
    is recorded): its memory would be dropped write by write, so no model is asked for it."""
    point = erasures.erased_at(session, run_id=run.id or 0, user_id=run.user_id)
    if point is not None:
        transitions.record_event(
            session, run.id or 0, "memory.dropped", what="run", erased_at=point.isoformat()
        )
    return point is not None


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


def _record_episode(
    session: Session, found: RunMemory, vector: list[float], embedding_model: str
) -> None:
    run = found.run
    record_episode(
        session,
        user_id=run.user_id,
        run_id=run.id or 0,
        goal=run.goal,
        plan=found.plan,  # type: ignore[arg-type]
        failures=found.failures,  # type: ignore[arg-type]
        outcome=found.outcome,
        final_answer=found.final_answer,
        summary=found.summary,
        embedding=vector,
        embedding_model=embedding_model,
    )


def _remember_answers(
    session: Session, found: RunMemory, vectors: Sequence[list[float]], embedding_model: str
) -> list[str]:
    """Write the remembered answers (embedded in `vectors`) as facts of the run's user; each
    one's outcome."""
    return [
        remember(
            session,
            user_id=found.run.user_id,
            subject=answer.subject,
            attribute=answer.attribute,
            category="knowledge",
            text=answer.text,
            embedding=vector,
            embedding_model=embedding_model,
            source_run_id=found.run.id,
            source=answer.source,
        ).outcome
        for answer, vector in zip(found.answers, vectors, strict=True)
    ]


def _remember_facts(
    session: Session,
    run: Run,
    facts: list[FactSpec],
    vectors: Sequence[list[float]],
    embedding_model: str,
) -> list[str]:
    """Write the extracted facts (embedded in `vectors`), source `run:<id>`, with their
    category's time to live; each one's outcome."""
    ttl_s = get_settings().fact_ttl_s
    return [
        remember(
            session,
            user_id=run.user_id,
            subject=fact.subject,
            attribute=fact.attribute,
            category=fact.category,
            text=fact.text,
            embedding=vector,
            embedding_model=embedding_model,
            source_run_id=run.id,
            ttl_s=ttl_s.get(fact.category),
        ).outcome
        for fact, vector in zip(facts, vectors, strict=True)
    ]


def remember_ended_run(run_id: int) -> None:
    """`remember_run` for a run that has ended: `succeeded` (its answer is its final result's),
    `failed` or `cancelled` (its error); a run in any other state is left alone."""
    with session_scope() as session:
        run = get_run(session, run_id)
        outcome = run.status
        answer = (
            str((run.final_result or {}).get("answer", ""))
            if outcome == "succeeded"
            else run.error or ""
        )
    if outcome in ("succeeded", "failed", "cancelled"):
        remember_run(run_id, outcome=outcome, final_answer=answer)


def check_memory_model() -> None:
    """At start-up: refuse an embedding model other than the stored rows' (see
    `models.memory.check_embedding_model`), and make sure its indexes exist."""
    with session_scope() as session:
        check_embedding_model(session, embedder())


def warm_up() -> float:
    """Load the configured embedder in this process (`models.embedders.warm_up`), so no run
    waits for it; logs `worker.warm` with `seconds`, `embedder` (the model) and `warmed` (False
    for an API embedder, or when loading failed: then `error`, and the first real embedding will
    fail and be recorded as `memory.failed`). Returns the seconds it took."""
    start = time.monotonic()
    model = embedder()
    try:
        warmed, error = embedders.warm_up(model), None
    except Exception as exc:  # a failed warm-up must not stop the pool process from starting
        warmed, error = False, f"{type(exc).__name__}: {exc}"
    seconds = round(time.monotonic() - start, 3)
    fields = {"seconds": seconds, "embedder": model.model, "warmed": warmed, "pid": os.getpid()}
    if error is None:
        log.info("worker.warm", **fields)
    else:
        log.warning("worker.warm", error=error[:500], **fields)
    return seconds
