"""Tools a plan step can call: the registry, its decorator and the catalog shown to planners."""

from __future__ import annotations

from worker.tools.registry import (
    DEFAULT_TOOL_MODULES,
    Fallback,
    Tool,
    ToolContext,
    argument_problems,
    catalog,
    configured_tool_names,
    declared_returns,
    describe_parameters,
    enabled_tool,
    find_playbook,
    get_tool,
    load_tool_modules,
    playbook,
    tool,
)

__all__ = [
    "DEFAULT_TOOL_MODULES",
    "Fallback",
    "Tool",
    "ToolContext",
    "argument_problems",
    "catalog",
    "configured_tool_names",
    "declared_returns",
    "describe_parameters",
    "enabled_tool",
    "find_playbook",
    "get_tool",
    "load_tool_modules",
    "playbook",
    "tool",
]
