"""Gated tool calls as rows: a call stopped before it ran, the reviewer's decision on it, and a
run's own tightening of the policy (issue 30, items 2-3; DESIGN.md, invariant 14).

A call is known as the tool journal knows it (`models.engine.tool_journal.call_key`: tool,
canonical arguments, occurrence), so the same call on a later attempt of the step finds its row.
The life of a row: `waiting` (written with the step's move to `waiting_approval`, in the
transaction that ends its attempt) -> `approved`, `edited`, `rejected` or `answered` (written with
the reviewer's decision, which moves the step back to `ready`: `models.review.call_decisions`). The
attempt that runs the step next reads the decision before the call (`decided`): an approved or
edited call runs (journaled, so it runs once), a rejected one is the step's failure (a model step
gets it as the tool's answer), an answered one is the call's result and the tool never runs.

A model step's stop keeps its exchange so far (`resume`: the messages after its prompt, the
model's pending tool calls, the calls that ran, the number of model calls made), so the step goes
on from there after the decision instead of asking the model again (those calls were paid).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlmodel import Field, Session, SQLModel, col, select

from models.approval_policy import Gate
from models.tables import created_field, timestamp_field

APPROVAL_REQUIRED: Final = "approval_required"  # the reason of the escalation of a gated call
DECISIONS: Final = ("approved", "edited", "rejected", "answered")
STOPPED: Final = "waiting"


class ToolApproval(SQLModel, table=True):
    """One gated call of a step (migration 0036): `arguments` as asked, `arguments_used` as
    approved or edited, `answer` a reviewer's answer in the tool's place, `comment` a rejection's
    reason, `why` the rule that gated it (`models.approval_policy.Gate.text`)."""

    __tablename__ = "tool_approvals"
    __table_args__ = (sa.UniqueConstraint("step_id", "call_key", name="tool_approvals_call"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    step_id: int = Field(foreign_key="steps.id", ondelete="CASCADE")
    call_key: str = Field(max_length=200)
    tool: str = Field(max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict, sa_type=JSONB)
    why: str = ""
    resume: dict[str, Any] | None = Field(default=None, sa_type=JSONB, nullable=True)
    status: str = Field(default=STOPPED, max_length=20)
    arguments_used: dict[str, Any] | None = Field(default=None, sa_type=JSONB, nullable=True)
    answer: dict[str, Any] | None = Field(default=None, sa_type=JSONB, nullable=True)
    comment: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = timestamp_field()
    created_at: datetime = created_field()


class RunApprovals(SQLModel, table=True):
    """A submitter's tightening of the approval policy for one run (`approvals` at submit), in the
    policy's JSON form; no row: the operator's policy alone."""

    __tablename__ = "run_approvals"
    run_id: int = Field(
        sa_column=sa.Column(
            sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
        )
    )
    rules: dict[str, Any] = Field(default_factory=dict, sa_type=JSONB)


class ApprovalRequired(Exception):
    """Raised inside a step before a gated call: the step stops, its attempt ends without
    failing, and the run escalates `approval_required` (`worker.execution.steps`)."""

    def __init__(
        self,
        tool: str,
        key: str,
        arguments: dict[str, Any],
        gate: Gate,
        resume: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"the call of {tool!r} needs a person's approval ({gate.text})")
        self.tool, self.key, self.arguments, self.gate = tool, key, arguments, gate
        self.resume = resume

    def row(self) -> dict[str, Any]:
        """The stop as the columns of its `waiting` row (JSON: `tool`, `call_key`, `arguments`,
        `why`, `resume`), what `stop` writes."""
        return {
            "tool": self.tool,
            "call_key": self.key,
            "arguments": self.arguments,
            "why": self.gate.text,
            "resume": self.resume,
        }


def stop(session: Session, run_id: int, step_id: int, stopped: dict[str, Any]) -> None:
    """Write the `waiting` row of the call `stopped` (`ApprovalRequired.row`); a row already
    there, from an attempt that ran alongside, is kept."""
    session.execute(
        insert(ToolApproval)
        .values(run_id=run_id, step_id=step_id, status=STOPPED, **stopped)
        .on_conflict_do_nothing(constraint="tool_approvals_call")
    )


def decided(session: Session, step_id: int, key: str) -> ToolApproval | None:
    """The decided row of call `key` of step `step_id`; None when there is none, or it waits."""
    row = session.exec(
        select(ToolApproval).where(ToolApproval.step_id == step_id, ToolApproval.call_key == key)
    ).one_or_none()
    return row if row is not None and row.status in DECISIONS else None


def resumable(session: Session, step_id: int) -> ToolApproval | None:
    """The newest decided row of step `step_id` that kept a model step's exchange, whose
    exchange the step goes on from; None when there is none."""
    return session.exec(
        select(ToolApproval)
        .where(
            ToolApproval.step_id == step_id,
            col(ToolApproval.resume).is_not(None),
            col(ToolApproval.status).in_(DECISIONS),
        )
        .order_by(col(ToolApproval.id).desc())
        .limit(1)
    ).one_or_none()


def waiting(session: Session, step_id: int, *, lock: bool = True) -> ToolApproval | None:
    """The row of step `step_id` that waits for a decision (locked unless `lock` is False);
    None when none waits."""
    stmt = select(ToolApproval).where(
        ToolApproval.step_id == step_id, ToolApproval.status == STOPPED
    )
    return session.exec(stmt.with_for_update() if lock else stmt).one_or_none()


def decided_at(session: Session, step_id: int, at: datetime) -> ToolApproval | None:
    """The gated call of step `step_id` decided at `at` (its escalation's decision time: a model
    step may stop again later, for another call); None when there is none."""
    return session.exec(
        select(ToolApproval).where(ToolApproval.step_id == step_id, ToolApproval.decided_at == at)
    ).one_or_none()


def set_run_policy(session: Session, run_id: int, rules: dict[str, Any]) -> None:
    """Keep a submitter's tightening for run `run_id` (nothing for an empty one); `rules` was
    checked with `models.approval_policy.parse(..., run=True)`."""
    if rules:
        session.add(RunApprovals(run_id=run_id, rules=rules))


def run_policy(session: Session, run_id: int) -> dict[str, Any]:
    """The submitter's tightening kept for run `run_id` (`set_run_policy`); {} for none."""
    row = session.get(RunApprovals, run_id)
    return dict(row.rules) if row is not None else {}


def detail(session: Session, step_id: int) -> dict[str, Any]:
    """What an `approval_required` escalation shows of the call its step waits on: `{"tool",
    "arguments", "why"}` ({} when none waits)."""
    row = waiting(session, step_id)
    if row is None:
        return {}
    return {"tool": row.tool, "arguments": row.arguments, "why": row.why}
