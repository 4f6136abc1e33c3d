"""Fair order across users: which waiting item a free worker takes next (DESIGN.md, invariant 13).

The `steps` broker queue is FIFO, and a user's released work (up to `AGENTQ_USER_MAX_RUNNING_STEPS`
tasks, `models.engine.dispatch`) waits there in front of everyone who submits later: 1 worker, one
user's 4 runs of 3 x 15 s steps took another user's one-step run from 0.2 s to 179 s (issue 27, item
2). So the broker's order is not the order of work. A message is a wake-up: the worker that takes a
fresh one runs the fair-next waiting item (`NEXT_ITEM`), whoever's it is
(`worker.execution.wakeups`). The worker that ends a step takes the next item itself, in the same
transaction: its run's next step while no other user is owed a turn (`OWED`, read with the run's
lock in `models.engine.decisions`), else the fair-next item, whoever's. A user is owed a turn once
it is `AGENTQ_FAIR_SLICE_S` of service behind (a time slice: a scheduler's minimum granularity,
as Linux CFS has), so a run of short steps runs on in one worker rather than taking turns step by
step, each turn a transaction and a broker message more, while another user's run waits at most
one slice more than one busy step.

Waiting items, each with its due time: a queued step due now (`queued_at`), a running step whose
lease expired (its worker was lost: taken back in the claim), and a run in `planning`,
`replanning` or `synthesizing` whose phase no live lease holds and that is due (`updated_at`:
when the phase started, or a deferral's due time). Every kind counts.

The order is fair queueing by service received (start-time fair queueing, Goyal, Vin & Cheng,
SIGCOMM 1996; Linux CFS's virtual runtime): each user's `service_s` (`user_service`) grows by the
worker seconds of each task of theirs when it ends (`charge`; a step's in `models.engine.leases.
END_ATTEMPT`), and the waiting user with the least goes first. Within a user, the oldest run's
items go first, then the oldest due: a step's due time says little of how long its work has
waited (a step claimed in-process is due when claimed, and the reconciler's re-send moves it),
while its run's submit time does; so a step taken back from a lost worker goes before younger
runs' work however deep the backlog, and a user's runs end in the order they came. A user who
submits with no run active is lifted to the least `service_s` among the users still active
(`lift`), so idle time banks no credit. Item-level round robin would not do: a run is several
items (plan, steps, synthesis), and 1 worker would make it wait one busy user's step per item;
by service, its short items all go before the busy user's next long step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlmodel import Field, Session, SQLModel

from models import sql


class UserService(SQLModel, table=True):
    """The worker time a user's tasks have had (`models.engine.fair_queue`): fair dispatch serves
    the waiting user with the least `service_s` first; a user submitting after a pause is lifted to
    the least value among the active users (migration 0029)."""

    __tablename__ = "user_service"
    user_id: str = Field(primary_key=True, max_length=200)
    service_s: float = 0.0


# waiting: every item a free worker could start now (see the module docstring), with its user
# and due time. Queued and running steps are found by `ix_steps_status_id` (a step is queued or
# running only while released under its user's cap, so few), runs by the partial index of runs
# not ended (`ix_runs_user_active`: the status list repeats its predicate so the planner sees it).
WAITING: Final = """
    SELECT r.user_id, r.created_at AS run_at, s.queued_at AS due, s.id AS step_id, s.run_id,
        s.status
    FROM steps s JOIN runs r ON r.id = s.run_id
    WHERE s.status = 'queued' AND s.queued_at <= :now
    UNION ALL
    SELECT r.user_id, r.created_at, s.queued_at, s.id, s.run_id, s.status
    FROM steps s JOIN runs r ON r.id = s.run_id
    WHERE s.status = 'running' AND s.lease_expires_at < :now AND r.status = 'running'
    UNION ALL
    SELECT r.user_id, r.created_at, r.updated_at, NULL, r.id, r.status FROM runs r
    WHERE r.status IN ('planning', 'replanning', 'synthesizing')
        AND r.status NOT IN ('succeeded', 'failed', 'cancelled')
        AND (r.phase_lease_expires_at IS NULL OR r.phase_lease_expires_at < :now)
        AND r.updated_at <= :now"""
# next_item: the fair-next waiting item (least-served user, then oldest run, then oldest due),
# and for a run in
# `replanning` the failed step its replan answers (the newest failed step no version replaced).
NEXT_ITEM: Final = sql.Replanned(f"""
SELECT n.*, CASE WHEN n.status = 'replanning' THEN (
    SELECT s.id FROM steps s WHERE s.run_id = n.run_id AND s.status = 'failed'
        AND NOT EXISTS (SELECT 1 FROM plan_versions v
                        WHERE v.run_id = n.run_id AND v.replaces_step_id = s.id)
    ORDER BY s.id DESC LIMIT 1) END AS failed_step_id
