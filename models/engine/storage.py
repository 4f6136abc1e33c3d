"""Step-data budgets: what a run's steps store, charged to the run and to its user.

Step data is what a run's steps store whose size a user (or a model they steer) controls: a
step's result (`models.engine.leases.end_attempt`), a model step's journaled tool call
(`models.engine.tool_journal.record`) and a reviewer's answer (`models.review.reviews.respond`),
each counted as compact JSON in UTF-8 (`models.plans.step_data.json_bytes`: arguments and result, or
the error text, for a tool call). Issue 27, item 5: with only the per-step cap
(`AGENTQ_STEP_DATA_MAX_BYTES`), a 68 KB request stored 11.8 MB of results.

A run has a step-data budget (`runs.step_data_limit_bytes`, `AGENTQ_RUN_STEP_DATA_MAX_BYTES` at
submit) and its steps' data count against it (`runs.step_data_bytes`); a user's runs together
against `AGENTQ_USER_STEP_DATA_MAX_BYTES` (`user_step_data.bytes`; 0: no limit). Like the other
budgets (DESIGN.md, invariant 4) each charge is checked and made in Postgres, in the statement
that stores the data: the statement begins with the CTEs of `charging`, guarded
`used + :bytes <= limit` for the run and for the user, and stores its row only
`WHERE EXISTS (SELECT 1 FROM run_charged)`. So two sibling steps can never both store past a
limit, a refused charge stores nothing, and a stored row is never uncharged. What is stored
beside a charged value (a step's conversation turn and `step.*` events, which copy its result
within the per-step cap) is not counted again.

A user's total shrinks when their runs' data goes: a purged run's bytes leave it
(`release_purged`, `models.operations.retention`), and `forget --runs` zeroes the erased runs' bytes
and takes them off it (`release_erased`, `models.memory.erasures`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel

from models import sql
from models.errors import (
    BudgetExhausted,
    InvalidInput,
    NotFound,
    StepDataBudgetSpent,
    UserStepDataSpent,
)
from models.plans.step_data import json_bytes
from models.settings import get_settings

RUN_SETTING: Final = "AGENTQ_RUN_STEP_DATA_MAX_BYTES"
USER_SETTING: Final = "AGENTQ_USER_STEP_DATA_MAX_BYTES"


class UserStepData(SQLModel, table=True):
    """The step data all runs of `user_id` hold together, bytes of compact JSON (a user with
    none stored yet has no row)."""

    __tablename__ = "user_step_data"
    user_id: str = Field(primary_key=True, max_length=200)
    bytes: int = Field(default=0, sa_type=sa.BigInteger, nullable=False)


def charging(run_of: str) -> str:
    """The CTEs that charge `:bytes` to the run that the subquery `run_of` names and to its user
    (under `:user_max_bytes`, 0: no limit), for a statement that begins with them: `fits` is that
    run when its budget has room; `user_charged` its user, when the user's total took the bytes;
    `run_charged` the run, charged only then. A statement storing its data only `WHERE EXISTS
    (SELECT 1 FROM run_charged)` stores it with its charge or not at all.

    `fits` locks the run's row (`FOR UPDATE`): a charge that waited for another transaction's
    (a sibling step's end) checks the budget again on the row that one committed, as Postgres
    does under READ COMMITTED, so two charges can never both pass on the same room; the user's
    upsert (`ON CONFLICT DO UPDATE ... WHERE`) checks the newest row likewise. Every statement
    here locks the run before the user's row, as the step's end (`models.engine.decisions.lock`) and
    the purge do, so none waits on another in a cycle."""
    return f"""
WITH fits AS (
    SELECT r.id, r.user_id FROM runs r
    WHERE r.id = ({run_of}) AND r.step_data_bytes + :bytes <= r.step_data_limit_bytes
    FOR UPDATE OF r
), user_charged AS (
    INSERT INTO user_step_data AS u (user_id, bytes)
    SELECT user_id, CAST(:bytes AS bigint) FROM fits
    WHERE :user_max_bytes = 0 OR :bytes <= :user_max_bytes
    ON CONFLICT (user_id) DO UPDATE SET bytes = u.bytes + excluded.bytes
    WHERE :user_max_bytes = 0 OR u.bytes + excluded.bytes <= :user_max_bytes
    RETURNING u.user_id
), run_charged AS (
    UPDATE runs SET step_data_bytes = runs.step_data_bytes + :bytes
    FROM fits WHERE runs.id = fits.id AND EXISTS (SELECT 1 FROM user_charged)
    RETURNING runs.id
)"""


# charge: charge :bytes to run :run_id and its user if both have room (a reviewer's answer).
CHARGE: Final = charging("SELECT CAST(:run_id AS integer)") + "\nSELECT id FROM run_charged"
# refund: take back :bytes from run :run_id and its user, charged by a statement whose row was
# then not stored (another attempt had stored it first).
REFUND: Final = """
WITH run AS (
    UPDATE runs SET step_data_bytes = step_data_bytes - :bytes WHERE id = :run_id
    RETURNING user_id
)
UPDATE user_step_data u SET bytes = u.bytes - :bytes FROM run WHERE u.user_id = run.user_id"""
# held_by: what run :run_id's steps hold and may hold, and what its user's runs hold.
HELD_BY: Final = """
SELECT r.user_id, r.step_data_bytes, r.step_data_limit_bytes, coalesce(u.bytes, 0) AS user_bytes
FROM runs r LEFT JOIN user_step_data u ON u.user_id = r.user_id WHERE r.id = :run_id"""
# user_bytes: what the runs of :user_id hold together.
USER_BYTES: Final = "SELECT coalesce(max(bytes), 0) FROM user_step_data WHERE user_id = :user_id"
# release_purged: the runs :ids are about to be deleted; their bytes leave their users' totals.
RELEASE_PURGED: Final = """
UPDATE user_step_data u SET bytes = u.bytes - gone.bytes
FROM (SELECT user_id, sum(step_data_bytes) AS bytes FROM runs
      WHERE id = ANY(CAST(:ids AS integer[])) GROUP BY user_id) gone
WHERE u.user_id = gone.user_id AND gone.bytes > 0"""
# release_erased: the ended runs of :user_id, their content erased, hold no step data: each
# one's bytes go to 0 and their sum leaves the user's total.
RELEASE_ERASED: Final = """
WITH held AS (
    SELECT id, step_data_bytes FROM runs
    WHERE user_id = :user_id AND status IN ('succeeded', 'failed', 'cancelled')
        AND step_data_bytes > 0
    FOR UPDATE
), zeroed AS (
    UPDATE runs SET step_data_bytes = 0 FROM held WHERE runs.id = held.id
)
UPDATE user_step_data SET bytes = bytes - (SELECT coalesce(sum(step_data_bytes), 0) FROM held)
WHERE user_id = :user_id"""


@dataclass(frozen=True)
class Charge:
    """Step data to store with its charge: `what` it is (for the refusal: "the result of step
    'x'"), its size in bytes, and the user's total it must fit (`AGENTQ_USER_STEP_DATA_MAX_BYTES`
    of the process storing it; 0: no limit)."""

    what: str
    bytes: int
    user_max_bytes: int

    def params(self) -> dict[str, int]:
        """The parameters of `charging`'s CTEs."""
        return {"bytes": self.bytes, "user_max_bytes": self.user_max_bytes}


def charge(session: Session, run_id: int, charged: Charge) -> None:
    """Charge `charged` to run `run_id` and its user, in the caller's transaction, for data the
    caller then stores in it (a reviewer's answer, with the run locked). Raises
    `StepDataBudgetSpent` or `UserStepDataSpent` (`refusal`), charging nothing, when it does
    not fit; `NotFound` for an unknown run."""
    if sql.one(session, CHARGE, {"run_id": run_id, **charged.params()}) is None:
        raise refusal(session, run_id, charged)


def charge_answer(session: Session, run_id: int, answer: dict[str, Any]) -> None:
    """Charge a reviewer's `answer` to run `run_id` (locked by the caller) and its user, in the
    caller's transaction; `InvalidInput` naming the setting and the amounts when it does not fit
    (then the caller's transaction, the decision included, must write nothing)."""
    user_max = get_settings().user_step_data_max_bytes
    try:
        charge(session, run_id, Charge("answer", json_bytes(answer), user_max))
    except BudgetExhausted as refused:
        raise InvalidInput(f"{refused}; answer with less, or edit the plan") from refused


def refund(session: Session, run_id: int, charged: Charge) -> None:
    """Take `charged` back from run `run_id` and its user: its statement charged it, but its row
    was not stored."""
    sql.execute(session, REFUND, {"run_id": run_id, "bytes": charged.bytes})


def refusal(session: Session, run_id: int, charged: Charge) -> BudgetExhausted:
    """Why `charged` did not fit run `run_id` (its budget) or its user (their total), naming the
    setting and the amounts. Raises `NotFound` for an unknown run."""
    held = sql.one(session, HELD_BY, {"run_id": run_id})
    if held is None:
        raise NotFound(f"run {run_id} does not exist")
    size = f"{charged.what}: {charged.bytes:,} bytes as JSON"
    if held.step_data_bytes + charged.bytes > held.step_data_limit_bytes:
        return StepDataBudgetSpent(
            f"{size} do not fit run {run_id}'s step data budget: {held.step_data_bytes:,} of "
            f"{held.step_data_limit_bytes:,} bytes stored ({RUN_SETTING})"
        )
    return UserStepDataSpent(
        f"{size} do not fit user {held.user_id!r}'s step data: {held.user_bytes:,} of "
        f"{charged.user_max_bytes:,} bytes held by their runs ({USER_SETTING}); runs purged by "
        "retention or erased by `agentq memory forget --runs` give theirs back"
    )


def user_bytes(session: Session, user_id: str) -> int:
    """The step data `user_id`'s runs hold together, bytes."""
    return int(sql.scalar(session, USER_BYTES, {"user_id": user_id}))


def release_purged(session: Session, run_ids: list[int]) -> None:
    """Take the step data of runs `run_ids`, about to be deleted, off their users' totals."""
    sql.execute(session, RELEASE_PURGED, {"ids": run_ids})


def release_erased(session: Session, user_id: str) -> None:
    """Zero the step data of `user_id`'s ended runs, whose content is being erased, and take it
    off the user's total."""
    sql.execute(session, RELEASE_ERASED, {"user_id": user_id})
