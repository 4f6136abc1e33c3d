"""Approval gates in a step: a call the policy gates stops before its tool runs, and after a
reviewer's decision runs once, as decided (issue 30; DESIGN.md, invariant 14).

`gate` applies the rule (`models.approval_policy.required`: the operator's policy
`AGENTQ_TOOL_APPROVALS`, the tool's annotations, the run's tightening) to a call about to run. A
gated call with no decision yet raises `ApprovalRequired`: the step stops, its attempt ends
without failing (`worker.execution.steps`), and the run escalates `approval_required`. Once a
reviewer decided, the step's next attempt finds the decision (`decision`):

- approved or edited: the tool runs with the decided arguments and the call is journaled
  (`models.engine.tool_journal`) in its own transaction right after it returns, so an attempt
  that runs again (a crash before the step's end was committed, a duplicate message) answers
  from the journal instead of calling the tool again; the tool gets `ctx.idempotency_key`, the
  same on every attempt, for what happens between its effect and the journal's write;
- rejected: a tool step fails with the reviewer's reason (`ToolError`); a model step's model gets
  it as the tool's answer (`worker.execution.tool_use`);
- answered: the reviewer's answer is the call's result; the tool never runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from models import approval_policy as policy
from models.approvals import calls
from models.approvals.calls import ApprovalRequired, ToolApproval
from models.db import session_scope
from models.engine import tool_journal
from models.errors import ToolArgumentsError, ToolError
from models.plans.tools import Tool, ToolContext, argument_problems
from models.settings import get_settings
from worker.model_calls.calls import waits_out_outages
from worker.model_calls.providers import Completion, ToolCall


def gate(
    tool: Tool, arguments: Mapping[str, Any], run_rules: dict[str, Any] | None
) -> policy.Gate | None:
    """Why a call of `tool` with `arguments` needs approval, or None (the rule:
    `models.approval_policy.required`); `run_rules` is the run's tightening as the claim read
    it (`models.engine.leases.Claim.approvals`)."""
    run = policy.parse(run_rules, field="approvals", run=True) if run_rules else None
    return policy.required(
        tool.name,
        arguments,
        operator=get_settings().approval_policy,
        run=run,
        annotations=tool.annotations,
    )


@waits_out_outages
def decision(step_id: int, key: str) -> ToolApproval | None:
    """The reviewer's decision on call `key` of step `step_id`; None while there is none."""
    with session_scope() as session:
        return calls.decided(session, step_id, key)


def rejection(decided: ToolApproval) -> str:
    """What a rejected call answers: `rejected by <reviewer>: <reason>`."""
    return f"rejected by {decided.decided_by}: {decided.comment}"


def tool_step_call(
    ctx: ToolContext, tool: Tool, arguments: dict[str, Any], run_rules: dict[str, Any] | None
) -> dict[str, Any]:
    """Call `tool` for a tool step, through its gate: ungated, as `Tool.invoke` does; gated,
    as decided (the module docstring). Raises `ApprovalRequired` while no decision is made,
    `ToolError` for a rejection, and what `Tool.invoke` raises."""
    why = gate(tool, arguments, run_rules)
    if why is None:
        return tool.invoke(ctx, arguments)
    if problems := argument_problems(tool.name, arguments):  # a call that could not run waits not
        raise ToolArgumentsError("; ".join(problems))
    key = tool_journal.call_key(tool.name, tool_journal.arguments_digest(arguments), occurrence=1)
    decided = decision(ctx.step_id, key)
    if decided is None:
        raise ApprovalRequired(tool.name, key, arguments, why)
    if decided.status == "rejected":
        raise ToolError(rejection(decided))
    if decided.status == "answered":
        return dict(decided.answer or {})
    used = dict(decided.arguments_used or arguments)
    recorded = journaled(ctx.step_id, key)
    if recorded is not None:  # it ran in an earlier attempt: never twice
        if recorded.error is not None:
            raise ToolError(recorded.error)
        return dict(recorded.result or {})
    result = tool.invoke(ctx, used)
    journal(ctx, key, tool.name, used, tool_journal.Recorded(result, None, ctx.attempt))
    return result


@waits_out_outages
def journaled(step_id: int, key: str) -> tool_journal.Recorded | None:
    """The journaled call `key` of step `step_id`, or None when no attempt has run it."""
    with session_scope() as session:
        return tool_journal.find(session, step_id=step_id, key=key)


@waits_out_outages  # the tool ran: its call is journaled once Postgres is back, not run again
def journal(
    ctx: ToolContext,
    key: str,
    tool: str,
    arguments: Mapping[str, Any],
    recorded: tool_journal.Recorded,
) -> None:
    """Journal call `key` of step `ctx.step_id` as `recorded`; raises the refusal
    (`BudgetExhausted`) of a call over its run's or user's step data, once it is journaled
    without its data (`models.engine.tool_journal.record`)."""
    with session_scope() as session:
        refused = tool_journal.record(
            session,
            step_id=ctx.step_id,
            key=key,
            tool=tool,
            arguments=arguments,
            recorded=recorded,
        )
    if refused is not None:
        raise refused


@dataclass(frozen=True)
class Loop:
    """Where a model step's tool-calling loop stopped for a gated call, to go on from after the
    decision: the exchange after the prompt before the model's pending answer, that answer
    (`pending`: its text and tool calls, whose calls are answered on resuming), the calls that ran
    (`ran`), the call keys counted before the pending answer (`seen`), the invalid answers so far
    and the number of the model call that gave the pending answer."""

    exchange: list[dict[str, Any]]
    pending: dict[str, Any]
    ran: list[dict[str, Any]]
    seen: dict[str, int]
    invalid: int
    number: int

    def completion(self) -> Completion:
        """The pending answer as the loop handles it (its usage was charged when it came)."""
        calls_ = tuple(ToolCall(**c) for c in self.pending["tool_calls"])
        text, model = str(self.pending["text"]), str(self.pending["model"])
        return Completion(text, model, 0, 0, "tool_calls", bool(self.pending["offline"]), calls_)

    @classmethod
    def stopped_at(
        cls,
        completion: Completion,
        *,
        exchange: list[dict[str, Any]],
        ran: list[dict[str, Any]],
        seen: dict[str, int],
        invalid: int,
        number: int,
    ) -> dict[str, Any]:
        """The loop's state as JSON (the `resume` of the gated call's row)."""
        pending = {
            "text": completion.text,
            "model": completion.model,
            "offline": completion.offline,
            "tool_calls": [c.__dict__ for c in completion.tool_calls],
        }
        return asdict(cls(list(exchange), pending, list(ran), seen, invalid, number))


@waits_out_outages
def resumed(step_id: int) -> Loop | None:
    """The loop state a decided call of step `step_id` kept (the newest), or None: the step's
    loop starts from its prompt."""
    with session_scope() as session:
        row = calls.resumable(session, step_id)
        return None if row is None or row.resume is None else Loop(**row.resume)
