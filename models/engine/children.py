"""Steps that are goals of their own (issue 32, item 3): a plan step of kind `run` submits a
child run, and ends with it.

A step of kind `run` (`models.plans.plans.StepSpec`: its `instruction` is the child's goal, its
`args` the child's `facts`; the child's planner writes its plan) is claimed by a worker as any
step is; instead of a tool call, the attempt's end submits the child run
(`models.engine.child_runs.start`) in the transaction that moves the step `running ->
waiting_child` (DESIGN.md, invariant 1: the child is written once, with the step's move, by the
attempt that holds the step; and `run_children.parent_step_id` is unique). No worker waits for
the child: the step holds no lease.

The child is the parent's user's, with the parent's pinned facts (the step's `facts` over them),
replan check and approval tightening, and as budgets what the parent has left when it starts
(tokens, cost, replans, wall time), so the child alone cannot spend more than that. When it ends,
its spend to its end is charged to the parent (`settle`; what its memory task spends after it, the
fact extraction, stays its own); a parent whose other branches spent meanwhile may go over its
token budget then, and the coordinator escalates it `token_budget_spent`, as after any step. It is
planned, run, retried, reviewed and remembered as any run: its escalations wait in the review queue
as its own, each showing its parent.

When the child ends (succeeded, failed, cancelled), its parent is sent `agentq.coordinate`
(`models.engine.queue.wake_parent`: by the synthesis that ends it, and by `queue.follow_up` after
any other end), and the parent's next decision (`models.engine.decisions.advance`) ends the step
first, under the parent's lock: `succeeded` with the child's answer (`{"answer": ..., "run_id":
N}`), or `failed` with why, which the coordinator then replans or escalates as any failure. A
message lost on the way is made up by the reconciler, which nudges a quiet running run. The step's
end is a guarded transition, so a parent told twice ends it once.

Cancelling a parent cancels its active children, and theirs (`cancel_below`, from
`models.front.commands.cancel`), each step that waited for one ending failed, its spend charged.
Depth and fan-out are bounded (`AGENTQ_CHILD_RUN_MAX_DEPTH`, `AGENTQ_CHILD_RUNS_MAX`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel

from models import sql
from models.engine import budgets, step_transitions, transitions
from models.states import RUN_ACTIVE
from models.tables import created_field

# ended_children: the ended child runs of the steps :step_ids (waiting for them), with what the
# parent's step ends with.
ENDED_CHILDREN: Final = """
SELECT c.parent_step_id, r.id, r.status, r.final_result, r.error, r.tokens_used, r.cost_used_usd
FROM run_children c JOIN runs r ON r.id = c.run_id
WHERE c.parent_step_id = ANY(:step_ids) AND r.status IN ('succeeded', 'failed', 'cancelled')"""
# tokens_spent: whether run :run_id's tokens are spent (the coordinator's `RunView.tokens_spent`).
TOKENS_SPENT: Final = "SELECT tokens_used >= tokens_limit FROM runs WHERE id = :run_id"
# descendants: the runs below :run_id (children, theirs...) still active, nearest first.
ACTIVE_DESCENDANTS: Final = """
WITH RECURSIVE below(run_id, depth) AS (
    SELECT run_id, 1 FROM run_children WHERE parent_run_id = :run_id
    UNION ALL
    SELECT c.run_id, b.depth + 1 FROM run_children c JOIN below b ON c.parent_run_id = b.run_id
)
SELECT b.run_id FROM below b JOIN runs r ON r.id = b.run_id
WHERE r.status = ANY(:active) ORDER BY b.depth, b.run_id"""


class RunChild(SQLModel, table=True):
    """A child run: the step of its parent run that submitted it, and how deep it is (a run a
    user submitted is at depth 0: its children at 1)."""

    __tablename__ = "run_children"
    run_id: int = Field(
        sa_column=sa.Column(
            sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
        )
    )
    parent_run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    parent_step_id: int = Field(unique=True)
    depth: int
    created_at: datetime = created_field()


def settle(session: Session, run_id: int, step_ids: Sequence[int]) -> tuple[dict[int, str], bool]:
    """End each of run `run_id`'s steps `step_ids` (waiting for a child) whose child has ended,
    in the caller's transaction, under the parent's lock (`models.engine.step_transitions.
    end_child`), charging the child's spend to the parent and the step (`models.engine.budgets.
    settle`, as a model call's). Returns the steps ended, id -> new
    status, and whether the parent's tokens are spent now (False when nothing was charged)."""
    ended: dict[int, str] = {}
    for row in sql.execute(session, ENDED_CHILDREN, {"step_ids": list(step_ids)}):
        step_id, child_id, status, final, error, tokens, cost = row
        result, why = None, None
        if status == "succeeded":
            result = {"answer": (final or {}).get("answer"), "run_id": child_id}
        else:
            why = f"child run {child_id} {status}" + (f": {error}" if error else "")
        step = step_transitions.end_child(session, step_id, result=result, error=why)
        if step is None:
            continue
        ended[step_id] = step.status
        # the child's spend, as a model call's is charged to its run and step
        held = budgets.Reservation(run_id, 0, 0.0)
        budgets.settle(session, held, tokens=tokens, cost=cost, step_id=step_id)
    spent = bool(ended) and bool(sql.scalar(session, TOKENS_SPENT, {"run_id": run_id}))
    return ended, spent


def parent_of(session: Session, run_id: int) -> int | None:
    """The id of run `run_id`'s parent run; None for a run a user submitted."""
    row = session.get(RunChild, run_id)
    return row.parent_run_id if row is not None else None


def depth_of(session: Session, run_id: int) -> int:
    """How deep run `run_id` is: 0 for a run a user submitted."""
    row = session.get(RunChild, run_id)
    return row.depth if row is not None else 0


def active_descendants(session: Session, run_id: int) -> list[int]:
    """The ids of the runs below run `run_id` (its children, theirs...) still active, nearest
    first: what cancelling it cancels."""
    params = {"run_id": run_id, "active": sorted(RUN_ACTIVE)}
    return [row for (row,) in sql.execute(session, ACTIVE_DESCENDANTS, params)]


def cancel_below(session: Session, run_id: int) -> list[int]:
    """Cancel the active runs below run `run_id` (`models.engine.transitions.cancel_run`),
    deepest first, each under its lock, and end the step each one's parent waits with (`settle`:
    failed, the child's spend charged to the parent), in the caller's transaction (which holds
    `run_id`'s lock). The ids cancelled, for their follow-ups after the commit."""
    cancelled = []
    for child_id in reversed(active_descendants(session, run_id)):
        child = transitions.lock_run(session, child_id)
        if child is None or child.status not in RUN_ACTIVE:  # it ended since it was read
            continue
        transitions.cancel_run(session, child_id)
        cancelled.append(child_id)
        link = session.get(RunChild, child_id)
        if link is not None:
            settle(session, link.parent_run_id, [link.parent_step_id])
    return cancelled
