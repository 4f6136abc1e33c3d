"""Submitting runs, and reading what a step needs to know about its run."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session

from models import sql
from models.approval_policy import parse as parse_policy
from models.approvals import calls as approval_calls
from models.engine import events, quotas, stack_limits, tracing, transitions
from models.errors import InvalidInput, NotFound
from models.patterns import FACT_KEY_PATTERN, WORDS
from models.plans.graph import ancestors
from models.plans.plan_checks import REPLAN_CHECKS
from models.plans.plan_writes import add_plan_version
from models.plans.plans import (
    MAX_CRITERIA,
    MAX_CRITERION_CHARS,
    PlanSpec,
    Splice,
)
from models.plans.tools import configured_tool_names
from models.settings import BUDGET_CEILINGS, Settings, setting_name
from models.storable import storable_problem
from models.tables import PinnedFact, Run, Step, utcnow

USER_ID_MAX_CHARS = 200
GOAL_MAX_CHARS = 20_000  # a goal is an instruction; documents belong in tools or facts
# Pinned facts reach every prompt of the run whole (they are never trimmed: DESIGN.md,
# invariant 3), so a run can pin only as many as a prompt can carry beside its work.
MAX_PINNED_FACTS: Final = 50
# One pinned fact's value: a currency, an identifier, a preference in a sentence or two; a
# document belongs in a tool. Every submit path (CLI, API, demo) is held to it here.
FACT_VALUE_MAX_CHARS: Final = 10_000


def submit_run(
    session: Session,
    *,
    settings: Settings,
    user_id: str,
    goal: str,
    facts: dict[str, str] | None = None,
    plan: PlanSpec | None = None,
    replans: int | None = None,
    tokens: int | None = None,
    cost_usd: float | None = None,
    wall_time_s: float | None = None,
    success_criteria: list[str] | None = None,
    from_goal: dict[str, str] | None = None,
    replan_check: str | None = None,
    approvals: dict[str, Any] | None = None,
) -> Run:
    """Insert a run (status `queued`) with its pinned facts and `success_criteria` (then those
    of `plan`, all the user's: `models.engine.goal_checks`); budgets default from `settings`, as
    does `replan_check` (`AGENTQ_REPLAN_CHECK`: "off" or "model", `models.plans.plan_checks`). The
    quotas, default budgets and ceilings are the stack's (`models.engine.stack_limits.effective`),
    whatever `settings` says.
    `from_goal` names those of `facts` found in the goal (`models.plans.goal_values`), which the
    `run.submitted` event records apart. `approvals` tightens the operator's approval policy for
    this run (`models.approval_policy`: "always" or "when" rules, never "never").

    With an explicit `plan` (already validated) the run starts at plan version 1 (`running`) and
    skips the planning call. Nothing starts it: submitters use `models.engine.submissions.submit`,
    which makes its first decision in the same transaction and sends after the commit. Raises
    `InvalidInput` naming the field, or `UserQuotaExceeded` when the user's quotas
    (`AGENTQ_USER_MAX_ACTIVE_RUNS`, `AGENTQ_USER_SUBMITS_PER_MINUTE`; `models.engine.quotas`) refuse
    it; either way nothing is written. The run keeps the current span's W3C traceparent (or a
    fresh one), which its tasks join (`models.engine.tracing`).
    """
    settings = stack_limits.effective(session, settings)
    _check_submission(goal=goal, user_id=user_id, facts=facts or {})
    criteria = [*(success_criteria or []), *(plan.success_criteria if plan else [])]
    _check_criteria(criteria, facts or {})
    if approvals:
        check_run_approvals(approvals)
    replan_check = replan_check or settings.replan_check
    if replan_check not in REPLAN_CHECKS:
        raise InvalidInput(
            f"replan_check: one of {', '.join(REPLAN_CHECKS)} (got {replan_check!r})"
        )
    asked = {"replans": replans, "tokens": tokens, "cost_usd": cost_usd, "wall_time_s": wall_time_s}
    budgets = run_budgets(settings, asked)
    quotas.check_submit(session, settings=settings, user_id=user_id)
    run = Run(
        user_id=user_id,
        goal=goal,
        provider=settings.provider,
        replans_limit=int(budgets["replans"]),
        tokens_limit=int(budgets["tokens"]),
        cost_limit_usd=budgets["cost_usd"],
        wall_time_limit_s=budgets["wall_time_s"],
        # the operator's: `models.engine.storage`
        step_data_limit_bytes=settings.run_step_data_max_bytes,
        deadline_at=utcnow() + timedelta(seconds=budgets["wall_time_s"]),
        replan_check=replan_check,
        traceparent=tracing.new_traceparent(),
    )
    add_criteria(run, criteria, by="user")
    session.add(run)
    session.flush()
    run_id = run.id or 0
    session.add_all(PinnedFact(run_id=run_id, key=k, value=v) for k, v in (facts or {}).items())
    approval_calls.set_run_policy(session, run_id, approvals or {})
    detail: dict[str, Any] = {"user": user_id, "facts": facts or {}}
    if from_goal:
        detail["pinned_from_goal"] = from_goal
    if approvals:
        detail["approvals"] = approvals
    events.record_event(session, run_id, "run.submitted", **detail)
    if plan is not None:
        add_plan_version(
            session,
            run,
            splice=Splice(),
            new=plan.steps,
            created_by="submitter",
            max_attempts=settings.step_max_attempts,
        )
        transitions.resume_run(session, run_id, expected="queued", plan_version=1)
    session.flush()
    return run


def check_run_approvals(approvals: dict[str, Any]) -> None:
    """Raise `InvalidInput` naming `approvals.<tool>` unless `approvals` is a run's tightening
    (`models.approval_policy.parse`) whose exact tool names are tools this stack offers."""
    parse_policy(approvals, field="approvals", run=True)
    offered = set(configured_tool_names())
    unknown = sorted(k for k in approvals if not any(c in k for c in "*?[") and k not in offered)
    if unknown:
        raise InvalidInput(
            f"approvals.{unknown[0]}: no such tool; offered: {', '.join(sorted(offered))}"
        )


def run_budgets(settings: Settings, asked: dict[str, float | None]) -> dict[str, float]:
    """A new run's budgets, `{"replans", "tokens", "cost_usd", "wall_time_s"}`: each one asked
    for, else its default (`AGENTQ_DEFAULT_*`). Raises `InvalidInput` naming the budget and the
    setting when one asked for is over the operator's ceiling (`AGENTQ_MAX_*`, see
    `models.settings.BUDGET_CEILINGS`)."""
    budgets: dict[str, float] = {}
    for name, default, ceiling in BUDGET_CEILINGS:
        value = asked.get(name)
        most = getattr(settings, ceiling)
        if value is not None and value > most:
            raise InvalidInput(
                f"budgets.{name}: at most {_plain(most)} ({setting_name(ceiling)}); "
                f"got {_plain(value)}"
            )
        budgets[name] = getattr(settings, default) if value is None else value
    return budgets


def _plain(number: float) -> str:
    """`number` as a person writes it: 1000000, not 1e+06; 0.25 as 0.25."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def _check_submission(*, goal: str, user_id: str, facts: dict[str, str]) -> None:
    if len(facts) > MAX_PINNED_FACTS:
        raise InvalidInput(f"facts: at most {MAX_PINNED_FACTS} pinned facts (got {len(facts)})")
    for name, value in (("goal", goal), ("user", user_id), ("facts", facts)):
        if problem := storable_problem(value, name):
            raise InvalidInput(problem)
    if not goal.strip() or len(goal) > GOAL_MAX_CHARS:
        raise InvalidInput(f"goal: must be 1 to {GOAL_MAX_CHARS} characters (got {len(goal)})")
    check_user_id(user_id)
    for key, value in facts.items():
        if not re.match(FACT_KEY_PATTERN, key):
            raise InvalidInput(f"fact {key!r}: the key {WORDS[FACT_KEY_PATTERN]}")
        if not value:
            raise InvalidInput(f"fact {key!r}: the value is empty")
        if len(value) > FACT_VALUE_MAX_CHARS:
            raise InvalidInput(
                f"fact {key!r}: the value is at most {FACT_VALUE_MAX_CHARS} characters "
                f"(got {len(value)}); a document belongs in a tool, not a pinned fact"
            )


