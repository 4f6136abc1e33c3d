"""Fair dispatch: a user's work enters the broker only while the user has a free slot.

The `steps` queue is one FIFO shared by every user, so a backlog of one user there delays every
later message of everyone else (issue 9, finding 3: four runs of one user took another user's
one-step run from 0.7 s to 88 s). So work waits in Postgres instead, and each user has at most
`AGENTQ_USER_MAX_RUNNING_STEPS` tasks in the broker or running. A step of another user is then
sent behind at most that many of each busy user's tasks, however long their backlogs.

- In flight (each holds one slot of its run's user): a step `queued` or `running`; a run
  `planning`, `replanning` or `synthesizing` (its task is in the broker or running); a run
  `running` with no step left to run (its last step ended, and its coordinator will start its
  synthesis or a replan: the slot passes from the step to that task, so a coordinator that
  lags behind cannot let a user's syntheses pile up on top of a full set of steps).
- Held (waits for a slot): a `ready` step of a `running` run (the coordinator chose it), and a
  `queued` run (its plan task is not sent yet).

`dispatch` fills the user's free slots: ready steps first (work already under way ends first),
then queued runs (planning starts), each oldest first by id, so the user's earliest runs go
first. Replanning and synthesis are not held: each follows a run's own last step and takes over
its slot (above), and the active-run limit bounds them.

It runs after every coordinator decision (`models.engine.decisions.apply`: a worker's at a step's
end, a submit's first one, the coordinator task's) and from the reconciler, for users whose ready
steps waited longer than `AGENTQ_QUEUED_STALE_S` (a lost message). One user's dispatches take
turns under a transaction-level advisory lock, so two never fill the same slot. Rows are taken
`FOR UPDATE SKIP LOCKED`: a dispatch never waits for a row lock (a coordinator holding its run's
lock may itself be waiting for the user's lock), and a row another transaction holds is left to
that transaction's own dispatch.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final

from sqlmodel import Session

from models import sql
from models.engine import run_transitions, step_transitions
from models.engine.queue import TASK_EXECUTE_STEP, TASK_PLAN
from models.errors import IllegalTransition

Send = tuple[str, tuple[int, ...]]  # a task name and its arguments, sent after the commit

# dispatch_lock: one user's dispatches take turns until the transaction ends.
DISPATCH_LOCK: Final = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"
# user_slots: `in_flight`, the user's steps queued or running, runs whose plan, replan or
# synthesis task is out, and running runs with no step left to run (their synthesis or replan
# comes next); `steps_held` and `runs_held`, whether a ready step or a queued run of the user
# waits for a slot (when neither does, the dispatch reads nothing more). The
# steps are found by status (few at any time) and each one's run by its key: a join on the
# user's runs let a planner without statistics walk every run the user ever had (1 ms with 600
# runs of history, issue 10). A user's runs not yet ended are found by the partial index, and
# each running one's unfinished steps counted by `ix_steps_unfinished` (as an anti-join, the
# same planner scanned all steps once per run). Each clause is written so that no statistics
# are needed to plan it well: a new database fills fast, long before autovacuum analyzes it.
USER_SLOTS: Final = sql.Replanned("""
SELECT (SELECT count(*) FROM steps s
        WHERE s.status IN ('queued', 'running')
          AND (SELECT r.user_id FROM runs r WHERE r.id = s.run_id) = :user_id)
     + (SELECT count(*) FROM runs
        WHERE user_id = :user_id AND status IN ('planning', 'replanning', 'synthesizing'))
     + (SELECT count(*) FROM runs r
        WHERE r.user_id = :user_id AND r.status = 'running' AND (
            SELECT count(*) FROM steps s
            WHERE s.run_id = r.id AND s.status IN ('pending', 'ready', 'queued', 'running')) = 0)
        AS in_flight,
    EXISTS (SELECT 1 FROM runs r JOIN steps s ON s.run_id = r.id
            WHERE r.user_id = :user_id AND r.status = 'running' AND s.status = 'ready')
        AS steps_held,
    EXISTS (SELECT 1 FROM runs WHERE user_id = :user_id AND status = 'queued') AS runs_held""")
# ready_steps: the user's oldest ready steps of running runs, up to :n (NULL: all), locked; a
# step or run another transaction holds is skipped (its run's key-share lock covers the event
# row that the transition inserts, which references the run).
READY_STEPS: Final = sql.Replanned("""
SELECT s.id FROM steps s JOIN runs r ON r.id = s.run_id
WHERE r.user_id = :user_id AND r.status = 'running' AND s.status = 'ready'
ORDER BY s.id LIMIT :n
FOR UPDATE OF s SKIP LOCKED FOR KEY SHARE OF r SKIP LOCKED""")
# queued_runs: the user's oldest runs waiting to be planned, up to :n (NULL: all), locked.
QUEUED_RUNS: Final = sql.Replanned("""
SELECT id FROM runs WHERE user_id = :user_id AND status = 'queued'
ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED""")
# stale_ready_users: users with a step ready since before :stale in a running run.
STALE_READY_USERS: Final = sql.Replanned("""
SELECT DISTINCT r.user_id FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'ready' AND s.queued_at < :stale AND r.status = 'running'""")


def free_slots(cap: int, in_flight: int) -> int | None:
    """How many more tasks a user with `in_flight` tasks may have sent now under `cap`
    (`AGENTQ_USER_MAX_RUNNING_STEPS`); None when `cap` is 0 (no limit). Never negative: a user
    can be over the cap (replans and syntheses are not held), and then waits."""
    if cap == 0:
        return None
    return max(0, cap - in_flight)


def dispatch(session: Session, user_id: str, *, cap: int) -> list[Send]:
    """Move the user's held work into its free slots (see the module docstring); returns the
    messages to send once the caller has committed: `agentq.execute_step` per step now
    `queued`, `agentq.plan` per run now `planning`. Never commits; never waits for a row."""
    sql.execute(session, DISPATCH_LOCK, {"key": json.dumps(["dispatch", user_id])})
    slots = sql.one(session, USER_SLOTS, {"user_id": user_id})
    free = free_slots(cap, int(slots.in_flight))
    if free == 0:
        return []
    sends = _enqueue_ready(session, user_id, free) if slots.steps_held else []
    if slots.runs_held and (free is None or len(sends) < free):
        sends += _start_planning(session, user_id, None if free is None else free - len(sends))
    return sends


def _enqueue_ready(session: Session, user_id: str, n: int | None) -> list[Send]:
    sends: list[Send] = []
    for (step_id,) in sql.execute(session, READY_STEPS, {"user_id": user_id, "n": n}).fetchall():
        try:
            step_transitions.enqueue_step(session, step_id)
        except IllegalTransition:  # not expected: the row is locked; never send it
            continue
        sends.append((TASK_EXECUTE_STEP, (step_id,)))
    return sends


def _start_planning(session: Session, user_id: str, n: int | None) -> list[Send]:
    sends: list[Send] = []
    for (run_id,) in sql.execute(session, QUEUED_RUNS, {"user_id": user_id, "n": n}).fetchall():
        try:
            run_transitions.start_planning(session, run_id)
        except IllegalTransition:
            continue
        sends.append((TASK_PLAN, (run_id,)))
    return sends


def stale_ready_users(session: Session, *, stale: datetime) -> list[str]:
    """Users with a step `ready` since before `stale` in a running run: a slot may have come
    free with no coordinator decision to fill it (a lost message); the reconciler dispatches."""
    return [user for (user,) in sql.execute(session, STALE_READY_USERS, {"stale": stale})]
