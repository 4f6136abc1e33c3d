"""Notifications: the outbox rows a state change writes for the webhooks told of it (issue 15).

`enqueue` is called by the transitions that cause an event, in their transaction
(`models.engine.run_transitions.escalate`: `escalation.opened`; `models.engine.transitions.
pass_escalation_deadline`: `escalation.deadline_passed`; `models.engine.guards.move_run` into a
terminal status: `run.finished`), so a delivery exists exactly when its change committed: never lost
with a crash after the commit, never sent for a change that rolled back (the transactional outbox,
Richardson, "Microservices Patterns", 2018, ch. 3). The webhook sender sends them later
(`scheduler.webhooks`), outside any transaction (DESIGN.md, invariant 11).

A delivery keeps the event's `snapshot` (ids, statuses, times), never user text: the body
quotes the run's goal and error, which an attempt reads from the run's row when it is claimed
(`body`), so `forget --runs`, which erases them there, leaves no copy in the outbox.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.settings import get_settings
from models.tables import Escalation, Run, utcnow

EVENTS: Final = ("escalation.opened", "escalation.deadline_passed", "run.finished")
GOAL_MAX_CHARS: Final = 500  # of the goal a body quotes: enough to recognise the run
ESCALATION_KEYS: Final = ("id", "reason", "step_id", "status", "deadline_at")  # in a body

# For the subscriptions told of this event of this user's runs, one pending delivery each.
ENQUEUE: Final = """
INSERT INTO webhook_deliveries
    (subscription_id, event, run_id, snapshot, status, attempts, created_at, updated_at,
     next_attempt_at, give_up_at)
SELECT s.id, CAST(:event AS varchar), :run_id, CAST(:snapshot AS jsonb), 'pending', 0, :now,
    :now, :now, :give_up_at
FROM webhook_subscriptions s
WHERE s.enabled AND CAST(:event AS varchar) = ANY(s.events)
    AND (s.user_id IS NULL OR s.user_id = :user_id)
"""


def enqueue(session: Session, event: str, run: Run, *, escalation: Escalation | None = None) -> int:
    """Write one `pending` delivery of `event` about `run` (and `escalation`) for every enabled
    subscription to it that covers the run's user, in the caller's transaction; returns how many.

    Each is due now and retried until `AGENTQ_WEBHOOK_RETRY_WINDOW_S` after now. Raises
    `ValueError` for an event not in `EVENTS`.
    """
    if event not in EVENTS:
        raise ValueError(f"event: {event!r} is not one of {', '.join(EVENTS)}")
    now = utcnow()
    params = {
        "event": event,
        "run_id": run.id,
        "user_id": run.user_id,
        "snapshot": json.dumps(snapshot(event, run, escalation, now=now)),
        "now": now,
        "give_up_at": now + timedelta(seconds=get_settings().webhook_retry_window_s),
    }
    return int(sql.execute(session, ENQUEUE, params).rowcount)


def snapshot(
    event: str, run: Run, escalation: Escalation | None, *, now: datetime
) -> dict[str, Any]:
    """What a delivery keeps of the event: `{"event", "occurred_at", "run": {"id", "user_id",
    "status", "finished_at"}, "escalation": {"id", "reason", "step_id", "status",
    "deadline_at"} or null}`, times ISO 8601 in UTC: ids, codes and times, no user text."""
    return {
        "event": event,
        "occurred_at": now.isoformat(),
        "run": {
            "id": run.id,
            "user_id": run.user_id,
            "status": run.status,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        },
        "escalation": None if escalation is None else _escalation(escalation),
    }


def body(snapshot: dict[str, Any], *, goal: str | None, error: str | None) -> str:
    """The JSON an attempt sends: the `snapshot` with the run's `goal` (cut to
    `GOAL_MAX_CHARS`) and `error` as the run's row holds them now (`[erased]` after `forget
    --runs`; null for a run no longer there): `{"event", "occurred_at", "run": {"id",
    "user_id", "status", "goal", "error", "finished_at"}, "escalation"}`."""
    run = snapshot["run"]
    payload = {
        "event": snapshot["event"],
        "occurred_at": snapshot["occurred_at"],
        "run": {
            "id": run["id"],
            "user_id": run["user_id"],
            "status": run["status"],
            "goal": None if goal is None else goal[:GOAL_MAX_CHARS],
            "error": error,
            "finished_at": run["finished_at"],
        },
        "escalation": _in_order(snapshot["escalation"]),
    }
    return json.dumps(payload, separators=(",", ":"))


def _in_order(escalation: dict[str, Any] | None) -> dict[str, Any] | None:
    # jsonb keeps keys in its own order; the body keeps the documented one
    return None if escalation is None else {key: escalation.get(key) for key in ESCALATION_KEYS}


def _escalation(esc: Escalation) -> dict[str, Any]:
    deadline = esc.deadline_at.isoformat() if esc.deadline_at else None
    return {
        "id": esc.id,
        "reason": esc.reason,
        "step_id": esc.step_id,
        "status": esc.status,
        "deadline_at": deadline,
    }
