"""The human-review queue: claim an escalation, and decide it.

Reviewers claim with `FOR UPDATE SKIP LOCKED`, so two reviewers never get the same escalation
(DESIGN.md, invariant 6). A decision is one transaction: the escalation moves to `decided` (a
second decision raises `IllegalTransition` and changes nothing), and the run resumes or ends:

- approve: retry the failed step once more (a new plan version with a fresh copy in its place,
  waiting for what it waited for), or re-plan when there was no plan yet, or carry on when no
  step failed; it sets the budgets the reviewer chose, and a spent budget not chosen gets its
  default, spent plus the original limit (`models.engine.budget_grants`, recorded with the
  decision);
- edit: the reviewer's steps replace every step that has not run yet, and the failures of other
  branches not answered yet (they may wait for the steps that succeeded, or still run, by
  naming them in `after`);
- respond: the answer becomes the result of the failed step's name (a `human` step), so the steps
  that refer to it run with it; with no failed step it is pinned as the fact `reviewer_answer`,
  set by the reviewer (`PinnedFact.set_by`), never taken for the user's statement. It is run
  state: it becomes the user's memory only when the reviewer asks (`remember`), as a fact whose
  source is `reviewer:<name>`, written when the run is remembered (`worker.memory.remembering`);
- reject: the run fails with the reviewer's comment.

An `approval_required` escalation's four decisions are on its gated tool call instead
(`models.review.call_decisions`: approve, edit its arguments, reject, or answer in its place).

The caller commits, then sends `agentq.coordinate` for the run.

Every escalation has a deadline (`deadline_at`, opened + `AGENTQ_ESCALATION_TIMEOUT_S`). The
scheduler's beat takes each undecided one whose deadline passed (`next_due`) and applies
`AGENTQ_ESCALATION_DEADLINE_ACTION` once (`pass_deadline`): `reject` rejects it as the reviewer
`deadline`, whoever holds its claim; `wait` leaves it in the queue, marked and announced. A claim
whose reviewer vanished is given back with `release`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlmodel import Session

from models.approvals import calls as approval_calls
from models.approvals.calls import APPROVAL_REQUIRED
from models.engine import budget_grants, stack_limits, storage, transitions
from models.engine.runs import add_criteria, pinned_facts
from models.errors import Conflict, InvalidInput, NotFound
from models.memory.messages import add_message
from models.plans import plan_checks
from models.plans.expectations import loaded
from models.plans.plan_writes import add_answer_step, add_plan_version
from models.plans.plans import (
    ArgsCheck,
    StepSpec,
    current_graph,
    current_steps,
    edit_splice,
    parse_plan,
)
from models.review import answers, call_decisions, claims
from models.review.answers import answer_problem
from models.review.escalations import (
    DEADLINE_ACTIONS,
    DEADLINE_REVIEWER,
    deadline_comment,
    get_escalation,
)
from models.settings import Settings, get_settings
from models.states import STEP_NOT_STARTED
from models.tables import Escalation, Run, Step, utcnow

# Where the commands and the tests have always found them (`models.review.claims`).
claim_next = claims.claim_next
claims_by_reviewer = claims.claims_by_reviewer
release = claims.release


def pass_deadline(
    session: Session, escalation_id: int, *, now: datetime, action: str
) -> Escalation | None:
    """Apply `action` ("reject" or "wait") to an escalation whose deadline is at or before `now`,
    once: the escalation is marked (`deadline_passed_at`) and `escalation.deadline_passed` is
    recorded; with `reject` it is then rejected as `DEADLINE_REVIEWER` (the run fails as a
    reviewer's rejection would) unless its run has already left `waiting_review`. Returns None,
    changing nothing, when it was applied already, is decided, or is not due."""
    if action not in DEADLINE_ACTIONS:
        raise InvalidInput(f"deadline action {action!r}: use one of {', '.join(DEADLINE_ACTIONS)}")
    esc = transitions.pass_escalation_deadline(session, escalation_id, now=now, action=action)
    if esc is None or action != "reject":
        return esc
    if _locked_run(session, esc.run_id).status == "waiting_review":
        reject(
            session,
            escalation_id,
            reviewer=DEADLINE_REVIEWER,
            comment=deadline_comment(esc),
            override_claim=True,
        )
    return esc


def _resume(session: Session, run: Run, version: int) -> None:
    transitions.resume_run(session, run.id or 0, expected="waiting_review", plan_version=version)


def approve(
    session: Session,
    escalation_id: int,
    *,
    reviewer: str,
    max_attempts: int,
    comment: str | None = None,
    token_id: int | None = None,
    budget: dict[str, float] | None = None,
    settings: Settings | None = None,
) -> Run:
    """Decide `approve` (see the module docstring); returns the run. `budget`: the new limits
    the reviewer chose (`models.engine.budget_grants.grants`, under the stack's ceilings over those
    of `settings`, default the process's); `InvalidInput` naming `budget.<name>` changes nothing.
    `token_id`: the API token deciding (None: the CLI); every decision takes it, see
    `transitions.decide_escalation`."""
    asked = get_escalation(session, escalation_id)
    if asked.reason == APPROVAL_REQUIRED:
        call = call_decisions.waiting_call(session, asked)
        return _call_decided(session, asked, call, "approve", reviewer, comment, token_id)
    run = _locked_run(session, asked.run_id)
    limits = stack_limits.effective(session, settings or get_settings())
    granted = budget_grants.grants(session, asked, run, budget or {}, settings=limits, now=utcnow())
    esc = _decide(
        session,
        escalation_id,
        decision="approve",
        reviewer=reviewer,
        comment=comment,
        token_id=token_id,
    )
    budget_grants.apply(session, esc, granted, reviewer=reviewer)
    if run.plan_version == 0:
        transitions.requeue_run(session, esc.run_id)
        return run
    failed = session.get(Step, esc.step_id) if esc.step_id else None
    if failed is None or failed.status != "failed":
        if failed is not None:  # the should-replan check's "no" is overruled: the plan goes on
            plan_checks.overrule(session, esc.run_id, run.plan_version, failed.id or 0)
        _resume(session, run, run.plan_version)
        return run
    retry = StepSpec(
        name=failed.name,
        instruction=failed.instruction,
        kind="model" if failed.kind == "model" else "tool",
        tool=failed.tool,
        args=failed.args,
        tools=failed.tools,
        expect=loaded(failed.expect),
        output=failed.output,
    )
    add_plan_version(
        session,
        run,
        splice=current_graph(session, run, replaced=failed.id),
        new=[retry],
        created_by="reviewer",
        reason=f"approved by {reviewer}: retry {failed.name!r}",
        max_attempts=max_attempts,
    )
    _resume(session, run, run.plan_version + 1)
    return run


def edit(
    session: Session,
    escalation_id: int,
    *,
    reviewer: str,
    plan: Any,
    tools: Collection[str],
    max_attempts: int,
    check_args: ArgsCheck | None = None,
    comment: str | None = None,
    token_id: int | None = None,
    arguments: dict[str, Any] | None = None,
) -> Run:
    """Decide `edit`: `plan` (JSON text or a dict, `{"steps": [...]}`) replaces the steps not yet
    run; the steps that ran (or still run) are kept, and the new steps go in the place of the
    escalation's failed step (`after` may name kept steps). It is validated first (`parse_plan`:
    `tools`, `check_args`, the run's pinned facts, the graph it makes with the kept steps);
    `InvalidPlan` changes nothing. An `approval_required` escalation is edited with `arguments`
    instead, the gated call's new arguments (`models.review.call_decisions.check_edit`)."""
    esc_row = get_escalation(session, escalation_id)
    if esc_row.reason == APPROVAL_REQUIRED:
        if arguments is None:
            raise Conflict(f"escalation {escalation_id} waits on a tool call: edit its arguments")
        call = call_decisions.waiting_call(session, esc_row)
        checked = call_decisions.check_edit(call, arguments)
        return _call_decided(session, esc_row, call, "edit", reviewer, comment, token_id, checked)
    if arguments is not None:
        raise Conflict(f"escalation {escalation_id} waits on no tool call: edit its plan")
    run = _locked_run(session, esc_row.run_id)
    steps = current_steps(session, run)
    splice = edit_splice(session, run, replaced=esc_row.step_id)
    spec = parse_plan(
        plan,
        tools=tools,
        check_args=check_args,
        facts=set(pinned_facts(session, run.id or 0)),
        splice=splice,
    )
    _decide(
        session,
        escalation_id,
        decision="edit",
        reviewer=reviewer,
        comment=comment,
        token_id=token_id,
    )
    for step in steps:
        if step.status in STEP_NOT_STARTED:
            transitions.cancel_step(session, step.id or 0)
    add_plan_version(
        session,
        run,
        splice=splice,
        new=spec.steps,
        created_by="reviewer",
        reason=f"edited by {reviewer}",
        max_attempts=max_attempts,
    )
    add_criteria(run, spec.success_criteria, by=f"reviewer:{reviewer}")  # checked with the rest
    _resume(session, run, run.plan_version + 1)
    return run


def respond(
    session: Session,
    escalation_id: int,
    *,
    reviewer: str,
    answer: dict[str, Any],
    comment: str | None = None,
    token_id: int | None = None,
    remember: bool = False,
) -> Run:
    """Decide `respond` with `answer` (a JSON object) for what the run could not find;
    `remember` asks that the answer become a fact of the run's user (see the module docstring).
    An answer in a step's place must be what the step would have had to return: the fields of
    its `output` and the values its `expect` allows (`models.review.answers.answer_problem`);
    `InvalidInput` names the problem, and nothing is written."""
    asked = get_escalation(session, escalation_id)
    if asked.reason == APPROVAL_REQUIRED:
        call = call_decisions.waiting_call(session, asked)
        call_decisions.check_answer(session, call, answer)
        storage.charge_answer(session, asked.run_id, answer)  # InvalidInput when it does not fit
        return _call_decided(
            session, asked, call, "respond", reviewer, comment, token_id, None, answer
        )
    step = session.get(Step, asked.step_id) if asked.step_id else None
    if step is not None and (problem := answer_problem(step, answer)):
        raise InvalidInput(f"answer: {problem}")
    esc = _decide(
        session,
        escalation_id,
        decision="respond",
        reviewer=reviewer,
        comment=comment,
        answer=answer,
        token_id=token_id,
    )
    esc.remember_answer = remember
    run = _locked_run(session, esc.run_id)
    storage.charge_answer(session, run.id or 0, answer)  # InvalidInput when it does not fit
    failed = session.get(Step, esc.step_id) if esc.step_id else None
    if failed is None:
        answers.pin_answer(session, run.id or 0, answer, set_by=f"reviewer:{reviewer}")
        if run.plan_version == 0:
            transitions.requeue_run(session, esc.run_id)
        else:
            _resume(session, run, run.plan_version)
        return run
    answered = add_answer_step(session, run, name=failed.name, answer=answer)
    add_plan_version(
        session,
        run,
        splice=current_graph(session, run, replaced=failed.id),
        new=[answered],
        created_by="reviewer",
        reason=f"{reviewer} answered for {failed.name!r}",
        max_attempts=failed.max_attempts,
    )
    _resume(session, run, run.plan_version + 1)
    return run


def reject(
    session: Session,
    escalation_id: int,
    *,
    reviewer: str,
    comment: str,
    override_claim: bool = False,
    token_id: int | None = None,
) -> Run:
    """Decide `reject`: the run fails with the comment; steps not yet run are cancelled.
    `override_claim` rejects it even when another reviewer holds the claim (a passed deadline)."""
    if not comment.strip():
        raise InvalidInput("reject: --comment is required and must not be empty")
    asked = get_escalation(session, escalation_id)
    call = call_decisions.call_of(session, asked) if asked.reason == APPROVAL_REQUIRED else None
    if call is not None:  # with no call waiting, the run fails as for any rejection
        return _call_decided(
            session, asked, call, "reject", reviewer, comment, token_id, override=override_claim
        )
    esc = _decide(
        session,
        escalation_id,
        decision="reject",
        reviewer=reviewer,
        comment=comment,
        override_claim=override_claim,
        token_id=token_id,
    )
    run = _locked_run(session, esc.run_id)
    for step in current_steps(session, run):
        if step.status in STEP_NOT_STARTED:
            transitions.cancel_step(session, step.id or 0)
    return transitions.fail_run(session, esc.run_id, error=f"rejected by {reviewer}: {comment}")


def _call_decided(
    session: Session,
    asked: Escalation,
    call: approval_calls.ToolApproval,
    decision: str,
    reviewer: str,
    comment: str | None,
    token_id: int | None,
    arguments: dict[str, Any] | None = None,
    answer: dict[str, Any] | None = None,
    *,
    override: bool = False,
) -> Run:
    """Decide an `approval_required` escalation on its waiting `call`
    (`models.review.call_decisions`: `audit`, `apply`); the run resumes."""
    esc = _decide(
        session,
        asked.id or 0,
        decision=decision,
        reviewer=reviewer,
        comment=comment,
        answer=call_decisions.audit(call, arguments, answer),
        override_claim=override,
        token_id=token_id,
    )
    call_decisions.apply(session, esc, call)
    run = _locked_run(session, esc.run_id)
    _resume(session, run, run.plan_version)
    return run


def _decide(
    session: Session,
    escalation_id: int,
    *,
    decision: str,
    reviewer: str,
    comment: str | None,
    answer: dict[str, Any] | None = None,
    override_claim: bool = False,
    token_id: int | None = None,
) -> Escalation:
    """Decide the escalation and add the reviewer's words to the run's turns."""
    get_escalation(session, escalation_id)  # NotFound before anything else
    esc = transitions.decide_escalation(
        session,
        escalation_id,
        decision=decision,
        reviewer=reviewer,
        comment=comment,
        answer=answer,
        override_claim=override_claim,
        token_id=token_id,
    )
    said = f"Reviewer {reviewer} decided to {decision}"
    said += f" with the answer {json.dumps(answer)}" if answer is not None else ""
    said += f": {comment}" if comment else "."
    user_id = _locked_run(session, esc.run_id).user_id
    add_message(session, run_id=esc.run_id, user_id=user_id, role="user", content=said)
    return esc


def _locked_run(session: Session, run_id: int) -> Run:
    run = transitions.lock_run(session, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run
