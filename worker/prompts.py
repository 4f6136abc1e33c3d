"""Prompts, rebuilt from rows on every model call (DESIGN.md, invariant 3).

Each builder takes the structured payload (pinned facts, the plan with statuses, results) and
renders it into chat messages; the payload travels with the request so the offline provider
answers from the same data the model would see.
"""

from __future__ import annotations

import json
from typing import Any, Final

from models.plans import PlanSpec
from models.tables import Step
from worker.providers import ModelRequest, Purpose

PLAN_SYSTEM: Final = (
    "You are the planner of an agent. Break the user's goal into a short plan of steps. "
    "Each step is either a call of one of the listed tools (kind 'tool', with 'tool' and 'args') "
    "or a model instruction (kind 'model'). Steps pass data with references in args: "
    "'${steps.NAME.KEY}' is KEY of the result of the earlier step NAME, '${facts.KEY}' is a "
    "pinned fact. Pinned facts are the user's own statements: never change them. "
    "Answer with JSON only, matching the schema."
)
REPLAN_SYSTEM: Final = (
    PLAN_SYSTEM + " A step of the current plan failed. Answer with only the new steps to insert "
    "right after the failed step; the remaining steps of the plan follow them unchanged."
)
STEP_SYSTEM: Final = (
    "You carry out one step of a plan. Use the pinned facts and the results of earlier steps. "
    "Answer with the step's result only."
)
SYNTHESIZE_SYSTEM: Final = (
    "Write the final answer for the user's goal from the results of the plan's steps. Keep the "
    "pinned facts exactly as stated."
)
RESULT_MAX_CHARS: Final = 2000


def step_ledger(steps: list[Step]) -> list[dict[str, Any]]:
    """The plan as the model sees it: each step's name, kind, tool, status, result or error."""
    return [
        {
            "name": s.name,
            "kind": s.kind,
            "tool": s.tool,
            "status": s.status,
            "instruction": s.instruction,
            **({"result": s.result} if s.status == "succeeded" else {}),
            **({"error": s.error} if s.status == "failed" else {}),
        }
        for s in steps
    ]


def _render(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, indent=1, default=str)
    return text


def _request(
    purpose: Purpose, system: str, payload: dict[str, Any], *, schema: bool
) -> ModelRequest:
    return ModelRequest(
        purpose=purpose,
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": _render(payload)},
        ],
        payload=payload,
        json_schema=PlanSpec.model_json_schema() if schema else None,
    )


def plan_request(goal: str, facts: dict[str, str], tools: list[dict[str, Any]]) -> ModelRequest:
    """The request for a first plan."""
    return _request(
        "plan", PLAN_SYSTEM, {"goal": goal, "facts": facts, "tools": tools}, schema=True
    )


def replan_request(
    goal: str,
    facts: dict[str, str],
    tools: list[dict[str, Any]],
    steps: list[Step],
    failed: Step,
) -> ModelRequest:
    """The request for the steps to splice in after `failed`."""
    payload = {
        "goal": goal,
        "facts": facts,
        "tools": tools,
        "plan": step_ledger(steps),
        "failed_step": {
            "name": failed.name,
            "tool": failed.tool,
            "args": failed.args,
            "error": failed.error,
            "instruction": failed.instruction,
        },
    }
    return _request("replan", REPLAN_SYSTEM, payload, schema=True)


def step_request(
    instruction: str, facts: dict[str, str], results: dict[str, dict[str, Any]]
) -> ModelRequest:
    """The request for a model step."""
    payload = {"instruction": instruction, "facts": facts, "results": results}
    return _request("step", STEP_SYSTEM, payload, schema=False)


def synthesize_request(goal: str, facts: dict[str, str], steps: list[Step]) -> ModelRequest:
    """The request for the run's final answer."""
    results = [
        {"name": s.name, "status": s.status, "result": s.result}
        for s in steps
        if s.status == "succeeded"
    ]
    payload = {"goal": goal, "facts": facts, "results": results}
    return _request("synthesize", SYNTHESIZE_SYSTEM, payload, schema=False)
