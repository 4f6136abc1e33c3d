"""What each kind of model call asks: its instructions, its task text, and its payload.

A `Prompt` holds only what is specific to one call; `worker.memory.remembering.request_for` adds
everything rebuilt from rows (run state, pinned facts, the ledger, recalled memory, summary, recent
turns) under the token budget (DESIGN.md, invariant 3). The payload travels with the request so the
offline provider answers from the same data the model would see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from models.patterns import STEP_NAME_PATTERN
from models.plans.expectations import expect_schema
from models.plans.plans import (
    MAX_CRITERIA,
    MAX_CRITERION_CHARS,
    MAX_INSTRUCTION_CHARS,
    MAX_PLAN_STEPS,
    MAX_STEP_TOOLS,
)
from models.plans.step_outputs import describe, output_schema, output_spec_schema
from models.tables import Step
from worker.model_calls.providers import Purpose

PLAN_INSTRUCTIONS: Final = (
    "You are the planner of an agent. Break the user's goal into a short plan of steps. Each "
    "step is either a call of one of the listed tools (kind 'tool', with 'tool' and 'args') or a "
    "model instruction (kind 'model'). Steps pass data with references in args: "
    "'${steps.NAME.KEY}' is KEY of the result of the step NAME, '${facts.KEY}' is a "
    "pinned fact. A step may name in 'after' the steps it waits for: steps that wait for "
    "nothing unfinished run at the same time; 'after': [] starts at once; left out, a step "
    "waits for the step before it. A step may refer only to steps it waits for, directly or "
    "through other steps. A model step may list in 'tools' the tools it can call itself, when "
    "their arguments depend on what it finds. A model step may declare in 'output' the fields "
    'of its answer and their types (string, number, integer, boolean), e.g. {"total": '
    '"number", "currency": "string"}: its answer is held to them and later steps refer '
    "to each as '${steps.NAME.FIELD}'; declare it whenever a later step needs an exact value "
    "from a model step. Pinned facts are the user's own statements: "
    "never change them. Past runs "
    "recalled below tell you what failed before; avoid repeating a known failure. Give "
    "'success_criteria': one short sentence each for what must hold once the plan is done, "
    "naming exact values ('${facts.KEY}' for a pinned fact); they are checked against what the "
    "steps deliver. Answer with JSON only, matching the schema."
)
REPLAN_NOTE: Final = (
    "A step of the current plan failed. Answer with only the new steps to put in its place: the "
    "first waits for what the failed step waited for (unless it names 'after' itself), and the "
    "steps that waited for the failed step wait for the new steps no other new step waits for. "
    "They refer to the failed step by its name, so give the new step that produces its result "
    "the failed step's name."
)
"""Leads a replan's task, not its instructions: plan and replan calls then open with the same
system message (instructions and tool catalogue), which a server's prompt cache reads once."""
STEP_INSTRUCTIONS: Final = (
    "You carry out one step of a plan. Use the pinned facts and the results of earlier steps. "
    "Answer with the step's result only."
)
STEP_OUTPUT_INSTRUCTIONS: Final = (
    " Answer with one JSON object only, with exactly the fields the task lists, each of its "
    "type; copy numbers, codes and identifiers exactly, with no units or words around them."
)
STEP_TOOLS_INSTRUCTIONS: Final = (
    " You may call the tools offered, with arguments that match their schemas exactly; their "
    "results come back to you. When you have what the step needs, answer without a tool call."
)
SYNTHESIZE_INSTRUCTIONS: Final = (
    "Write the final answer for the user's goal from the results of the plan's steps. Keep the "
    "pinned facts exactly as stated."
)
EXTRACT_INSTRUCTIONS: Final = (
    "Extract durable facts about the user and their world from this run: stated preferences, "
    "profile details, and lessons (a tool that failed and what worked instead). Only the goal "
    "and the facts the user stated (listed in the task) are the user's own words: values a "
    "reviewer set, reviewers' answers and comments, step results and remembered facts are not, "
    "and never become facts about the user. Each fact has a "
    "subject ('user', 'tool:NAME', ...), an attribute (what about the subject it says, so a "
    "newer value can replace an older one), a category (preference, profile, knowledge, event) "
    "and one short sentence of text. Answer with JSON only, matching the schema."
)
SUMMARIZE_INSTRUCTIONS: Final = (
    "Summarize the earlier turns of this run in a few short lines: decisions, results, open "
    "questions. Keep numbers, names and identifiers exactly."
)


class FactSpec(BaseModel):
    """One extracted fact, as a model writes it."""

    model_config = ConfigDict(extra="forbid")
    subject: str = Field(min_length=1, max_length=200)
    attribute: str | None = Field(default=None, max_length=200)
    category: str = Field(pattern=r"^[a-z][a-z_]{0,39}$")
    text: str = Field(min_length=1, max_length=1000)


