"""How the plans that adopted a procedure turned out, and demotion of one that stopped working
(issue 31).

When a run that adopted a procedure's plan template (`procedures.recalled` with `adopted`,
`worker.phases.planner.record_procedures`) has ended, its memory task records the outcome
(`judge`, pure): `held` (it succeeded with no later plan version), `replanned` (a later plan
version was needed: the template no longer fits) or `failed` (the run failed). A cancelled run
says nothing. Each is a row of `procedure_outcomes`, the evidence shown with the procedure's
history; one per procedure and run, so a memory task delivered twice counts once.

`replanned` and `failed` count as failures in a row (`Procedure.failures`; `held` starts again
from 0), only against the version the run adopted (a newer version is a new attempt). Recall
weighs a procedure by `DEMOTION ** failures` (`weight`), so one that failed twice ranks below an
equally relevant one that works; at `AGENTQ_PROCEDURE_RETIRE_AFTER` failures in a row it is retired:
kept, shown, never recalled, until a person or a learned version replaces its content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

import sqlalchemy as sa
from sqlmodel import Field as Column
from sqlmodel import Session, SQLModel, col, select

from models.tables import created_field

Judged = Literal["held", "replanned", "failed"]
# A failure in a row halves a procedure's recall score: two failures put an equally relevant
# working procedure ahead of it. A round value, not fitted.
DEMOTION: Final = 0.5


class ProcedureOutcome(SQLModel, table=True):
    """How one run that adopted a procedure (at `version`) turned out."""

    __tablename__ = "procedure_outcomes"
    __table_args__ = (sa.UniqueConstraint("procedure_id", "run_id", name="procedure_outcomes_run"),)
    id: int | None = Column(default=None, primary_key=True)
    procedure_id: int = Column(foreign_key="procedures.id", index=True, ondelete="CASCADE")
    version: int
    run_id: int = Column(foreign_key="runs.id", index=True, ondelete="CASCADE")
    outcome: str = Column(max_length=20)
    detail: str
    created_at: datetime = created_field()


@dataclass(frozen=True)
class Adoption:
    """A plan version of a run that adopted procedure `procedure_id` at `version`."""

    procedure_id: int
    version: int
    plan_version: int


def judge(adoption: Adoption, *, run_status: str, plan_versions: int) -> tuple[Judged, str] | None:
    """The outcome of an ended run (`run_status`, its last plan version `plan_versions`) for a
    procedure it adopted, with the detail in words; None for a run neither succeeded nor failed."""
    later = plan_versions - adoption.plan_version
    if run_status == "failed":
        return "failed", f"the run failed (plan version {plan_versions})"
    if run_status != "succeeded":
        return None
    if later > 0:
        return "replanned", f"the adopted plan needed {later} later plan version(s)"
    return "held", "the run succeeded on the adopted plan"


# record_outcome: one run's outcome for a procedure, once; the procedure's failures in a row move
# only when the outcome is new and about its current version; retired at :retire_after in a row.
RECORD_OUTCOME: Final = """
WITH recorded AS (
    INSERT INTO procedure_outcomes (procedure_id, version, run_id, outcome, detail, created_at)
    SELECT id, :version, :run_id, :outcome, :detail, now() FROM procedures WHERE id = :procedure_id
    ON CONFLICT ON CONSTRAINT procedure_outcomes_run DO NOTHING
    RETURNING procedure_id
)
UPDATE procedures AS p SET
    failures = CASE WHEN :outcome = 'held' THEN 0 ELSE p.failures + 1 END,
    retired_at = CASE
        WHEN :outcome <> 'held' AND p.failures + 1 >= :retire_after
        THEN coalesce(p.retired_at, now()) ELSE p.retired_at END
FROM recorded
WHERE p.id = recorded.procedure_id AND p.version = :version
RETURNING p.failures, p.retired_at IS NOT NULL AS retired"""


def record(
    session: Session,
    adoption: Adoption,
    run_id: int,
    judged: tuple[Judged, str],
    *,
    retire_after: int,
) -> tuple[int, bool] | None:
    """Record run `run_id`'s outcome for the procedure it adopted (`RECORD_OUTCOME`); the
    procedure's failures in a row and whether it is retired now, or None when nothing moved (the
    outcome was recorded before, the procedure is gone, or it has a newer version)."""
    outcome, detail = judged
    row = session.execute(
        sa.text(RECORD_OUTCOME),
        {
            "procedure_id": adoption.procedure_id,
            "version": adoption.version,
            "run_id": run_id,
            "outcome": outcome,
            "detail": detail,
            "retire_after": retire_after,
        },
    ).first()
    return None if row is None else (int(row.failures), bool(row.retired))


def weight(failures: int) -> float:
    """The factor a procedure's recall score is multiplied by after `failures` in a row."""
    return float(DEMOTION ** max(0, failures))


def outcomes_of(session: Session, procedure_id: int) -> Sequence[ProcedureOutcome]:
    """The recorded outcomes of runs that adopted the procedure, oldest first."""
    stmt = select(ProcedureOutcome).where(ProcedureOutcome.procedure_id == procedure_id)
    return list(session.exec(stmt.order_by(col(ProcedureOutcome.id))))
