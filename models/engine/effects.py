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

from sqlmodel import col, select

from models.db import session_scope
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


def effect_of(step_id: int | None) -> str | None:
    """The effect step `step_id` made, if it succeeded calling a tool that is not `read_only`:
    `"step NAME (TOOL)"` for a tool step, `"step NAME's call of TOOL"` for a model step's
    journaled call (`tool_journal`, the first such call); None when it made none, did not
    succeed, or is not given. Reads the step and its calls in a transaction of its own, and asks
    the tools outside it: an MCP tool's hints may need its server started and listed
    (`models.mcp.catalogue`), which no transaction waits for."""
    if step_id is None:
        return None
    with session_scope() as session:
        step = session.get(Step, step_id)
        if step is None or step.status != "succeeded":
            return None
        calls = select(ToolJournalEntry.tool).where(
            ToolJournalEntry.step_id == step_id, col(ToolJournalEntry.error).is_(None)
        )
        called = [str(t) for t in session.exec(calls.order_by(col(ToolJournalEntry.id)))]
        name, tool = step.name, step.tool if step.kind == "tool" else None
    if tool and not read_only(tool):
        return f"step {name} ({tool})"
    return next((f"step {name}'s call of {t}" for t in called if not read_only(t)), None)