class FactsSpec(BaseModel):
    """The answer of a fact-extraction call."""

    model_config = ConfigDict(extra="forbid")
    facts: list[FactSpec] = Field(max_length=50)


@dataclass(frozen=True)
class Prompt:
    """One call's own part: `query` is the text memory is recalled with (None: no recall), and
    `query_vector` its embedding when it was computed before any transaction (a remote
    embedder: `worker.memory.working_memory.with_query_vector`). `budget_tokens` holds the call's
    context to a smaller budget than the configured one (`worker.memory.working_memory.budget`) once
    a server refused it as too long (`worker.model_calls.refits`)."""

    purpose: Purpose
    instructions: str
    task: str
    payload: dict[str, Any]
    json_schema: dict[str, Any] | None = None
    query: str | None = None
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI function tools the model may call
    query_vector: tuple[float, ...] | None = None
    budget_tokens: int | None = None


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, default=str, ensure_ascii=False)


def plan_schema(tool_names: list[str]) -> dict[str, Any]:
    """The JSON schema a planner's answer must fit: `PlanSpec`'s shape, with the rules its
    validators check spelled out for the model (and for a server that turns the schema into a
    grammar, such as llama.cpp's): a step is either a tool call (`kind` "tool", one of
    `tool_names` as `tool`, and `args`) or a model instruction (`kind` "model", optionally
    `tools` from `tool_names`). `parse_plan` still checks everything (references, arguments)."""
    name = {"type": "string", "pattern": STEP_NAME_PATTERN}
    after = {"type": "array", "items": name, "maxItems": MAX_PLAN_STEPS}
    instruction = {"type": "string", "maxLength": MAX_INSTRUCTION_CHARS}
    known = {"type": "string", "enum": tool_names} if tool_names else {"type": "string"}
    expect = expect_schema()
    tool_step = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "kind", "tool", "args"],
        "properties": {
            "name": name,
            "instruction": instruction,
            "kind": {"type": "string", "const": "tool"},
            "tool": known,
            "args": {"type": "object"},
            "after": after,
            "expect": expect,
        },
    }
    model_step = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "kind", "instruction"],
        "properties": {
            "name": name,
            "instruction": instruction,
            "kind": {"type": "string", "const": "model"},
            "tools": {"type": "array", "items": known, "maxItems": MAX_STEP_TOOLS},
            "after": after,
            "expect": expect,
            "output": output_spec_schema(names=False),
        },
    }
    steps = [tool_step, model_step] if tool_names else [model_step]
    criterion = {"type": "string", "minLength": 1, "maxLength": MAX_CRITERION_CHARS}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["steps"],
        "properties": {
            "steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_PLAN_STEPS,
                "items": {"anyOf": steps},
            },
            "success_criteria": {"type": "array", "items": criterion, "maxItems": MAX_CRITERIA},
        },
    }


def planner_instructions(tools: list[dict[str, Any]]) -> str:
    """The system message of every plan and replan call: `PLAN_INSTRUCTIONS`, then the tool
    catalogue. Static text first, so a server's prompt cache (llama.cpp's prefix match) reuses
    it across runs and between a run's plan and replan calls (issue 12); what differs per run
    (its state, memory, the task) follows. The catalogue is one compact JSON line per tool:
    these instructions are never trimmed, and indented JSON spent 40% of the demo catalogue's
    tokens on whitespace (2,196 against 1,334), more than a 4k window could give a plan call
    (issue 31, item 5)."""
    lines = [json.dumps(tool, separators=(",", ":"), ensure_ascii=False) for tool in tools]
    return PLAN_INSTRUCTIONS + "\n\nTools you can use (one per line):\n" + "\n".join(lines)


def plan_prompt(goal: str, tools: list[dict[str, Any]]) -> Prompt:
    """Ask for a first plan."""
    return Prompt(
        "plan",
        planner_instructions(tools),
        "Write the plan for the goal.",
        {"goal": goal, "tools": tools},
        plan_schema([t["name"] for t in tools]),
        query=goal,
    )


