"""The tools plans may name, for validating explicit plans and reviewers' edits.

The registry lives in `worker.tools` (a tool is a Python function the workers run); the API
loads the same modules (`AGENTQ_TOOL_MODULES`) only to read their names, argument schemas and
result keys, as `agentq submit --plan` does. It never runs a tool.
"""

from __future__ import annotations

from typing import Any

from models.settings import get_settings


def tool_names() -> list[str]:
    """Names of the tools the workers load (`AGENTQ_TOOL_MODULES`)."""
    from worker.tools import catalog, load_tool_modules

    load_tool_modules(get_settings().tool_modules)
    return [t["name"] for t in catalog()]


def tool_returns(name: str | None) -> tuple[str, ...]:
    """The result keys the tool `name` declares; () for none or an unknown tool."""
    from worker.tools import catalog

    tool_names()
    return next((tuple(t["returns"]) for t in catalog() if t["name"] == name), ())


def argument_problems(tool: str, args: dict[str, Any]) -> list[str]:
    """The problems of calling `tool` with `args` (the registry's pydantic check)."""
    from worker.tools import argument_problems as check

    return check(tool, args)
