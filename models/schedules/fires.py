"""Firing due schedules: at most one submission per schedule and due time, however many
schedulers run the pass at once (the beat's `agentq.fire_schedules`, `scheduler.tasks`).

One transaction per schedule:
1. claim the schedule whose next due time has come (`CLAIM_DUE_SCHEDULE`: not paused,
   `next_due_at <= now`, `FOR UPDATE SKIP LOCKED`, so a second scheduler takes another one, or
   none);
2. work out what is owed (`models.schedules.due_times.owed`): the due times up to now, of which
   at most the schedule's `catch_up` (the latest) fire and the earlier ones are recorded as one
   `missed` row;
3. for each due time to fire, insert its `ScheduleFire` row (`INSERT_FIRE`, `ON CONFLICT DO
   NOTHING`): the insert is the claim, and a due time whose row exists is never fired again. Then
   - overlap `skip` with the schedule's last run still active: the row says `skipped`;
   - else the run is submitted in the same transaction
     (`models.engine.submissions.insert_and_decide`: the user's quotas, the stack's limits, the
     first decision), in a savepoint: a refusal (a quota, a limit, bad input) rolls back the run
     alone and the row says `refused`, with the error;
4. advance `next_due_at` past now and keep the newest `FIRES_KEPT` rows of the schedule.
The commit makes the fire rows, the runs and the new due time true together (a crash leaves
all or none); the runs' messages are sent after it (`models.engine.queue.send_all`; one the broker
does not take is re-sent by the reconciler, as for any submit).

Due times are judged by the database's clock (`now()`), so schedulers on machines whose clocks
differ still agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import structlog
from pydantic import ValidationError
from sqlmodel import Session

from models import sql
from models.db import session_scope
from models.engine import queue, tracing
from models.engine.dispatch import Send
from models.engine.submissions import insert_and_decide
from models.errors import (
    AgentqError,
    ConfigurationError,
    InvalidInput,
    InvalidPlan,
    UserQuotaExceeded,
)
from models.formats import utc
from models.schedules import due_times, requests
from models.schedules.schedules import DETAIL_MAX_CHARS, Schedule
from models.settings import Settings
from models.states import RUN_TERMINAL

log = structlog.get_logger("agentq.schedules")
FIRES_KEPT: Final = 100  # a schedule's newest fire rows kept; older ones are deleted
PASS_MAX: Final = 1000  # schedule transactions in one pass; the next pass goes on
# What refuses a submission for this due time only; anything else (the database) is raised.
REFUSALS: Final = (
    InvalidInput,
    InvalidPlan,
    UserQuotaExceeded,
    ConfigurationError,
    ValidationError,
)

# claim_due_schedule: the schedule due longest, locked for this transaction; the clock is the
# database's unless the caller gives one (tests).
CLAIM_DUE_SCHEDULE: Final = """
SELECT id, COALESCE(CAST(:now AS timestamptz), now()) AS now FROM schedules
WHERE paused_at IS NULL AND next_due_at <= COALESCE(CAST(:now AS timestamptz), now())
  AND id <> ALL(:tried)
ORDER BY next_due_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
# insert_fire: claim one due time of a schedule; no row back: it was fired before.
INSERT_FIRE: Final = """
INSERT INTO schedule_fires (schedule_id, due_at, outcome, detail, due_times, fired_at)
VALUES (:schedule_id, :due_at, :outcome, :detail, :due_times, now())
ON CONFLICT (schedule_id, due_at) DO NOTHING RETURNING id"""
# record_fire: what became of a claimed due time.
RECORD_FIRE: Final = """
UPDATE schedule_fires SET outcome = :outcome, run_id = :run_id, detail = :detail WHERE id = :id"""
# last_active_run: the schedule's newest run that has not ended, if any (overlap `skip`).
LAST_ACTIVE_RUN: Final = """
SELECT r.id, r.status FROM schedule_fires f JOIN runs r ON r.id = f.run_id
WHERE f.schedule_id = :schedule_id AND r.status <> ALL(:ended)
ORDER BY f.due_at DESC LIMIT 1"""
# advance_schedule: the first due time not yet owed.
ADVANCE_SCHEDULE: Final = """
UPDATE schedules SET next_due_at = :next_due, updated_at = now() WHERE id = :id"""
# prune_fires: keep a schedule's newest FIRES_KEPT fire rows.
PRUNE_FIRES: Final = """
DELETE FROM schedule_fires WHERE schedule_id = :schedule_id AND id NOT IN (
    SELECT id FROM schedule_fires WHERE schedule_id = :schedule_id
    ORDER BY due_at DESC LIMIT :kept)"""


@dataclass(frozen=True)
class Fired:
    """One due time of schedule `schedule_id` and its outcome (`ScheduleFire`'s)."""

    schedule_id: int
    due_at: datetime
    outcome: str
    run_id: int | None = None
    detail: str = ""
    due_times: int = 1


@dataclass
class _Pass:
    fired: list[Fired] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)


