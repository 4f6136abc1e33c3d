"""A model step that may call tools: the function-calling loop, bounded, every call checked.

A model step whose plan lists `tools` offers them to the model as OpenAI function tools. When the
model answers with tool calls, each call's arguments are checked before anything runs: they must
be JSON (the model writes them as text, and may write anything), a JSON object with finite numbers
only (Python's `json` reads `NaN` and `Infinity`, which JSON has not), and fit the tool's schema
(`Tool.invoke` checks both before calling). A call that fails a check is
recorded as a `step.tool_call.invalid` event with the raw text, the tool does not run, and the
model gets the error as the call's answer and is asked again. Valid calls run and their results
(shortened to `AGENTQ_TOOL_RESULT_MAX_TOKENS`) go back to the model, until it answers in text.
A tool's failure goes back to the model as its error: a crash (`ToolCrashed`) says only the tool
and the exception's type, a result over `AGENTQ_STEP_DATA_MAX_BYTES` says the cap, so neither a
host path nor an oversized value reaches the model, the events or the step's result. Only tools
that `AGENTQ_TOOL_MODULES` or an MCP server of `AGENTQ_MCP_SERVERS` offers are offered
(`enabled_tool`).

Every call whose tool ran is journaled (`models.engine.tool_journal`) right after it returns, in a
transaction of its own. The loop's reads and writes wait out a database outage
(`worker.model_calls.calls.waits_out_outages`) rather than interrupt the step: the answers so far
are paid for, and a tool that ran is journaled once Postgres is back, not run again. A step that
runs its loop again (deferred by a 429, retried, claimed again after a lost lease) asks the model
from the start; when the model asks for a call the journal holds (same tool, same arguments, same
occurrence), the recorded result or error is answered instead of running the tool again, and a
`step.tool_call.replayed` event says so (DESIGN.md, invariant 9; issue 11, item 3).

A run that ends meanwhile (cancelled) stops the loop before its next model call.

A step that declares `output` (`models.plans.step_outputs`) is asked for JSON of its fields; its
text answer, once no tool is called, is checked and re-asked in the same loop
(`worker.execution.step_outputs`), and only the fields of a fitting answer become the step's result.

Bounds: at most `AGENTQ_MODEL_STEP_MAX_CALLS` model calls in one step (each charged to the run's
budget by `worker.model_calls.calls.call_model`), and at most `AGENTQ_TOOL_CALL_MAX_INVALID` answers
with an invalid call re-asked: one more raises `InvalidToolCalls`, and the run escalates with the
raw calls attached. The conversation grows with each exchange; when it no longer fits the prompt
budget the step raises `ContextOverflow` rather than send a request the server would refuse. A
request the server refuses as too long all the same is rebuilt smaller once, the exchange kept
after it (`worker.model_calls.refits`); a second refusal raises `ContextOverflow` too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from models.approvals.calls import ApprovalRequired, ToolApproval
from models.db import session_scope
from models.engine import events, tool_journal
from models.engine.runs import get_run
from models.errors import (
    ContextOverflow,
    InvalidToolCalls,
    RetryableToolError,
    ToolArgumentsError,
    ToolError,
)
from models.memory.tokens import count_message_tokens, count_tokens
from models.plans.step_data import json_bytes
from models.plans.tools import Tool, ToolContext, argument_problems, enabled_tool
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Step
from worker.execution import approval_gates
from worker.execution.step_outputs import OutputAnswers
from worker.memory.context import Piece, shorten
from worker.model_calls.calls import waits_out_outages
from worker.model_calls.prompts import step_prompt
from worker.model_calls.providers import Completion, ToolCall
from worker.model_calls.refits import Fitted

RAW_ARGUMENTS_MAX_CHARS = 4000  # of a call's raw arguments kept in an event or an escalation


@dataclass(frozen=True)
class Answered:
    """What became of one tool call: `content` is the `tool` message the model gets back.

    `invalid` is why the call was refused before its tool ran (None: the call was valid, and
    `result` or `error` says how the tool did); `replayed_from` is the step's attempt whose
    journaled run of the call this answer reuses (None: the tool ran now, or did not run).
    """

    call: ToolCall
    content: str
    invalid: str | None = None
    arguments: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    replayed_from: int | None = None


def model_step(
    step: Step,
    results: dict[str, dict[str, Any]],
    ctx: ToolContext,
    approvals: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run model step `step`: its instruction with the earlier `results`, calling its tools.

    Returns `{"text", "model", "offline"}`, plus `"tool_calls": [{"tool", "arguments", "result"
    | "error"}]` when tools ran; for a step that declares `output`, the answer's fields alone
    (`worker.execution.step_outputs`: a refused answer is re-asked; the tool calls are in the step's
    events). Raises `InvalidToolCalls` (the model's calls stayed invalid), `InvalidStepOutput`
    (its answers stayed unfit for its `output`),
    `ToolError` (no text answer within `AGENTQ_MODEL_STEP_MAX_CALLS` calls), `ToolNotEnabled`
    (a listed tool is not enabled here), `RetryableToolError` from a tool, `ContextOverflow`,
    `DatabaseUnavailable` (the journal could not be read or written), `StepDataBudgetSpent` or
    `UserStepDataSpent` (a call's arguments and result did not fit its run's or user's step
    data: `models.engine.tool_journal.record`), and what `call_model` raises. A call the tool
    journal holds for this step is answered from it (`journaled_call`). A call the approval
    policy gates (`approvals`: the run's tightening) raises `ApprovalRequired` with the loop's
    state; after the decision the loop goes on from there (`worker.execution.approval_gates`).
    """
    tools = {name: enabled_tool(name) for name in step.tools}
    prompt = step_prompt(
        step.instruction, results, [t.describe() for t in tools.values()], step.output
    )
    fitted = Fitted.build(step.run_id, prompt)
    settings = get_settings()
    # A step that stopped for an approval did so as a deferral (`step_transitions.await_approval`):
    # one that never deferred has no loop to go on with, and reads none.
    loop = approval_gates.resumed(step.id or 0) if tools and step.deferrals else None
    # the tool calls and their answers, after the request
    exchange: list[dict[str, Any]] = loop.exchange if loop else []
    ran: list[dict[str, Any]] = loop.ran if loop else []
    keys = tool_journal.CallKeys(loop.seen if loop else None)
    invalid_answers = loop.invalid if loop else 0
    pending = loop.completion() if loop else None
    outputs = OutputAnswers(step) if step.output else None
    for number in range(loop.number if loop else 1, settings.model_step_max_calls + 1):
        if pending is not None:  # the answer whose gated call was decided: answer its calls
            completion, pending = pending, None
        else:
            if number > 1:  # after a round of tool calls: is the run still on, does it fit?
                _check_run_goes_on(step)
                messages = fitted.with_tail(exchange).messages
                if count_message_tokens(messages, settings.model) > fitted.budget():
                    raise ContextOverflow(
                        f"step {step.name!r}: the tool-calling exchange outgrew the prompt "
                        f"budget after {number - 1} model calls"
                    )
            completion = fitted.call(exchange, step_id=step.id)
        if not completion.tool_calls and outputs is not None:
            fields = outputs.take(completion, exchange)  # None: refused, and asked again
            if fields is not None:
                return fields
            continue
        if not completion.tool_calls:
            answer = {"text": completion.text, "model": completion.model}
            return {**answer, "offline": completion.offline, **({"tool_calls": ran} if ran else {})}
        seen = keys.snapshot()
        try:
            answered = [
                journaled_call(
                    replace(ctx, call_number=len(ran) + i + 1), tools, call, keys, approvals
                )
                for i, call in enumerate(completion.tool_calls)
            ]
        except ApprovalRequired as stopped:  # the loop goes on from here after the decision
            stopped.resume = approval_gates.Loop.stopped_at(
                completion,
                exchange=exchange,
                ran=ran,
                seen=seen,
                invalid=invalid_answers,
                number=number,
            )
            raise
        _record(step, number, answered)
        exchange += [assistant_message(completion), *(tool_message(a) for a in answered)]
        ran += [_ran(a) for a in answered if a.invalid is None]
        if any(a.invalid for a in answered):
            invalid_answers += 1
            if invalid_answers > settings.tool_call_max_invalid:
                raise InvalidToolCalls(_invalid_message(step, answered), raw=_raw(answered))
    raise ToolError(
        f"step {step.name!r}: no answer after {settings.model_step_max_calls} model calls "
        "(AGENTQ_MODEL_STEP_MAX_CALLS); the model kept calling tools"
    )


