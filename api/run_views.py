"""How the API shows a run (`/api/v1/runs`, `api.runs`; `agentq run ... --json` prints the same):
its listed view, the whole run with previews of large values (`models.engine.previews`), and the
answer to a submit or a fork."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from api.responses import (
    Criterion,
    EscalationOut,
    EventOut,
    ForkedFromOut,
    GoalCheckOut,
    GoalValuesOut,
    PlanVersionOut,
    RunDetail,
    RunOut,
    Spend,
    StepOut,
    SubmittedOut,
)
from models.engine import lineage, previews
from models.engine.goal_checks import criteria_texts
from models.engine.goal_reports import GoalReport, report, report_of
from models.engine.runs import pinned_facts
from models.engine.submissions import Submitted
from models.front import queries
from models.plans.layout import by_wave
from models.plans.plans import dependencies
from models.review import escalations
from models.tables import Escalation, PlanVersion, Run, utcnow


def run_out(run: Run) -> RunOut:
    """The listed view of a run."""
    return RunOut(
        id=run.id or 0,
        user_id=run.user_id,
        goal=run.goal,
        status=run.status,
        plan_version=run.plan_version,
        provider=run.provider,
        error=run.error,
        created_at=run.created_at,
        updated_at=run.updated_at,
        finished_at=run.finished_at,
        spend=Spend(
            replans_used=run.replans_used,
            replans_limit=run.replans_limit,
            tokens_used=run.tokens_used,
            tokens_limit=run.tokens_limit,
            cost_used_usd=run.cost_used_usd,
            cost_limit_usd=run.cost_limit_usd,
            wall_time_limit_s=run.wall_time_limit_s,
            deadline_at=run.deadline_at,
            deferrals=run.deferrals,
            step_data_bytes=run.step_data_bytes,
            step_data_limit_bytes=run.step_data_limit_bytes,
        ),
    )


def escalation_out(esc: Escalation) -> EscalationOut:
    """An escalation with how long it has waited (until its decision), s."""
    out = EscalationOut.model_validate(esc)
    out.waiting_s = escalations.waiting_s(esc, utcnow())
    return out


def plan_version_out(version: PlanVersion) -> PlanVersionOut:
    """A plan version with its graph as stored and its steps by wave (`models.plans.layout`)."""
    waves = by_wave(version.step_ids, dependencies(version))
    return PlanVersionOut.model_validate({**version.model_dump(), "waves": waves})


def step_out(step: previews.StepShown) -> StepOut:
    """A step as the run detail shows it: args and result whole, or previews when large."""
    values = (("args", step.args), ("result", step.result))
    shortened = [name for name, shown in values if shown.shortened]
    return StepOut(
        **step.columns, args=step.args.out(), result=step.result.out(), shortened=shortened
    )


def event_out(event: previews.EventShown) -> EventOut:
    """An event as the run detail shows it: its detail whole, or a preview when large."""
    return EventOut(
        id=event.id,
        step_id=event.step_id,
        at=event.at,
        kind=event.kind,
        detail=event.detail.out(),
        shortened=event.detail.shortened,
    )


def goal_check_out(goal: GoalReport) -> GoalCheckOut:
    """The goal check as the run detail shows it (its words: `models.engine.goal_reports`)."""
    return GoalCheckOut(
        state=goal.state,
        met=goal.met,
        summary=goal.summary,
        headline=goal.headline,
        criteria=list(goal.criteria),
        reason=goal.reason,
        missing=list(goal.missing),
        checked_by=goal.checked_by,
        plan_version=goal.plan_version,
        checked_at=goal.checked_at,
    )


def criteria_out(run: Run, pinned: dict[str, str]) -> list[Criterion]:
    """The run's success criteria as written, each with its pinned values put in (`shown`)."""
    shown = criteria_texts(run, pinned)
    pairs = zip(run.success_criteria, shown, strict=True)
    return [Criterion(text=c["text"], by=c["by"], shown=text) for c, text in pairs]


def run_detail(
    session: Session,
    run: Run,
    *,
    events_before: int | None = None,
    events_limit: int = previews.EVENTS_PAGE_DEFAULT,
    submitted: bool = False,
) -> RunDetail:
    """Everything about `run`: plan versions, steps, a page of events (the newest
    `events_limit` below `events_before`), escalations, pinned facts; large values as previews.
    `submitted`: `run` was submitted in this transaction (the answer to a submit), so it has no
    escalation, relative or goal verdict yet, and those three reads are left out (issue 29: the
    answer's reads cost a submit over the API as much as the submit's own writes)."""
    run_id = run.id or 0
    versions = queries.plan_versions(session, run_id)
    page = previews.events_page(session, run_id, before=events_before, limit=events_limit)
    final = previews.shown(run.final_result)
    escalations = [] if submitted else queries.run_escalations(session, run_id)
    plan_versions = [plan_version_out(v) for v in versions]
    current = next((v.step_ids for v in plan_versions if v.version == run.plan_version), [])
    pinned = pinned_facts(session, run_id)
    kin = lineage.Lineage() if submitted else lineage.read(session, run_id)
    told = report(run, None, pinned=pinned) if submitted else report_of(session, run, pinned)
    return RunDetail(
        **run_out(run).model_dump(),
        pinned_facts=pinned,
        success_criteria=criteria_out(run, pinned),
        goal_check=goal_check_out(told),
        replan_check=run.replan_check,
        final_result=final.out(),
        plan_versions=plan_versions,
        current_step_ids=current,
        steps=[step_out(s) for s in previews.steps_shown(session, run_id)],
        events=[event_out(e) for e in page.events],
        events_next_before=page.older,
        escalations=[escalation_out(e) for e in escalations],
        shortened=["final_result"] if final.shortened else [],
        forked_from=ForkedFromOut(**vars(kin.forked_from)) if kin.forked_from else None,
        forks=kin.forks,
        parent_run_id=kin.parent.run_id if kin.parent else None,
        child_runs=[i for i, _ in kin.children],
    )


def submitted_out(run: RunDetail, submitted: Submitted[Any]) -> SubmittedOut:
    """The answer to a submit (`POST /api/v1/runs`, `agentq run submit --json`): the run as
    `run`, whether its messages were sent, and the values found in its goal."""
    pins = submitted.from_goal
    from_goal = GoalValuesOut(found=pins.found, pinned=pins.pinned, overridden=pins.overridden)
    return SubmittedOut(run=run, notified=submitted.notified, from_goal=from_goal)