def replan_prompt(
    goal: str,
    tools: list[dict[str, Any]],
    failed: Step,
    *,
    unmet: dict[str, Any] | None = None,
    doubt: str | None = None,
) -> Prompt:
    """Ask for the steps to splice in after `failed`: a failed step; with `unmet` (the detail
    of the goal check that found the goal not met: `reason`, `missing`), the deliverable whose
    result did not meet it; with `doubt`, the step after which the should-replan check found
    the rest of the plan pointless (its reason), whose steps not started are dropped."""
    failed_step = {
        "name": failed.name,
        "tool": failed.tool,
        "args": failed.args,
        "error": failed.error,
        "instruction": failed.instruction,
        "tools": failed.tools,
        "expect": failed.expect,
        "output": failed.output,
    }
    if doubt is not None:
        failed_step["result"] = failed.result
        failed_step["doubt"] = doubt
        what = (
            "This step succeeded, but given its result the steps not started yet were found "
            "pointless, and are dropped:\n" + _json(failed_step)
        )
    elif unmet is None:
        what = "This step failed:\n" + _json(failed_step)
    else:
        failed_step["result"] = failed.result
        failed_step["goal_check"] = {"reason": unmet["reason"], "missing": unmet["missing"]}
        what = (
            "The plan's steps all succeeded, but the goal check found the goal not met. This "
            "step delivered the result it judged:\n" + _json(failed_step)
        )
    ask = (
        "Write the steps that follow it instead (they may refer to its result; do not repeat it)."
        if doubt is not None
        else "Write the steps to put in its place."
    )
    task = REPLAN_NOTE + "\n\n" + what + "\n\n" + ask
    payload = {"goal": goal, "tools": tools, "failed_step": failed_step}
    # memory is recalled by the goal and what went wrong, so the procedure (or past run) for
    # this failure outranks the one for the goal alone
    why = failed.error or doubt or (unmet or {}).get("reason")
    query = f"{goal}\n{failed.tool or failed.name}: {why}" if why else goal
    return Prompt(
        "replan",
        planner_instructions(tools),
        task,
        payload,
        plan_schema([t["name"] for t in tools]),
        query=query,
    )


def step_prompt(
    instruction: str,
    results: dict[str, dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    output: dict[str, str] | None = None,
) -> Prompt:
    """Ask a model step to do its instruction; `tools` are catalog entries
    (`models.plans.tools.catalog`) of the tools it may call, offered as OpenAI function tools. With
    `output` (field -> type, `models.plans.step_outputs`) the answer must be JSON of those fields
    (`output_schema`, sent as the request's json_schema); the payload carries `output` too."""
    payload: dict[str, Any] = {"instruction": instruction, "results": results}
    task = f"Do this step: {instruction}"
    if output:
        payload["output"] = output
        task += f"\n\nAnswer with JSON holding exactly these fields: {describe(output)}."
    return Prompt(
        "step",
        STEP_INSTRUCTIONS
        + (STEP_OUTPUT_INSTRUCTIONS if output else "")
        + (STEP_TOOLS_INSTRUCTIONS if tools else ""),
        task,
        payload,
        output_schema(output) if output else None,
        query=instruction,
        tools=tuple(function_tool(entry) for entry in tools or []),
    )


def function_tool(entry: dict[str, Any]) -> dict[str, Any]:
    """A catalog entry as an OpenAI function tool:
    `{"type": "function", "function": {"name", "description", "parameters"}}`."""
    return {
        "type": "function",
        "function": {
            "name": entry["name"],
            "description": entry["description"],
            "parameters": entry["parameters"],
        },
    }


def synthesize_prompt(goal: str, steps: list[Step]) -> Prompt:
    """Ask for the run's final answer."""
    results = [
        {"name": s.name, "status": s.status, "result": s.result}
        for s in steps
        if s.status == "succeeded"
    ]
    task = "Write the final answer for the goal from the plan's results above."
    return Prompt("synthesize", SYNTHESIZE_INSTRUCTIONS, task, {"goal": goal, "results": results})


def extract_prompt(
    goal: str, failures: list[dict[str, Any]], stated: dict[str, str] | None = None
) -> Prompt:
    """Ask for the durable facts of a finished run: `stated` are the facts the user pinned
    (`PinnedFact.set_by == "user"`), the only pinned facts that may become the user's memory;
    those a reviewer set are run state (issue 9, finding 5). `failures` are the user's own
    steps' (`worker.memory.run_memory.run_memory`): a reviewer's steps act with the reviewer's
    rights, and their errors never reach this prompt (issue 9)."""
    task = (
        "Facts the user stated for this run:\n"
        + _json(stated or {})
        + "\n\nFailures in this run and what fixed them:\n"
        + _json(failures)
        + "\n\nExtract facts."
    )
    payload = {"goal": goal, "failures": failures, "stated_facts": stated or {}}
    return Prompt(
        "extract_facts", EXTRACT_INSTRUCTIONS, task, payload, FactsSpec.model_json_schema()
    )


def summarize_prompt(previous: str | None, turns: list[str], max_chars: int) -> Prompt:
    """Ask for a new rolling summary: the previous one extended with `turns`."""
    task = (
        f"Previous summary:\n{previous or '(none)'}\n\nTurns to fold in:\n"
        + "\n---\n".join(turns)
        + f"\n\nWrite the new summary in at most {max_chars} characters."
    )
    payload = {"previous": previous, "turns": turns, "max_chars": max_chars}
    return Prompt("summarize", SUMMARIZE_INSTRUCTIONS, task, payload)
