"""A reviewer's decision on a gated tool call (`approval_required`), and what it does.

`models.review.reviews` routes the four decisions of an `approval_required` escalation here, in
its transaction, after recording the decision on the escalation: the call's row takes the decision
(`models.approvals.calls`), the step goes back to `ready` (no failure counted) and the run resumes.
The step's next attempt reads the decision before the call:

- approve: the call runs with the arguments it asked for, once (journaled);
- edit: it runs with the reviewer's arguments instead, checked against the tool's schema here
  (`InvalidInput` names the field; nothing is written); the escalation's answer keeps the
  arguments and their diff (the audit trail);
- reject (a reason is required): a tool step fails with it, and the coordinator replans or
  escalates as for any failure; a model step gets it as the tool's answer and goes on;
- respond: the answer (a JSON object) is the call's result and the tool never runs; in a tool
  step it must be what the step would have returned (`models.review.answers.answer_problem`).
"""

from __future__ import annotations

from typing import Any, Final

from sqlmodel import Session

from models.approvals import calls
from models.approvals.calls import APPROVAL_REQUIRED
from models.engine import events, step_transitions
from models.errors import Conflict, InvalidInput, ToolError
from models.plans.references import has_reference
from models.plans.step_data import check_step_data
from models.plans.tools import argument_problems, enabled_tool
from models.review.answers import answer_problem
from models.settings import get_settings
from models.tables import Escalation, Step

STATUS_OF: Final = {
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
    "respond": "answered",
}


def call_of(session: Session, esc: Escalation) -> calls.ToolApproval | None:
    """The gated call escalation `esc` waits on, locked; None when none waits (the escalation
    is not `approval_required`, or its call was decided)."""
    return calls.waiting(session, esc.step_id) if esc.step_id else None


def waiting_call(session: Session, esc: Escalation) -> calls.ToolApproval:
    """`call_of`, or `Conflict` when no call of `esc` waits."""
    row = call_of(session, esc)
    if row is None:
        raise Conflict(f"escalation {esc.id}: no tool call of it waits for a decision")
    return row


def check_edit(call: calls.ToolApproval, arguments: Any) -> dict[str, Any]:
    """A reviewer's new `arguments` for `call`, checked as the tool checks a call (its schema,
    finite numbers, the step-data cap) and free of `${...}` references (an edit gives values);
    raises `InvalidInput` naming `arguments` and the problem."""
    if not isinstance(arguments, dict):
        raise InvalidInput(f"arguments: a JSON object of {call.tool!r}'s arguments")
    if any(has_reference(value) for value in arguments.values()):
        raise InvalidInput("arguments: give values, not ${...} references")
    problems = argument_problems(call.tool, arguments)
    if problems:
        raise InvalidInput(f"arguments: {'; '.join(problems)}")
    try:
        what = f"the arguments of tool {call.tool!r}"
        check_step_data(arguments, what=what, max_bytes=get_settings().step_data_max_bytes)
    except ToolError as exc:
        raise InvalidInput(f"arguments: {exc}") from None
    return arguments


def check_answer(session: Session, call: calls.ToolApproval, answer: dict[str, Any]) -> None:
    """Raise `InvalidInput` unless `answer` may stand for `call`: in a tool step, what the step
    would have returned (its `output`, its `expect`); in a model step, any JSON object."""
    step = session.get(Step, call.step_id)
    if step is not None and step.kind != "model" and (problem := answer_problem(step, answer)):
        raise InvalidInput(f"answer: {problem}")


def audit(
    call: calls.ToolApproval, arguments: dict[str, Any] | None, answer: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What the escalation keeps of a decision on `call` (its `answer` column): an edit's
    `{"arguments", "diff"}`, a response's answer, else None."""
    if arguments is not None:
        return {"arguments": arguments, "diff": diff(call.arguments, arguments)}
    return answer


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What an edit changed: `{"changed": {name: [before, after]}, "added": {name: value},
    "removed": [name, ...]}`, each key only when not empty."""
    changed = {
        k: [before[k], after[k]] for k in before.keys() & after.keys() if before[k] != after[k]
    }
    added = {k: after[k] for k in after.keys() - before.keys()}
    removed = sorted(before.keys() - after.keys())
    shown = {"changed": changed, "added": added, "removed": removed}
    return {key: value for key, value in shown.items() if value}


def apply(session: Session, esc: Escalation, call: calls.ToolApproval) -> None:
    """Write `esc`'s decision, just recorded on it (`decision`, `decided_by`, `comment`, and in
    `answer` what `audit` keeps), on `call`, the call it waits on; move the step back to `ready`
    and record `approval.decided` (decision, tool, and for an edit the diff). The caller has
    checked an edit's arguments (`check_edit`) or an answer (`check_answer`) and resumes the
    run."""
    decision, kept = esc.decision or "", esc.answer or {}
    # the escalation's own decision time: how its page finds this call again (`call_view`)
    call.status, call.decided_by, call.decided_at = (
        STATUS_OF[decision],
        esc.decided_by,
        esc.decided_at,
    )
    call.comment = esc.comment
    if decision in ("approve", "edit"):
        call.arguments_used = kept["arguments"] if decision == "edit" else call.arguments
    if decision == "respond":
        call.answer = kept
    session.add(call)
    step_transitions.approval_decided(session, call.step_id)
    events.record_event(
        session,
        esc.run_id,
        "approval.decided",
        step_id=call.step_id,
        decision=decision,
        tool=call.tool,
        reviewer=esc.decided_by,
        **({"diff": kept["diff"]} if decision == "edit" else {}),
    )


def call_view(session: Session, esc: Escalation) -> dict[str, Any] | None:
    """What a reviewer judges a gated call by (issue 30, item 4): `{"tool", "description",
    "arguments", "why", "status"}`, and once decided `"arguments_used"` (and `"diff"` for an
    edit), `"answer"`, `"comment"`, `"decided_by"`; None for any other escalation."""
    if esc.reason != APPROVAL_REQUIRED or not esc.step_id:
        return None
    if esc.decided_at is None:
        row = calls.waiting(session, esc.step_id, lock=False)
    else:
        row = calls.decided_at(session, esc.step_id, esc.decided_at)
    if row is None:
        return None
    try:
        description = enabled_tool(row.tool).description
    except ToolError:
        description = "(this tool is no longer offered)"
    view: dict[str, Any] = {
        "tool": row.tool,
        "description": description,
        "arguments": row.arguments,
        "why": row.why,
        "status": row.status,
    }
    if row.status != calls.STOPPED:
        view |= {"decided_by": row.decided_by, "comment": row.comment, "answer": row.answer}
        view["arguments_used"] = row.arguments_used
        if row.status == "edited":
            view["diff"] = diff(row.arguments, row.arguments_used or {})
    return view