@waits_out_outages
def _check_run_goes_on(step: Step) -> None:
    """Raise `ToolError` when the step's run has ended meanwhile (cancelled, failed): no more model
    or tool calls are made for it, so a cancel stops a tool-calling loop at its next turn."""
    with session_scope() as session:
        status = get_run(session, step.run_id).status
    if status in RUN_TERMINAL:
        raise ToolError(f"step {step.name!r} stopped: its run is {status}")


def journaled_call(
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: ToolCall,
    keys: tool_journal.CallKeys,
    approvals: dict[str, Any] | None = None,
) -> Answered:
    """`answer_call`, journaled: a valid call that step `ctx.step_id` already ran (its key from
    `keys`) is answered with the recorded result or error and its tool does not run; else the
    tool runs and, once it returned, the call is journaled in its own transaction. Raises what
    `answer_call` does, and `DatabaseUnavailable` when the journal is out of reach."""
    checked = _checked(tools, call)
    if isinstance(checked, Answered):
        return checked
    tool, arguments = checked
    key = keys.next(call.name, arguments)
    recorded = approval_gates.journaled(ctx.step_id, key)
    if recorded is not None:
        return _replayed(call, arguments, recorded)
    why = approval_gates.gate(tool, arguments, approvals)
    if why is None:
        answered = _invoked(ctx, tool, call, arguments)
    elif problems := argument_problems(tool.name, arguments):  # re-asked, never sent for approval
        return _refused(call, "; ".join(problems))
    elif (decided := approval_gates.decision(ctx.step_id, key)) is None:
        raise ApprovalRequired(tool.name, key, arguments, why)
    else:
        answered = _as_decided(ctx, tool, call, arguments, decided)
    if answered.invalid is None:
        recorded = tool_journal.Recorded(answered.result, answered.error, ctx.attempt)
        approval_gates.journal(ctx, key, call.name, answered.arguments or {}, recorded)
    return answered


