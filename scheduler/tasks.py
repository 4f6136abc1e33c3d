"""The scheduler's tasks: apply the coordinator's decisions, reconcile lost messages, apply
passed review deadlines, and fire due schedules.

Messages are sent only after the transaction that made them true has committed; if the process dies
in between, the reconciler finds the row waiting and sends again (DESIGN.md, invariants 1 and 2).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlmodel import Session

from models.db import retry_dropped, session_scope
from models.engine import decisions, dispatch, held, queue, reconciliation, step_transitions
from models.engine.coordinator import Decision
from models.engine.queue import (
    QUEUE_STEPS,
    TASK_COORDINATE,
    TASK_EXECUTE_STEP,
    TASK_PLAN,
    TASK_REMEMBER_RUN,
    TASK_REPLAN,
    TASK_SYNTHESIZE,
)
from models.errors import AgentqError, IllegalTransition
from models.memory import facts
from models.operations import retention
from models.plans.plans import current_steps, handled_failures
from models.review import escalations, reviews
from models.schedules import fires
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Escalation, Run, utcnow

log = structlog.get_logger("agentq.scheduler")
PHASES = ("planning", "replanning", "synthesizing")  # the run statuses whose task claims them
HELD_SLACK_S = 2.0  # beat's ticks drift; a held step due between two of them is sent by one
MEMORY_RESEND_WITHIN_S = 86400.0  # after a broker restart, ended runs this recent get memory
MEMORY_RESENDS = 1000  # memory tasks one tick asks for again at most
DEADLINES_PER_BEAT = 100  # escalations one beat applies at most; the rest wait for the next


@retry_dropped
def coordinate(run_id: int) -> Decision | None:
    """Decide and apply the next action for run `run_id` (`models.engine.decisions`), then dispatch
    its user's held work (`models.engine.dispatch`: this decision, or the task that asked for it,
    may have freed a slot); returns the decision taken.

    The run row is locked for the transaction, so two coordinators of one run take turns, and
    several coordinator processes may consume the coordinator queue at once.
    """
    with session_scope() as session:
        advanced = decisions.advance(session, run_id, cap=get_settings().user_max_running_steps)
    if advanced is None:
        log.warning("coordinate.no_such_run", run_id=run_id)
        return None
    decision, applied = advanced
    for task, args in applied.sends:
        queue.send(task, *args)
    log.info("coordinate", run_id=run_id, action=decision.action, reason=decision.reason)
    return decision


def reconcile() -> dict[str, int]:
    """Re-send what the broker may have lost; returns counts by kind of repair.

    - a running step whose lease expired goes back to queued (or to failed when its attempts are
      spent) and is sent again;
    - a step queued for longer than `queued_stale_s` whose message may be lost (`lost_at_most`:
      not one of the messages still waiting in the broker) is sent again (the claim is guarded, so a
      duplicate is harmless);
    - a run whose planning, replanning or synthesis no task holds and has been quiet for
      `phase_stale_s`, or whose holder's lease expired (`models.engine.phases`), or that is running
      with nothing in flight, gets its task (or a coordinate) sent again; a phase held under a
      live lease is never re-sent, however long its model call takes;
    - a step or a deferred phase held in Postgres (a delay too long for the broker:
      `models.engine.held`) that came due since the previous tick is sent, once;
    - an ended run whose memory task has not ended `phase_stale_s` after it ended (its
      `agentq.remember_run` may be lost) is asked for it again, once, and one whose memory task
      died holding its extraction's claim, once that claim's lease has run out;
    - a user with a step ready for longer than `queued_stale_s` is dispatched
    (`models.engine.dispatch`: a slot may have come free with no coordinator decision to fill it),
    one transaction each.

    When the broker lost its memory (`models.engine.queue.broker_restarted`: a Redis broker that
    came back empty, or the first reconcile after `agentq up`), every message it held is gone, so
    nothing waiting is waited for (issue 11: steps sat 60-130 s after Redis restarted empty):
    every due queued step is sent again, however recently queued and with no `lost_at_most` limit,
    and every quiet run is nudged, whenever it was last updated. A phase under a live lease and a
    running step under a live lease are still left alone: a worker holds them, not the broker.
    Counted as `broker_restarted` (1 or 0).
    """
    settings = get_settings()
    counts = {"leases_expired": 0, "steps_resent": 0, "runs_nudged": 0, "dispatched": 0}
    sends: list[tuple[str, tuple[int, ...]]] = []
    # Both asked before the transaction: no network call in one (DESIGN.md, invariant 11).
    waiting = queue.depth(QUEUE_STEPS)
    restarted = queue.broker_restarted() is True
    counts["broker_restarted"] = int(restarted)
    if restarted:
        log.warning("reconcile.broker_restarted", queued_steps_waiting_in_broker=waiting)
    with session_scope() as session:
        now = utcnow()
        for step_id in reconciliation.expired_leases(session, now=now):
            try:
                expired = step_transitions.expire_lease(session, step_id)
            except IllegalTransition:
                continue
            counts["leases_expired"] += 1
            if expired.status == "queued":
                sends.append((TASK_EXECUTE_STEP, (step_id,)))
            else:
                sends.append((TASK_COORDINATE, (expired.run_id,)))
        stale = now - timedelta(seconds=settings.queued_stale_s)
        lost_since, phase_since = stale, now - timedelta(seconds=settings.phase_stale_s)
        if restarted:  # every message the broker held is gone: none is waited for
            lost_since, phase_since, waiting = now, now, None
        for step_id in _lost_steps(session, lost_since, now, waiting):
            if not reconciliation.resend_step(session, step_id, stale=lost_since, now=now):
                continue
            counts["steps_resent"] += 1
            sends.append((TASK_EXECUTE_STEP, (step_id,)))
        nudges = _stale_runs(session, phase_since, now)
        counts["runs_nudged"] = len(nudges)
        sends.extend(nudges)
        due = [send for send in _due_held(session, now) if send not in sends]
        counts["held_sent"] = len(due)
        sends.extend(due)
        unremembered = _unremembered(session, phase_since, now, everything=restarted)
        counts["memory_resent"] = len(unremembered)
        sends.extend((TASK_REMEMBER_RUN, (run_id,)) for run_id in unremembered)
        held_users = dispatch.stale_ready_users(session, stale=stale)
    for task, args in sends:
        queue.send(task, *args)
    for user_id in held_users:
        counts["dispatched"] += _dispatch_user(user_id, settings.user_max_running_steps)
    if any(counts.values()):
        log.info("reconcile", **counts)
    return counts


def lost_at_most(due: int, waiting: int | None) -> int | None:
    """How many of the `due` queued steps (status `queued`, due by now) may have lost their
    message, when the broker's `steps` queue holds `waiting` messages (None: unknown, so any).

    The queue is FIFO and every due queued step was sent once at least, so the `waiting`
    messages are the newest steps' (or other tasks' of that queue: an over-count, which only
    delays a re-send until the queue drains); the `due - waiting` oldest steps' messages were
    taken, or lost. A long queue is thereby told from a lost message (issue 11, item 5: re-sending
    every step queued longer than `AGENTQ_QUEUED_STALE_S` sent 1,657 duplicates for 1,000 steps
    behind a backlog). The oldest include the ones a worker has taken and not yet claimed (its
    prefetch): one duplicate each per period at most, which the claim ignores."""
    return None if waiting is None else max(0, due - waiting)


def _lost_steps(session: Session, stale: datetime, now: datetime, waiting: int | None) -> list[int]:
    """Ids of the queued steps to send again: stale (queued before `stale`) and among the oldest
    `lost_at_most` of those due, oldest first, `waiting` messages being in the broker."""
    limit = lost_at_most(reconciliation.due_queued(session, now=now), waiting)
    return reconciliation.lost_steps(session, stale=stale, limit=limit)


def _dispatch_user(user_id: str, cap: int) -> int:
    """Dispatch one user's held work in a transaction of its own, then send; how many sent."""
    with session_scope() as session:
        sends = dispatch.dispatch(session, user_id, cap=cap)
    for task, args in sends:
        queue.send(task, *args)
    return len(sends)


