"""What a step did in the world that doing it again would do twice (issue 31).

A tool either says it changes nothing (`read_only`: the MCP annotation `readOnlyHint: true`, or a
Python tool registered with `@tool(..., read_only=True)`) or is taken to have an effect: unsure
means it may (the MCP specification's default for a tool without annotations, as
`models.approval_policy` reads it). `effect_of` names the effect a succeeded step made, which the
coordinator never has a replan make again in its place (`models.engine.coordinator.decide_unmet`):
Gemma 3's goal check judged a filed expense report "not met", and the replan in the place of the
filing step filed a second report, a false success of the agent-tasks benchmark.
"""

from __future__ import annotations

from sqlmodel import Session, col, select

from models.errors import AgentqError
from models.plans.tools import get_tool
from models.tables import Step, ToolJournalEntry


def read_only(tool: str) -> bool:
    """Whether the tool named `tool` says it changes nothing (`readOnlyHint: true`); False for a
    tool that does not say so, is unknown, or whose MCP server cannot tell now."""
    try:
        found = get_tool(tool)
    except AgentqError:
        return False
    return found.annotations.get("readOnlyHint") is True


def effect_of(session: Session, step_id: int | None) -> str | None:
    """The effect step `step_id` made, if it succeeded calling a tool that is not `read_only`:
    `"step NAME (TOOL)"` for a tool step, `"step NAME's call of TOOL"` for a model step's
    journaled call (`tool_journal`, the first such call); None when it made none, did not
    succeed, or is not given."""
    step = session.get(Step, step_id) if step_id is not None else None
    if step is None or step.status != "succeeded":
        return None
    if step.kind == "tool" and step.tool and not read_only(step.tool):
        return f"step {step.name} ({step.tool})"
    calls = select(ToolJournalEntry.tool).where(
        ToolJournalEntry.step_id == step.id, col(ToolJournalEntry.error).is_(None)
    )
    for tool in session.exec(calls.order_by(col(ToolJournalEntry.id))):
        if not read_only(tool):
            return f"step {step.name}'s call of {tool}"
    return None
