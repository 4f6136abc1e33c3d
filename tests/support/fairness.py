"""Reading dispatch from rows: when each of a user's tasks held a slot, and how many at once.

A step holds a slot of its user from its `step.queued` event to its `step.succeeded` or
`step.failed` event; a step that the worker of its last dependency claimed itself (no
`step.queued`: `models.engine.decisions`) from its `step.running` event, the slot its dependency's
end passed on in the same transaction; a run's plan task from `run.planning` to the run's next
status event (`models.engine.dispatch`). Each event's time is taken in the transaction that makes it
true, before its commit, and a dispatcher counts a slot free only after the commit that freed
it, so an interval that starts in a slot another freed starts after that one ended: counting
overlaps of these intervals is what the dispatcher counted, whatever the wall-clock durations.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from models.tables import Run, RunEvent, Step

STEP_ENDS = ("step.succeeded", "step.failed", "step.cancelled")
PLAN_ENDS = ("run.running", "run.waiting_review", "run.cancelled")


@dataclass(frozen=True)
class Held:
    """One task's time in a slot: a step (`step_id`) or a run's plan task (`step_id` None)."""

    run_id: int
    step_id: int | None
    start: datetime
    end: datetime


def most_at_once(held: Iterable[Held]) -> int:
    """The largest number of `held` intervals open at one instant (an end at the same instant
    as a start closes first)."""
    edges = sorted([(h.end, -1) for h in held] + [(h.start, 1) for h in held])
    now = most = 0
    for _, delta in edges:
        now += delta
        most = max(most, now)
    return most


def user_events(session: Session, user_id: str) -> list[RunEvent]:
    """Every event of the user's runs, in id order."""
    runs = select(Run.id).where(Run.user_id == user_id)
    stmt = select(RunEvent).where(col(RunEvent.run_id).in_(runs)).order_by(col(RunEvent.id))
    return list(session.exec(stmt))


def held_slots(events: list[RunEvent], *, plans: bool = True) -> list[Held]:
    """The slots the tasks of these events held (steps, and plan tasks unless not `plans`);
    a task not yet ended is left out."""
    held: list[Held] = []
    opened: dict[tuple[int, int | None], datetime] = {}
    for event in events:
        key = (event.run_id, event.step_id if event.kind.startswith("step.") else None)
        if event.kind in ("step.queued", "step.running") or (
            plans and event.kind == "run.planning"
        ):
            opened.setdefault(key, event.at)
        elif event.kind in (*STEP_ENDS, *PLAN_ENDS) and (start := opened.pop(key, None)):
            held.append(Held(key[0], key[1], start, event.at))
    return held


def first_event(events: list[RunEvent], kind: str, step_id: int) -> datetime:
    """When step `step_id` first had an event of `kind`; fails when it never did."""
    found = [e.at for e in events if e.kind == kind and e.step_id == step_id]
    assert found, f"step {step_id}: no {kind} event"
    return found[0]


def user_steps(session: Session, user_id: str) -> list[Step]:
    """Every step of the user's runs, in id order."""
    runs = select(Run.id).where(Run.user_id == user_id)
    return list(session.exec(select(Step).where(col(Step.run_id).in_(runs)).order_by(col(Step.id))))


def sleeps(n: int, seconds: float) -> list[dict[str, object]]:
    """A plan's steps: `n` `sleep` tool steps of `seconds` each, one after another by name."""
    return [
        {"name": f"s{i}", "kind": "tool", "tool": "sleep", "args": {"seconds": seconds}}
        for i in range(n)
    ]


def new_user(prefix: str) -> str:
    """A user id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    """Poll `check` every 0.05 s until it holds; fails naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)