def expire_memory() -> int:
    """Close the validity of expired facts (`AGENTQ_FACT_TTL_S`); returns how many."""
    with session_scope() as session:
        closed = facts.expire(session)
    if closed:
        log.info("memory.expired", facts=closed)
    return closed


PURGE_BEAT_MAX_S = 30.0  # one beat's purge; the rest waits for the next, so a coordinator is freed


def fire_schedules(*, now: datetime | None = None) -> int:
    """Fire the due schedules (`models.schedules.fires.fire_due`); how many due times had a run
    submitted."""
    fired = fires.fire_due(settings=get_settings(), now=now)
    return sum(f.outcome == "submitted" for f in fired)


def purge_runs(*, now: datetime | None = None) -> dict[str, int]:
    """Purge the runs that ended more than `AGENTQ_RUN_RETENTION_DAYS` ago
    (`models.operations.retention.purge`, `AGENTQ_RUN_RETENTION_BATCH` runs per transaction, for at
    most `PURGE_BEAT_MAX_S`); returns the rows deleted per table, empty when retention is off."""
    settings = get_settings()
    before = retention.cutoff(settings.run_retention_days, now or utcnow())
    if before is None:
        return {}
    counts = retention.purge(
        before=before, batch=settings.run_retention_batch, time_limit_s=PURGE_BEAT_MAX_S
    )
    if counts["runs"]:
        log.info("runs.purged", before=before.isoformat(), **counts)
    return counts


