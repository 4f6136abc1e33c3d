"""A step of kind `run` in the worker (`models.engine.children` has the whole story): its attempt
resolves the child's facts (`ChildRunNeeded`), and its end submits the child run and
moves the step to `waiting_child`, in the transaction of `worker.execution.steps.finish`."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sqlmodel import Session

from models.engine import child_runs, leases, step_transitions
from models.engine.child_runs import ChildRunRefused
from models.engine.dispatch import Send
from models.settings import get_settings
from models.tables import Run, Step, utcnow
from worker.execution.attempts import Outcome


class ChildRunNeeded(Exception):
    """A step of kind `run` resolved its child's `facts` (its args' references put in): its
    child run is submitted with the attempt's end (`start_child`)."""

    def __init__(self, facts: dict[str, Any]) -> None:
        super().__init__("child run")
        self.child = {"facts": facts}


def start_child(session: Session, step: Step, outcome: Outcome) -> Outcome:
    """Submit the step's child run and move the step to `waiting_child`, in the step's end
    transaction (`models.engine.child_runs.start`); a child refused fails the step with why.
    The child's first messages ride on the outcome returned (`child_sends`)."""
    child = outcome.child or {}
    facts = {
        k: v if isinstance(v, str) else json.dumps(v) for k, v in child.get("facts", {}).items()
    }
    parent = session.get(Run, step.run_id)
    assert parent is not None  # locked by `finish`
    try:
        child_id, sends = child_runs.start(
            session, parent, step, facts=facts, settings=get_settings()
        )
    except ChildRunRefused as refused:
        leases.end_attempt(session, step, to="failed", now=utcnow(), error=str(refused))
        return Outcome("failed", error=str(refused))
    step_transitions.await_child(session, step.id or 0, attempt=step.attempt, child_run_id=child_id)
    return replace(outcome, child={**child, "sends": sends})


def child_sends(outcome: Outcome) -> list[Send]:
    """The first messages of the child run an `awaiting_child` outcome started (none else)."""
    return list(outcome.child.get("sends", [])) if outcome.child is not None else []