FROM (SELECT w.* FROM ({WAITING}) w LEFT JOIN user_service u ON u.user_id = w.user_id
      ORDER BY coalesce(u.service_s, 0), w.run_at, w.run_id, w.due, w.step_id NULLS FIRST
      LIMIT 1) n""")
# owed: whether another user's waiting item is owed a turn before user :user_id's next step (that
# user will be at least :slice_s seconds of service behind :user_id once :used_s is charged), or a
# step of a lost worker waits to be taken back (it goes before any younger work, whoever's).
OWED: Final = f"""EXISTS (
    SELECT 1 FROM ({WAITING}) w LEFT JOIN user_service u ON u.user_id = w.user_id
    WHERE w.status = 'running' OR (w.user_id <> :user_id
        AND coalesce(u.service_s, 0) + :slice_s <= :used_s
        + coalesce((SELECT m.service_s FROM user_service m WHERE m.user_id = :user_id), 0)))"""
# charge: add :used_s worker seconds to user :user_id's service.
CHARGE: Final = """
INSERT INTO user_service (user_id, service_s) VALUES (:user_id, :used_s)
ON CONFLICT (user_id) DO UPDATE SET service_s = user_service.service_s + excluded.service_s"""
# charge_step: the same, inside `models.engine.leases.END_ATTEMPT` (CTE `done` returns the step's
# `run_id` and `started_at`): the attempt's seconds, charged to its run's user.
CHARGE_STEP: Final = """, charged AS (
    INSERT INTO user_service (user_id, service_s)
    SELECT r.user_id, greatest(0, extract(epoch FROM :now - done.started_at))
    FROM done JOIN runs r ON r.id = done.run_id
    ON CONFLICT (user_id) DO UPDATE SET service_s = user_service.service_s + excluded.service_s
)"""
# lift: user :user_id, with no run active, is raised to the least service among the users with a
# run active (0 when there are none); a user with a run active keeps what they have.
LIFT: Final = """
INSERT INTO user_service (user_id, service_s)
SELECT CAST(:user_id AS varchar), coalesce(min(u.service_s), 0) FROM user_service u
WHERE u.user_id <> CAST(:user_id AS varchar) AND EXISTS (
    SELECT 1 FROM runs r WHERE r.user_id = u.user_id
        AND r.status NOT IN ('succeeded', 'failed', 'cancelled'))
ON CONFLICT (user_id) DO UPDATE SET service_s = greatest(user_service.service_s, excluded.service_s)
WHERE NOT EXISTS (
    SELECT 1 FROM runs r WHERE r.user_id = CAST(:user_id AS varchar)
        AND r.status NOT IN ('succeeded', 'failed', 'cancelled'))"""


@dataclass(frozen=True)
class Item:
    """A waiting item: a step (`step_id`; `status` queued, or running under an expired lease),
    or a run's phase (`step_id` None; `status` planning, replanning or synthesizing, with the
    failed step a replan answers in `failed_step_id`)."""

    user_id: str
    run_id: int
    step_id: int | None
    status: str
    failed_step_id: int | None = None


def next_item(session: Session, *, now: datetime) -> Item | None:
    """The fair-next waiting item at `now` (module docstring), or None when nothing waits. Reads
    only: the item's own guarded claim takes it (another worker may take it first)."""
    row = sql.one(session, NEXT_ITEM, {"now": now})
    if row is None:
        return None
    return Item(row.user_id, row.run_id, row.step_id, row.status, row.failed_step_id)


def charge(session: Session, user_id: str, used_s: float) -> None:
    """Add `used_s` worker seconds (a task's, when it ends) to `user_id`'s service."""
    sql.execute(session, CHARGE, {"user_id": user_id, "used_s": max(0.0, used_s)})


def lift(session: Session, user_id: str) -> None:
    """Before `user_id`'s run is inserted: with none of theirs active, raise their service to the
    least among the active users' (no credit for idle time)."""
    sql.execute(session, LIFT, {"user_id": user_id})