def check_user_id(user_id: str) -> None:
    """Raise `InvalidInput` naming `user` unless `user_id` is 1 to `USER_ID_MAX_CHARS` (200, the
    `user_id` columns' length) characters, not all blank: before anything is written for it."""
    if not user_id.strip() or len(user_id) > USER_ID_MAX_CHARS:
        raise InvalidInput(
            f"user: must be 1 to {USER_ID_MAX_CHARS} characters (got {len(user_id)})"
        )


def _check_criteria(criteria: list[str], facts: dict[str, str]) -> None:
    if len(criteria) > MAX_CRITERIA:
        raise InvalidInput(
            f"success_criteria: at most {MAX_CRITERIA}, the plan's included (got {len(criteria)})"
        )
    for i, text in enumerate(criteria):
        if not text.strip() or len(text) > MAX_CRITERION_CHARS:
            raise InvalidInput(
                f"success_criteria[{i}]: must be 1 to {MAX_CRITERION_CHARS} characters "
                f"(got {len(text)})"
            )
        if problem := storable_problem(text, f"success_criteria[{i}]"):
            raise InvalidInput(problem)
        for ref in re.findall(r"\$\{[^}]*\}?", text):  # a typo would make a criterion nobody checks
            fact = re.fullmatch(r"\$\{facts\.([A-Za-z0-9_]+)\}", ref)
            if fact is None:
                raise InvalidInput(
                    f"success_criteria[{i}]: {ref!r} is not a reference a criterion may hold; "
                    "write ${facts.KEY} for a pinned fact's value"
                )
            if (key := fact.group(1)) not in facts:
                pinned = ", ".join(sorted(facts)) or "none"
                raise InvalidInput(
                    f"success_criteria[{i}]: refers to fact {key!r}, which is not pinned "
                    f"(pinned: {pinned})"
                )