def apply_escalation_deadlines(
    *, now: datetime | None = None, action: str | None = None, limit: int = DEADLINES_PER_BEAT
) -> dict[str, int]:
    """Apply `action` to each undecided escalation whose deadline is at or before `now`, once;
    returns counts: `rejected`, `waiting` (marked and announced, still in the queue) and
    `failed` (an error, logged; tried again next beat).

    `now` defaults to the clock and `action` to `AGENTQ_ESCALATION_DEADLINE_ACTION` ("reject"
    or "wait"). Each escalation is its own transaction, taken `FOR UPDATE SKIP LOCKED`
    (`models.review.escalations.next_due`) and marked in the same guarded UPDATE that checks it
    was not marked yet, so two beats, or a beat and a reviewer, never apply a deadline twice.
    Either way a warning is logged: with `wait`, that and the timeline event are the notice.
    """
    now = now or utcnow()
    action = action or get_settings().escalation_deadline_action
    counts = {"rejected": 0, "waiting": 0, "failed": 0}
    tried: list[int] = []
    for _ in range(limit):
        before = len(tried)
        try:
            passed = _pass_next_deadline(now, action, tried)
        except AgentqError as exc:
            counts["failed"] += 1
            failed_id = tried[-1] if len(tried) > before else None
            log.error("escalation.deadline_failed", escalation_id=failed_id, error=str(exc))
            if failed_id is None:  # the query itself failed: the next beat tries again
                break
            continue
        if passed is None:
            break
        outcome = "rejected" if passed.status == "decided" else "waiting"
        counts[outcome] += 1
        if outcome == "rejected":
            queue.follow_up(passed.run_id, "failed")  # the run's episode is written
        log.warning(
            "escalation.deadline_passed",
            escalation_id=passed.id,
            run_id=passed.run_id,
            reason=passed.reason,
            deadline_at=passed.deadline_at.isoformat() if passed.deadline_at else None,
            claimed_by=passed.claimed_by,
            action=action,
            outcome=outcome,
        )
    return counts


