"""A step's conversation turn: what its attempt's end adds to the run's turns (`messages`).

Written with the step's outcome in one statement (`models.engine.leases.end_attempt`); a turn is run
state read back into later prompts, capped at `AGENTQ_STEP_DATA_MAX_BYTES` (the step's row keeps
the whole result).
"""

from __future__ import annotations

import json

from models.engine import leases
from models.memory.tokens import count_tokens
from models.settings import Settings, get_settings
from models.tables import Step
from worker.execution.attempts import Outcome


def step_turn(step: Step, outcome: Outcome, settings: Settings) -> leases.Turn | None:
    """The step's conversation turn; none for a retry, a deferral, a stop before a gated call or
    a child run started (the step goes on)."""
    if outcome.kind in ("retry", "deferred", "awaiting_approval", "awaiting_child"):
        return None
    content = turn_text(step, outcome)
    role = "assistant" if step.kind == "model" else "tool"
    return leases.Turn(role, content, count_tokens(content, settings.model))


def turn_text(step: Step, outcome: Outcome) -> str:
    """The step's outcome as a conversation turn: a model's text (its fields as JSON, for a step
    that declares `output`), or a tool call and its result; at most `AGENTQ_STEP_DATA_MAX_BYTES`
    (the step's row keeps the whole result)."""
    if outcome.kind in ("failed", "escalated"):
        return f"step {step.name} ({step.tool or step.kind}) failed: {outcome.error}"
    result = outcome.result or {}
    if step.kind == "model":
        said = json.dumps(result) if step.output else str(result.get("text", ""))
        return _clipped(said)
    return _clipped(
        f"step {step.name}: {step.tool}({json.dumps(step.args)}) -> {json.dumps(result)}"
    )


def _clipped(text: str) -> str:
    """`text`, or its start and a note when it is over `AGENTQ_STEP_DATA_MAX_BYTES` in UTF-8."""
    encoded, cap = text.encode("utf-8"), get_settings().step_data_max_bytes
    if len(encoded) <= cap:
        return text
    note = f" ... [shortened from {len(encoded):,} bytes; the step's result has it whole]"
    return encoded[: cap - len(note)].decode("utf-8", errors="ignore") + note