def _as_decided(
    ctx: ToolContext, tool: Tool, call: ToolCall, arguments: dict[str, Any], decided: ToolApproval
) -> Answered:
    """A gated call as its reviewer decided: rejected (the model is told why), answered (the
    reviewer's answer is the result) or run with the approved or edited arguments."""
    if decided.status == "rejected":
        why = approval_gates.rejection(decided)
        return Answered(call, f"error: {why}", arguments=arguments, error=why)
    if decided.status == "answered":
        answer = dict(decided.answer or {})
        return Answered(
            call, json.dumps(answer, ensure_ascii=False), arguments=arguments, result=answer
        )
    return _invoked(ctx, tool, call, dict(decided.arguments_used or arguments))


def answer_call(ctx: ToolContext, tools: dict[str, Tool], call: ToolCall) -> Answered:
    """Check `call` and, when it is valid, run its tool; never runs a tool on arguments that are
    not a JSON object fitting its schema. Raises only `RetryableToolError` and the soft time
    limit; every other tool error (a crash, a result over the cap) is answered to the model."""
    checked = _checked(tools, call)
    if isinstance(checked, Answered):
        return checked
    tool, arguments = checked
    return _invoked(ctx, tool, call, arguments)


def _checked(tools: dict[str, Tool], call: ToolCall) -> tuple[Tool, dict[str, Any]] | Answered:
    """The call's tool and its arguments as a JSON object, or the refusal of a call that has
    neither (the schema is checked by `Tool.invoke`)."""
    tool = tools.get(call.name)
    if tool is None:
        offered = ", ".join(sorted(tools)) or "none"
        return _refused(call, f"tool {call.name!r} is not offered to this step; offered: {offered}")
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return _refused(call, f"arguments of {call.name!r} are not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return _refused(call, f"arguments of {call.name!r} must be a JSON object, not {kind}")
    return tool, arguments


def _invoked(ctx: ToolContext, tool: Tool, call: ToolCall, arguments: dict[str, Any]) -> Answered:
    try:
        result = tool.invoke(ctx, arguments)
    except ToolArgumentsError as exc:
        return _refused(call, str(exc))
    except RetryableToolError:
        raise
    except ToolError as exc:
        return Answered(call, f"error: {exc}", arguments=arguments, error=str(exc))
    content = json.dumps(result, ensure_ascii=False)
    return Answered(call, content, arguments=arguments, result=result)


def _replayed(
    call: ToolCall, arguments: dict[str, Any], recorded: tool_journal.Recorded
) -> Answered:
    """The answer the journaled run of `call` gave, word for word."""
    if recorded.error is not None:
        content = f"error: {recorded.error}"
    else:
        content = json.dumps(recorded.result, ensure_ascii=False)
    return Answered(
        call,
        content,
        arguments=arguments,
        result=recorded.result,
        error=recorded.error,
        replayed_from=recorded.attempt,
    )


def _refused(call: ToolCall, why: str) -> Answered:
    content = f"invalid call, the tool did not run: {why}. Call it again correctly."
    return Answered(call, content, invalid=why)


def assistant_message(completion: Completion) -> dict[str, Any]:
    """The model's tool-calling answer as the assistant message that goes back in the exchange."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in completion.tool_calls
    ]
    return {"role": "assistant", "content": completion.text or None, "tool_calls": calls}


def tool_message(answered: Answered) -> dict[str, Any]:
    """The `tool` message answering one call, shortened to `AGENTQ_TOOL_RESULT_MAX_TOKENS`."""
    model = get_settings().model
    piece = Piece("tool", answered.content, count_tokens(answered.content, model))
    short = shorten(
        piece,
        max_tokens=get_settings().tool_result_max_tokens,
        where="the step's step.tool_call event",
        count=lambda text: count_tokens(text, model),
    )
    return {"role": "tool", "tool_call_id": answered.call.id, "content": short.text}


def _ran(answered: Answered) -> dict[str, Any]:
    outcome = {"error": answered.error} if answered.error else {"result": answered.result}
    return {"tool": answered.call.name, "arguments": answered.arguments, **outcome}


@waits_out_outages
def _record(step: Step, number: int, answered: list[Answered]) -> None:
    with session_scope() as session:
        for a in answered:
            if a.invalid is not None:
                events.record_event(
                    session,
                    step.run_id,
                    "step.tool_call.invalid",
                    step_id=step.id,
                    model_call=number,
                    tool=a.call.name,
                    raw_arguments=a.call.arguments[:RAW_ARGUMENTS_MAX_CHARS],
                    error=a.invalid,
                )
            else:  # a replayed call was answered from the journal: its tool did not run now
                replayed = {} if a.replayed_from is None else {"ran_in_attempt": a.replayed_from}
                events.record_event(
                    session,
                    step.run_id,
                    "step.tool_call.replayed" if replayed else "step.tool_call",
                    step_id=step.id,
                    model_call=number,
                    **replayed,
                    **_within_cap(_ran(a)),
                )


def _within_cap(ran: dict[str, Any]) -> dict[str, Any]:
    """A call's event detail: its arguments and result are each within the cap (`Tool.invoke`),
    together they may not be; then the result gives way to its size (the step's result keeps
    it, or fails the step over the cap)."""
    cap = get_settings().step_data_max_bytes
    if "result" not in ran or json_bytes(ran) <= cap:
        return ran
    return {**ran, "result": {"shortened": True, "bytes": json_bytes(ran["result"])}}


def _invalid_message(step: Step, answered: list[Answered]) -> str:
    why = "; ".join(a.invalid for a in answered if a.invalid)
    limit = get_settings().tool_call_max_invalid
    return (
        f"step {step.name!r}: the model's tool calls were still invalid after {limit} re-asks "
        f"(AGENTQ_TOOL_CALL_MAX_INVALID): {why}"
    )


def _raw(answered: list[Answered]) -> str:
    calls = [{"tool": a.call.name, "arguments": a.call.arguments} for a in answered if a.invalid]
    return json.dumps(calls, ensure_ascii=False)[:RAW_ARGUMENTS_MAX_CHARS]
