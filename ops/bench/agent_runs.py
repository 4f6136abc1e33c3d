"""The agent-tasks benchmark's runs: submit a goal as a user does, wait for it, read its rows.

Each goal is submitted by `models.engine.submissions.submit` (the path of `agentq run submit` and
the HTTP API) as its family's user (`Goal.user`: `bench-<family>`), who keeps its memory from goal
to goal and from pass to pass. A run has ended when it is terminal or waits for review with an
open escalation; `observe` then reads its status, every successful call of the goal's effect tool
(tool steps of any plan version, and model steps' calls in the tool journal), its escalations
and its budgets' use.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from sqlmodel import col, select

from models.db import session_scope
from models.engine import submissions
from models.engine.runs import get_run
from models.engine.submissions import RunRequest
from models.engine.transitions import cancel_run
from models.plans.plans import parse_plan
from models.plans.tools import configured_tool_names
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Escalation, Run, RunEvent, Step, ToolJournalEntry
from ops.bench.agent_goals import Goal
from ops.bench.agent_outcomes import Observed
from ops.bench.harness import BenchError

POLL_S: Final = 0.2
MODEL_CALL: Final = "model.call"  # one event per model call attempt (`worker.model_calls.calls`)


def submit(goal: Goal) -> int:
    """Submit `goal` (no submit quotas for this process's submits); the run id. Raises
    `BenchError` if its first messages could not be sent, `InvalidPlan` for a bad plan."""
    plan = None
    if goal.plan is not None:
        plan = parse_plan(dict(goal.plan), tools=configured_tool_names(), facts=goal.facts)
    request = RunRequest(
        user_id=goal.user,
        goal=goal.text,
        facts=dict(goal.facts),
        plan=plan,
        replans=goal.replans,
        success_criteria=list(goal.criteria),
        replan_check=goal.replan_check,
    )
    unlimited = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    submitted = submissions.submit(request, settings=unlimited)
    if not submitted.notified:
        raise BenchError(f"run {submitted.run_id}: the broker did not take its first messages")
    return submitted.run_id


def ended(run_id: int) -> bool:
    """Whether run `run_id` is terminal, or waits for review with an escalation open."""
    with session_scope() as session:
        run = get_run(session, run_id)
        if run.status in RUN_TERMINAL:
            return True
        if run.status != "waiting_review":
            return False
        stmt = select(Escalation.id).where(
            Escalation.run_id == run_id, col(Escalation.status) == "open"
        )
        return session.exec(stmt).first() is not None


def wait_or_cancel(run_id: int, timeout_s: float) -> bool:
    """Poll until run `run_id` has `ended`; True. After `timeout_s`, cancel it (so it uses the
    model no longer) and return False."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ended(run_id):
            return True
        time.sleep(POLL_S)
    with session_scope() as session:
        if get_run(session, run_id).status not in RUN_TERMINAL:
            cancel_run(session, run_id)
    return False


def observe(run_id: int, effect: str, *, timed_out: bool = False) -> Observed:
    """What run `run_id`'s rows say (`Observed`), the effects being the successful calls of
    tool `effect`; status "timeout" when `timed_out`."""
    with session_scope() as session:
        run = get_run(session, run_id)
        steps = list(session.exec(select(Step).where(Step.run_id == run_id).order_by(col(Step.id))))
        journal = session.exec(
            select(ToolJournalEntry)
            .where(col(ToolJournalEntry.step_id).in_([s.id for s in steps]))
            .order_by(col(ToolJournalEntry.id))
        ).all()
        escalations = session.exec(
            select(Escalation).where(Escalation.run_id == run_id).order_by(col(Escalation.id))
        ).all()
        effects = [s.result or {} for s in steps if s.tool == effect and s.status == "succeeded"]
        effects += [j.result or {} for j in journal if j.tool == effect and j.error is None]
        end = _end_of(run, [e.created_at for e in escalations])
        return Observed(
            status="timeout" if timed_out else run.status,
            effects=tuple(effects),
            escalations=tuple(e.reason for e in escalations),
            replans=run.replans_used,
            tokens=run.tokens_used,
            model_calls=len(
                session.exec(
                    select(RunEvent.id).where(
                        RunEvent.run_id == run_id, RunEvent.kind == MODEL_CALL
                    )
                ).all()
            ),
            seconds=(end - run.created_at).total_seconds(),
        )


def _end_of(run: Run, escalated_at: list[datetime]) -> datetime:
    """When run `run` ended: `finished_at`, else its last escalation, else its last update."""
    return run.finished_at or (escalated_at[-1] if escalated_at else run.updated_at)


def results_by_step(run_id: int) -> Mapping[str, Any]:
    """`{step name: {"status", "tool", "result" or "error"}}` of run `run_id`'s steps (the
    newest row of each name): what `--verbose` prints for a goal whose check failed."""
    with session_scope() as session:
        steps = session.exec(select(Step).where(Step.run_id == run_id).order_by(col(Step.id)))
        return {
            s.name: {"status": s.status, "tool": s.tool, "result": s.result or s.error}
            for s in steps
        }
