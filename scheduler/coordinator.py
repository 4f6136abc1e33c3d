"""The coordinator's decision: given a run's rows, what happens next.

Pure and deterministic (DESIGN.md, invariant 5): `decide` reads a `RunView` built from rows and
returns one `Decision`; it makes no model calls and touches no database. `scheduler.tasks` builds
the view under a row lock and applies the decision with `models.transitions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from models.states import RUN_TERMINAL

Action = Literal["wait", "plan", "enqueue_step", "replan", "escalate", "synthesize"]


@dataclass(frozen=True)
class StepView:
    """What the coordinator needs of one step of the current plan."""

    id: int
    name: str
    status: str


@dataclass(frozen=True)
class RunView:
    """What the coordinator needs of a run. `steps` are the current plan's, in order."""

    id: int
    status: str
    replans_used: int
    replans_limit: int
    steps: tuple[StepView, ...] = ()
    handled_failures: frozenset[int] = frozenset()
    deadline_passed: bool = False
    tokens_spent: bool = False


@dataclass(frozen=True)
class Decision:
    """The next action for a run; `step_id` names the step it concerns, `reason` says why."""

    action: Action
    reason: str
    step_id: int | None = None
    detail: dict[str, str] = field(default_factory=dict)


def decide(run: RunView) -> Decision:
    """The next action for `run`.

    - terminal, waiting for review, or a planning/replanning/synthesis task in flight: wait;
    - queued: plan;
    - running, planning, replanning or synthesizing past the wall-time deadline: escalate (a task
      still in flight finds the run waiting for review and writes nothing);
    - planning, replanning or synthesizing: wait for the task in flight;
    - running: escalate when the token budget is spent; otherwise walk the plan in
      order past succeeded, cancelled and already-handled failed steps; the first failed step is
      replanned if a replan is left, else escalated; a ready (waiting for a dispatch slot of
      its user, `models.dispatch`), queued or running step means wait; the first pending step
      is enqueued (made ready; dispatch sends it when its user has a free slot); when none is
      left, synthesize.
    """
    if run.status in RUN_TERMINAL or run.status == "waiting_review":
        return Decision("wait", f"run is {run.status}")
    if run.status == "queued":
        return Decision("plan", "run has no plan yet")
    if run.deadline_passed:
        return Decision("escalate", "wall_time_budget_spent")
    if run.status != "running":
        return Decision("wait", f"a {run.status} task is in flight")
    if run.tokens_spent:
        return Decision("escalate", "token_budget_spent")
    return _next_in_plan(run)


def _next_in_plan(run: RunView) -> Decision:
    for step in run.steps:
        if step.status in ("succeeded", "cancelled"):
            continue
        if step.status == "failed":
            if step.id in run.handled_failures:
                continue
            if run.replans_used < run.replans_limit:
                return Decision("replan", f"step {step.name!r} failed", step.id)
            return Decision(
                "escalate",
                "replan_budget_spent",
                step.id,
                {"step": step.name, "replans": f"{run.replans_used}/{run.replans_limit}"},
            )
        if step.status in ("ready", "queued", "running"):
            return Decision("wait", f"step {step.name!r} is {step.status}", step.id)
        return Decision("enqueue_step", f"step {step.name!r} is next", step.id)
    return Decision("synthesize", "every step of the plan is done")