def add_criteria(run: Run, texts: list[str], *, by: str) -> None:
    """Append `texts` to `run`'s success criteria as written by `by` ("user", "planner"),
    skipping blank ones and ones it has, up to `MAX_CRITERIA` in all (the user's come first, so
    a planner's are the ones left out)."""
    have = {str(c["text"]).strip().casefold() for c in run.success_criteria}
    added = list(run.success_criteria)
    for text in texts:
        key = text.strip().casefold()
        if key and key not in have and len(added) < MAX_CRITERIA:
            have.add(key)
            added.append({"text": text.strip(), "by": by})
    run.success_criteria = added


def get_run(session: Session, run_id: int) -> Run:
    """The run `run_id`; raises `NotFound`."""
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def pinned_facts(session: Session, run_id: int, *, by_user: bool | None = None) -> dict[str, str]:
    """The run's pinned facts, key -> value: all of them, or with `by_user` only the user's own
    statements (True) or only those a reviewer set (False; `PinnedFact.set_by`)."""
    rows = sql.execute(session, PINNED_BY_AUTHOR, {"run_id": run_id})
    return {k: v for k, v, set_by in rows if by_user is None or (set_by == "user") == by_user}


def pinned_by_author(session: Session, run_id: int) -> tuple[dict[str, str], dict[str, str]]:
    """The run's pinned facts in one read, key -> value: the user's own statements, and those a
    reviewer set (`PinnedFact.set_by`), each in the order they were pinned."""
    mine: dict[str, str] = {}
    theirs: dict[str, str] = {}
    for key, value, set_by in sql.execute(session, PINNED_BY_AUTHOR, {"run_id": run_id}):
        (mine if set_by == "user" else theirs)[key] = value
    return mine, theirs


def results_by_name(steps: list[Step]) -> dict[str, dict[str, Any]]:
    """Results of the succeeded steps, by step name; a later step of the same name wins."""
    return {s.name: s.result or {} for s in steps if s.status == "succeeded"}


# pinned_by_author: the run's pinned facts, oldest first, with who set each.
PINNED_BY_AUTHOR: Final = (
    "SELECT key, value, set_by FROM pinned_facts WHERE run_id = :run_id ORDER BY id"
)
# current_after: what each step of the run's current plan version waits for.
CURRENT_AFTER: Final = """
SELECT v.after FROM plan_versions v JOIN runs r ON r.id = v.run_id AND v.version = r.plan_version
WHERE r.id = :run_id"""
# step_results: the name and result of each succeeded step among :ids.
STEP_RESULTS: Final = "SELECT name, result FROM steps WHERE id = ANY(:ids) AND status = 'succeeded'"


def current_graph(session: Session, run_id: int) -> dict[int, tuple[int, ...]]:
    """Run `run_id`'s current plan version's graph: step id -> the ids it waits for."""
    stored = session.execute(sa.text(CURRENT_AFTER), {"run_id": run_id}).scalar_one_or_none()
    return {int(k): tuple(v) for k, v in (stored or {}).items()}


def upstream_results(
    session: Session,
    run_id: int,
    step_id: int,
    *,
    after: dict[int, tuple[int, ...]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Results of the succeeded steps that step `step_id` waits for, directly or through others,
    by name: what its references and its model call may use (`models.plans.graph.ancestors`).
    `after` is the current version's graph when the caller has read it already."""
    if after is None:
        after = current_graph(session, run_id)
    upstream = sorted(ancestors(after, step_id))
    if not upstream:
        return {}
    rows = session.execute(sa.text(STEP_RESULTS), {"ids": upstream}).all()
    return {name: result or {} for name, result in rows}
