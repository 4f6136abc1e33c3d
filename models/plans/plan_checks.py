"""The should-replan check's answers: does the rest of a plan still make sense? (issue 12, item 2)

With `AGENTQ_REPLAN_CHECK=model` (or `replan_check` at submit), a step that succeeds while steps
of its plan have not started yet is followed by one model call, made by the step's own worker
before it records the outcome (`worker.phases.replan_checks`): given the step's result, does the
remaining plan still make sense? The answer is a row (`PlanCheck`), inserted in the transaction
that records the step's success, and the deterministic coordinator reads it there and in every
later decision (`models.engine.coordinator.decide`: a `replan` verdict of the current plan version
is a replan charged to the replan budget, in the place of the steps not yet started;
`models.plans.plans.check_splice`). A later plan version answers the verdicts of the versions
before it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from sqlmodel import Field, Session, SQLModel

from models import sql
from models.bounds import REPLAN_CHECKS as REPLAN_CHECKS
from models.tables import created_field

Verdict = Literal["continue", "replan"]  # and "overruled": a reviewer approved going on
VERDICTS: Final = ("continue", "replan")
REASON_MAX_CHARS: Final = 1000


class PlanCheck(SQLModel, table=True):
    """One answer of the should-replan check: after step `step_id` of plan version
    `plan_version` succeeded, the rest of the plan should go on (`continue`) or be replanned
    (`replan`), and why (`reason`); `source` is the provider that answered (`offline`: rules)."""

    __tablename__ = "plan_checks"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    plan_version: int
    step_id: int = Field(foreign_key="steps.id", ondelete="CASCADE")
    verdict: str = Field(max_length=20)
    reason: str = Field(default="", max_length=REASON_MAX_CHARS)
    source: str = Field(default="model", max_length=40)
    created_at: datetime = created_field()


# insert_plan_check: one answer, in the transaction that records its step's success.
INSERT_PLAN_CHECK: Final = """
INSERT INTO plan_checks (run_id, plan_version, step_id, verdict, reason, source, created_at)
SELECT s.run_id, r.plan_version, s.id, :verdict, :reason, :source, now()
FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.id = :step_id"""


def record(session: Session, step_id: int, verdict: str, reason: str, source: str) -> None:
    """Insert the check's answer for step `step_id` on its run's current plan version, in the
    caller's transaction (one statement; the reason is cut to `REASON_MAX_CHARS`). Raises
    `ValueError` for a verdict that is not a `Verdict`."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict: one of {', '.join(VERDICTS)} (got {verdict!r})")
    params = {
        "step_id": step_id,
        "verdict": verdict,
        "reason": reason[:REASON_MAX_CHARS],
        "source": source,
    }
    sql.execute(session, INSERT_PLAN_CHECK, params)


# overrule_plan_check: a reviewer approved going on after a `replan` answer.
OVERRULE_PLAN_CHECK: Final = """
UPDATE plan_checks SET verdict = 'overruled'
WHERE run_id = :run_id AND plan_version = :version AND step_id = :step_id AND verdict = 'replan'"""


def overrule(session: Session, run_id: int, version: int, step_id: int) -> None:
    """A reviewer approved the plan as it is after the check's `replan` for step `step_id` of
    run `run_id`'s plan version `version`: the answer becomes `overruled`, which the coordinator
    does not read (nothing when there was no such answer)."""
    params = {"run_id": run_id, "version": version, "step_id": step_id}
    sql.execute(session, OVERRULE_PLAN_CHECK, params)


# replan_verdict: the `replan` answer of run :run_id's plan version :version for step :step_id.
REPLAN_VERDICT: Final = """
SELECT c.reason FROM plan_checks c WHERE c.run_id = :run_id AND c.plan_version = :version
    AND c.step_id = :step_id AND c.verdict = 'replan' ORDER BY c.id DESC LIMIT 1"""


def replan_reason(session: Session, run_id: int, version: int, step_id: int) -> str | None:
    """Why the check asked to replan after step `step_id` in plan version `version` of run
    `run_id`; None when it did not (the step failed, or missed the goal:
    `models.engine.goal_checks`)."""
    params = {"run_id": run_id, "version": version, "step_id": step_id}
    row = sql.execute(session, REPLAN_VERDICT, params).fetchone()
    return str(row[0]) if row is not None else None
