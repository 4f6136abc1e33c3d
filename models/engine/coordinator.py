"""The coordinator's decision: given a run's rows, what happens next.

Pure and deterministic (DESIGN.md, invariant 5): `decide` reads a `RunView` built from rows and
returns one `Decision`; it makes no model calls and touches no database. It is applied
(`models.engine.decisions`) by the worker that finishes a step, in the transaction that records the
step's outcome; by a submit, in the transaction that inserts the run (`models.engine.submissions`);
and by the scheduler's coordinator task for everything else (a decided escalation, a plan's or
replan's result, recovery). Each builds the view under the run's row lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from models.states import RUN_TERMINAL

Action = Literal["wait", "plan", "enqueue_steps", "replan", "escalate", "synthesize"]
BUSY = ("ready", "queued", "running", "waiting_child")  # a step that will end without a decision


@dataclass(frozen=True)
class StepView:
    """What the coordinator needs of one step of the current plan: `after` are the ids of the
    steps it waits for (`plan_versions.after`)."""

    id: int
    name: str
    status: str
    after: tuple[int, ...] = ()


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
    # Steps of the current plan after which the should-replan check answered `replan`
    # (`models.plans.plan_checks`).
    replan_verdicts: frozenset[int] = frozenset()
    # An earlier run of the same request that replanned and still missed its goal
    # (`models.engine.repeats`); read only for a goal not met.
    unmet_before: int | None = None
    # What the goal check's deliverable did that a replan in its place would do again ("step
    # submit (submit_report)": `models.engine.effects.effect_of`); read only for a goal not met.
    effect_made: str | None = None


@dataclass(frozen=True)
class Decision:
    """The next action for a run; `step_id` names the step it concerns (for `enqueue_steps`,
    `step_ids` all of them, in plan order), `reason` says why."""

    action: Action
    reason: str
    step_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    step_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GoalVerdict:
    """What a synthesizing run's goal check decided (`models.engine.goal_checks`): `met`, why
    (`reason`, one sentence), what the outcome lacks (`missing`, one line each), and
    `step_id`, the deliverable a replan or a reviewer's edit puts new steps in the place of
    (None when the run delivered nothing). `source` is "rules" (the pinned facts, no model) or
    "model" (the check call); `criteria` are the success criteria it judged, pinned values put
    in (`models.engine.goal_checks.criteria_texts`)."""

    met: bool
    reason: str
    missing: tuple[str, ...] = ()
    step_id: int | None = None
    source: str = "model"
    criteria: tuple[str, ...] = ()


def decide(run: RunView) -> Decision:
    """The next action for `run`.

    - terminal, waiting for review, or a planning/replanning/synthesis task in flight: wait;
    - queued: plan;
    - running, planning, replanning or synthesizing past the wall-time deadline: escalate (a task
      still in flight finds the run waiting for review and writes nothing);
    - planning, replanning or synthesizing: wait for the task in flight;
    - running: escalate when the token budget is spent; otherwise, over the plan graph:
      - a step stopped before a gated tool call (`waiting_approval`) is escalated
        `approval_required`, one at a time (DESIGN.md, invariant 14);
      - the first failed step (in plan order) not handled by a later version is replanned if a
        replan is left, else escalated; branches still running go on and keep their results,
        and the failed step's dependents wait for what the replan puts in its place;
      - a succeeded step after which the should-replan check answered `replan` (issue 12) is
        replanned the same way, the replan taking the place of the steps not started yet;
      - every pending step whose dependencies all succeeded is enqueued, all at once (each is
        made ready; dispatch sends it when its user has a free slot: `models.engine.dispatch`);
      - a step ready, queued, running, or waiting for its child run (`models.engine.
        children`): wait for it;
      - a pending step left that can never start (it waits for a step with no result, and
        nothing is in flight): escalate `plan_blocked`, naming it;
      - nothing left: synthesize.
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
    return _next_in_graph(run)


def decide_unmet(run: RunView, verdict: GoalVerdict) -> Decision:
    """The next action for a synthesizing `run` whose goal check found its goal not met (issue
    12, item 1): past the wall-time deadline, escalate; with a replan left, replan in the place
    of the verdict's deliverable (charged to the replan budget, as a failed step's replan is);
    else escalate `goal_not_met` with the check's reason and what is missing. At once, with the
    replan left unspent (`replan_skipped` says why), when an earlier run of the same request
    replanned and still missed it (`run.unmet_before`), or when the deliverable made an effect
    (`run.effect_made`: a tool not marked read-only ran): a replan in its place would make it
    again, a second report filed for one goal (Gemma 3's goal check, issue 31, judged a filed
    report not met, and the replan filed another). Whether to make it again is a person's call.
    """
    if run.deadline_passed:
        return Decision("escalate", "wall_time_budget_spent", verdict.step_id)
    replan_left = verdict.step_id is not None and run.replans_used < run.replans_limit
    if replan_left and run.unmet_before is None and run.effect_made is None:
        return Decision("replan", f"goal not met: {verdict.reason}", verdict.step_id)
    detail = {
        "reason": verdict.reason,
        "missing": list(verdict.missing),
        "checked_by": verdict.source,
        "replans": f"{run.replans_used}/{run.replans_limit}",
    }
    if replan_left and run.effect_made is not None:
        detail["replan_skipped"] = (
            f"{run.effect_made} already ran: a replan in its place would run it again"
        )
    elif replan_left:
        detail["replan_skipped"] = (
            f"run {run.unmet_before} made the same request, replanned and still missed its goal"
        )
    return Decision("escalate", "goal_not_met", verdict.step_id, detail)


def _next_in_graph(run: RunView) -> Decision:
    stopped = next((s for s in run.steps if s.status == "waiting_approval"), None)
    if stopped is not None:  # before anything else: its call waits for a person (issue 30)
        return Decision("escalate", "approval_required", stopped.id, {"step": stopped.name})
    failed = [s for s in run.steps if s.status == "failed" and s.id not in run.handled_failures]
    if failed:
        step = failed[0]
        if run.replans_used < run.replans_limit:
            return Decision("replan", f"step {step.name!r} failed", step.id)
        return Decision(
            "escalate",
            "replan_budget_spent",
            step.id,
            {"step": step.name, "replans": f"{run.replans_used}/{run.replans_limit}"},
        )
    doubted = next((s for s in run.steps if s.id in run.replan_verdicts), None)
    if doubted is not None:
        if run.replans_used < run.replans_limit:
            why = f"the check after step {doubted.name!r} found the rest of the plan pointless"
            return Decision("replan", why, doubted.id)
        return Decision(
            "escalate",
            "replan_budget_spent",
            doubted.id,
            {"replan_check": "replan", "replans": f"{run.replans_used}/{run.replans_limit}"},
        )
    succeeded = {s.id for s in run.steps if s.status == "succeeded"}
    ready = [s for s in run.steps if s.status == "pending" and succeeded.issuperset(s.after)]
    if ready:
        names = ", ".join(repr(s.name) for s in ready)
        return Decision(
            "enqueue_steps", f"{names} can start", ready[0].id, step_ids=tuple(s.id for s in ready)
        )
    busy = next((s for s in run.steps if s.status in BUSY), None)
    if busy is not None:
        return Decision("wait", f"step {busy.name!r} is {busy.status}", busy.id)
    blocked = next((s for s in run.steps if s.status == "pending"), None)
    if blocked is not None:
        return Decision("escalate", "plan_blocked", blocked.id, {"step": blocked.name})
    return Decision("synthesize", "every step of the plan is done")