def fire_due(*, settings: Settings, now: datetime | None = None) -> list[Fired]:
    """Fire every schedule due at `now` (None: the database's clock), each in its own transaction
    (`fire_one`), at most `PASS_MAX`; what became of each due time. A schedule whose transaction
    fails (the database) is logged and left for the next pass; the others go on."""
    fired: list[Fired] = []
    tried: list[int] = []
    for _ in range(PASS_MAX):
        done = fire_one(settings=settings, now=now, tried=tried)
        if done is None:
            break
        fired += done
    return fired


def fire_one(
    *, settings: Settings, now: datetime | None = None, tried: list[int] | None = None
) -> list[Fired] | None:
    """Claim one due schedule (not in `tried`) and fire what it owes (see the module), then send
    the messages of its runs; None when no schedule is due. A schedule whose transaction fails
    joins `tried` (nothing of it was written) and gives `[]`."""
    tried = tried if tried is not None else []
    claimed: int | None = None
    try:
        with session_scope() as session:
            row = sql.one(session, CLAIM_DUE_SCHEDULE, {"now": now, "tried": tried})
            if row is None:
                return None
            claimed = int(row.id)
            done = _fire(session, session.get_one(Schedule, claimed), row.now, settings)
    except AgentqError as exc:
        if claimed is None:
            raise
        tried.append(claimed)
        log.warning("schedule.fire_failed", schedule_id=claimed, error=str(exc))
        return []
    for fired in done.fired:  # committed
        due_at = fired.due_at.isoformat()
        log.info("schedule.fired", **{**fired.__dict__, "due_at": due_at})
    queue.send_all(done.sends)
    return done.fired


def _fire(session: Session, schedule: Schedule, now: datetime, settings: Settings) -> _Pass:
    owed = due_times.owed(schedule.timing(), schedule.next_due_at, now, catch_up=schedule.catch_up)
    done = _Pass()
    if owed.missed:
        done.fired.append(_record_missed(session, schedule, owed))
    for due in owed.fire:
        with tracing.span("agentq.schedule_fire", schedule_id=schedule.id):
            fired = _fire_due_time(session, schedule, due, settings, done.sends)
        if fired is not None:
            done.fired.append(fired)
    sql.execute(session, ADVANCE_SCHEDULE, {"id": schedule.id, "next_due": owed.next_due})
    prune = {"schedule_id": schedule.id, "kept": FIRES_KEPT}
    sql.execute(session, PRUNE_FIRES, prune)
    return done


def _claim(session: Session, schedule: Schedule, due: datetime, **row: Any) -> Any:
    """Insert the fire row of `due` (the claim); its id, or None when it existed."""
    params = {"schedule_id": schedule.id, "due_at": due, "due_times": 1, **row}
    return sql.scalar(session, INSERT_FIRE, {"outcome": "submitted", "detail": "", **params})


def _record_missed(session: Session, schedule: Schedule, owed: due_times.Owed) -> Fired:
    """One `missed` row for the due times `owed` passes over (its first is the row's)."""
    first = owed.missed_first or owed.next_due
    last = owed.missed_last or first
    when = f"at {utc(first)}" if owed.missed == 1 else f"from {utc(first)} to {utc(last)}"
    detail = (
        f"{owed.missed} due time{'s' if owed.missed > 1 else ''} {when} passed while no "
        f"scheduler fired; at most {schedule.catch_up} (catch_up) fire after a wait"
    )
    row = {"outcome": "missed", "detail": detail, "due_times": owed.missed}
    _claim(session, schedule, first, **row)
    return Fired(schedule.id or 0, first, "missed", None, detail, owed.missed)


def _fire_due_time(
    session: Session,
    schedule: Schedule,
    due: datetime,
    settings: Settings,
    sends: list[Send],
) -> Fired | None:
    """Claim `due` and submit the schedule's run for it, or record why not; None when `due` was
    claimed before (nothing is done)."""
    fire_id = _claim(session, schedule, due)
    if fire_id is None:
        return None
    outcome, run_id, detail = _submit(session, schedule, settings, sends)
    params = {"id": fire_id, "outcome": outcome, "run_id": run_id, "detail": detail}
    sql.execute(session, RECORD_FIRE, params)
    return Fired(schedule.id or 0, due, outcome, run_id, detail)


def _submit(
    session: Session, schedule: Schedule, settings: Settings, sends: list[Send]
) -> tuple[str, int | None, str]:
    """(outcome, run id, detail) of submitting `schedule`'s run now, in a savepoint."""
    if schedule.overlap == "skip":
        params = {"schedule_id": schedule.id, "ended": sorted(RUN_TERMINAL)}
        active = sql.one(session, LAST_ACTIVE_RUN, params)
        if active is not None:
            return "skipped", None, f"run {active.id} of this schedule is {active.status}"
    attempt = session.begin_nested()
    try:
        request = requests.run_request(schedule.user_id, schedule.goal, schedule.request)
        run, new = insert_and_decide(session, request, settings=settings)
    except REFUSALS as exc:
        attempt.rollback()
        return "refused", None, f"{type(exc).__name__}: {exc}"[:DETAIL_MAX_CHARS]
    attempt.commit()
    sends += new
    return "submitted", run.id, ""