def _pass_next_deadline(now: datetime, action: str, tried: list[int]) -> Escalation | None:
    """Apply the deadline of the next due escalation not in `tried` (its id is added), in one
    transaction; None when none is due."""
    with session_scope() as session:
        esc = escalations.next_due(session, now=now, skip=tried)
        if esc is None:
            return None
        tried.append(esc.id or 0)
        reviews.pass_deadline(session, esc.id or 0, now=now, action=action)
    return esc


_PHASE_TASKS = {"planning": TASK_PLAN, "synthesizing": TASK_SYNTHESIZE}


def _stale_runs(
    session: Session, stale: datetime, now: datetime
) -> list[tuple[str, tuple[int, ...]]]:
    """What to send for runs quiet since `stale`: a phase no attempt holds (its message may be
    lost), or one whose holder's lease expired (it was killed) whenever it started; never a phase
    whose holder's lease is live (`models.engine.phases`: the model call may still be under way)."""
    sends: list[tuple[str, tuple[int, ...]]] = []
    for run in reconciliation.nudge_quiet_runs(
        session, statuses=("queued", "running", *PHASES), phases=PHASES, stale=stale, now=now
    ):
        sends.extend(_task_for(session, run))
    return sends


def _unremembered(
    session: Session, stale: datetime, now: datetime, *, everything: bool
) -> list[int]:
    """Ended runs whose memory task has not ended, to ask for it again (`models.engine.held`): each
    once, at the tick after it has been ended for `phase_stale_s` (a memory queue that is
    merely behind is not sent more), or after its extraction's holder let the lease run out (it
    was killed); after the broker restarted empty, every such run of the last
    `MEMORY_RESEND_WITHIN_S`."""
    tick = timedelta(seconds=get_settings().reconcile_interval_s + HELD_SLACK_S)
    since = now - timedelta(seconds=MEMORY_RESEND_WITHIN_S)
    if not everything:
        since = stale - tick
    return held.unremembered_runs(
        session,
        statuses=tuple(RUN_TERMINAL),
        since=since,
        before=stale,
        expired_since=now - tick,
        now=now,
        limit=MEMORY_RESENDS,
    )


def _task_for(session: Session, run: Run) -> list[tuple[str, tuple[int, ...]]]:
    """The task that moves `run` on from its status: its phase's, or a coordinate."""
    run_id = run.id or 0
    if run.status in _PHASE_TASKS:
        return [(_PHASE_TASKS[run.status], (run_id,))]
    if run.status == "replanning":
        failed = _last_failed_step(session, run)
        return [] if failed is None else [(TASK_REPLAN, (run_id, failed))]
    return [(TASK_COORDINATE, (run_id,))]


def _due_held(session: Session, now: datetime) -> list[tuple[str, tuple[int, ...]]]:
    """The work held in Postgres that came due since the previous tick (`models.engine.held`): each
    step, and each deferred phase, sent once; the window has `HELD_SLACK_S` to spare, as beat
    is not exact (a second send is turned away by the claim)."""
    settings = get_settings()
    since = now - timedelta(seconds=settings.reconcile_interval_s + HELD_SLACK_S)
    steps = held.due_held_steps(
        session, since=since, now=now, visibility_s=settings.visibility_timeout_s
    )
    sends: list[tuple[str, tuple[int, ...]]] = [(TASK_EXECUTE_STEP, (s,)) for s in steps]
    for run_id, _ in held.due_deferred_runs(session, statuses=PHASES, since=since, now=now):
        run = session.get(Run, run_id)
        if run is not None:
            sends.extend(_task_for(session, run))
    return sends


def _last_failed_step(session: Session, run: Run) -> int | None:
    handled = handled_failures(session, run.id or 0)
    for step in reversed(current_steps(session, run)):
        if step.status == "failed" and step.id not in handled:
            return step.id
    return None
