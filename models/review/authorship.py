"""Whose rights a run's work acts with: its user's, or a reviewer's (issue 9).

A reviewer may read every run and steer it (edit the plan, answer, comment), but reads none of a
user's memory and writes to it only with `remember`. So what a reviewer wrote acts with the
reviewer's rights, never the user's:

- `reviewer_words`: once a reviewer has decided with words (an edited plan, an answer, a
  comment), those words are in the context of the run's later model calls (its turns, its plan,
  its pinned facts), and a model call that held them beside the user's recalled memory could be
  made to repeat that memory in a result the reviewer reads. `worker.memory.working_memory` recalls
  nothing for such a call and records `memory.withheld`. A plain approval adds no words.
- `reviewers_steps`: the steps a reviewer wrote, and those built from what a reviewer wrote.
  Nothing they produce (arguments, errors, results) becomes the user's memory
  (`worker.memory.run_memory.run_memory`).
- A plan that adopts a procedure's template (`worker.phases.adoption`) is written by the procedure
  version's writer: a version a reviewer wrote (`Procedure.written_as`, not in `USER_WRITERS`)
  makes a plan version `created_by` `reviewer`, so its steps are reviewer's steps, however they
  reached the plan (issue 27). `reviewer_in_run` says when either rule puts a reviewer's words
  in the run: from then on no call of the run recalls the user's memory.

Both read rows only; the caller's session is never committed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Final, Protocol

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.errors import ToolArgumentsError
from models.plans.references import referenced_facts, references
from models.tables import Escalation, PlanVersion, Step

USER_AUTHORS: Final = frozenset({"submitter", "planner"})  # `PlanVersion.created_by` values
# `Procedure.written_as` roles whose templates act for the user who adopts them: the user's own
# submitter, or an admin, who may read every user's memory. A reviewer's, or an unknown writer's
# (a version from before roles were recorded), acts for a reviewer.
USER_WRITERS: Final = frozenset({"submitter", "admin"})
WORDS_DECISIONS: Final = ("edit", "respond")  # decisions that always carry a reviewer's words


class StepFields(Protocol):
    """What the rules of a run's memory read of a step: a `Step` row, or a detached
    `models.engine.ended_runs.StepRow`."""

    @property
    def id(self) -> int | None: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def instruction(self) -> str: ...
    @property
    def tool(self) -> str | None: ...
    @property
    def args(self) -> dict[str, Any]: ...
    @property
    def tools(self) -> list[str]: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> str | None: ...


class VersionFields(Protocol):
    """What `reviewers_steps` reads of a plan version: a `PlanVersion` row, or a detached
    `models.engine.ended_runs.VersionRow`."""

    @property
    def created_by(self) -> str: ...
    @property
    def replaces_step_id(self) -> int | None: ...


def reviewer_words(session: Session, run_id: int) -> Escalation | None:
    """The run's first decided escalation that put a reviewer's words into it: an edit, an
    answer, or any decision with a non-blank comment; None when there is none (no reviewer
    decided, or only plain approvals)."""
    words = sa.or_(
        col(Escalation.decision).in_(WORDS_DECISIONS),
        sa.func.coalesce(sa.func.btrim(col(Escalation.comment)), "") != "",
    )
    stmt = (
        select(Escalation)
        .where(Escalation.run_id == run_id, Escalation.status == "decided", words)
        .order_by(col(Escalation.id))
        .limit(1)
    )
    return session.exec(stmt).first()


def reviewer_in_run(session: Session, run_id: int) -> dict[str, Any] | None:
    """Why a reviewer's words are in the run's context, or None when they are not: the
    escalation that put them there (`reviewer_words`: `{"escalation", "decision",
    "reviewer"}`), else the first step that acts for a reviewer (`reviewers_steps`, such as a
    template adopted from a reviewer's procedure: `{"step", "plan_version", "author"}`, the
    author being that version's `created_by`). The run's plan, with every step's instruction
    and arguments, is in each later call's context, so from then on no call recalls the user's
    memory (issue 27)."""
    words = reviewer_words(session, run_id)
    if words is not None:
        return {"escalation": words.id, "decision": words.decision, "reviewer": words.decided_by}
    if not _other_authors(session, run_id):
        return None  # each step is the submitter's, the planner's or the replanner's for them
    rows = steps_with_versions(session, run_id)
    theirs = reviewers_steps(rows)
    for step, version in rows:
        if step.id in theirs:
            author = version.created_by if version is not None else None
            return {"step": step.name, "plan_version": step.plan_version, "author": author}
    return None


def _other_authors(session: Session, run_id: int) -> bool:
    """Whether a step of the run has a version by another author than the submitter, the
    planner or the replanner (or none): only then may `reviewers_steps` find one. Reads ids
    only, not the steps' arguments and results, as every model call asks (`reviewer_in_run`)."""
    created = sa.and_(
        col(PlanVersion.run_id) == col(Step.run_id),
        col(PlanVersion.version) == col(Step.plan_version),
    )
    usual = col(PlanVersion.created_by).in_([*USER_AUTHORS, "replanner"])
    stmt = (
        select(col(Step.id))
        .join(PlanVersion, created, isouter=True)
        .where(Step.run_id == run_id, sa.or_(col(PlanVersion.id).is_(None), sa.not_(usual)))
        .limit(1)
    )
    return session.exec(stmt).first() is not None


def steps_with_versions(session: Session, run_id: int) -> list[tuple[Step, PlanVersion | None]]:
    """Every step of the run (all plan versions) in id order, each with the plan version that
    created it (None if that row is missing): one query."""
    created = sa.and_(
        col(PlanVersion.run_id) == col(Step.run_id),
        col(PlanVersion.version) == col(Step.plan_version),
    )
    stmt = (
        select(Step, PlanVersion)
        .join(PlanVersion, created, isouter=True)
        .where(Step.run_id == run_id)
        .order_by(col(Step.id))
    )
    return [(step, version) for step, version in session.exec(stmt)]


def reviewers_steps(
    rows: Sequence[tuple[StepFields, VersionFields | None]],
    *,
    reviewer_facts: Collection[str] = (),
) -> set[int]:
    """Ids of the steps of `rows` (`steps_with_versions`) that act for a reviewer:

    - a step that a reviewer's plan version created (an edit's steps, an answer's `human` step),
      except an approval's retry, a verbatim copy of the failed step its version replaces, which
      acts for whoever that step acts for;
    - a step the replanner wrote in place of a reviewer's step: it was written from that step,
      its arguments and its error;
    - a step whose arguments refer to the result of a reviewer's step (`${steps.NAME...}`, any
      step of that name) or to a fact a reviewer pinned (`reviewer_facts`, such as
      `reviewer_answer`): its arguments, errors and result may carry the reviewer's words.

    Versions by the submitter and the planner act for the user; a step whose version row is
    missing, or whose author agentq does not know, acts for a reviewer (the safe side).
    """
    by_id = {step.id: step for step, _ in rows}
    theirs: set[int] = set()
    while True:
        names = {by_id[i].name for i in theirs}
        found = {
            step.id or 0
            for step, version in rows
            if step.id not in theirs
            and (
                _written_by_reviewer(step, version, by_id, theirs)
                or _refers_to(step, names, reviewer_facts)
            )
        }
        if not found:
            return theirs
        theirs |= found


def _written_by_reviewer(
    step: StepFields,
    version: VersionFields | None,
    by_id: dict[int | None, StepFields],
    theirs: set[int],
) -> bool:
    if version is not None and version.created_by in USER_AUTHORS:
        return False
    replaced = by_id.get(version.replaces_step_id) if version is not None else None
    if version is not None and version.created_by == "replanner":
        return replaced is not None and replaced.id in theirs
    if replaced is not None and _same_step(step, replaced):
        return replaced.id in theirs  # an approval's retry: the failed step's own author
    return True


def _same_step(a: StepFields, b: StepFields) -> bool:
    """Whether `a` is a verbatim copy of `b` (what an approval's retry is)."""
    return (a.name, a.kind, a.instruction, a.tool, a.args, a.tools) == (
        b.name,
        b.kind,
        b.instruction,
        b.tool,
        b.args,
        b.tools,
    )


def _refers_to(step: StepFields, names: Collection[str], facts: Collection[str]) -> bool:
    try:
        return bool(references(step.args) & set(names) or referenced_facts(step.args) & set(facts))
    except ToolArgumentsError:
        return False  # malformed references: the step fails before its tool runs
