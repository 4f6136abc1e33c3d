"""agentq's names of MCP servers' tools, `mcp__<server>__<tool>`, with no MCP SDK import: code that
only tells an MCP tool's name from a module tool's (plan checks, the CLI, the API) never loads the
SDK (about 0.4 s per process) unless MCP servers are configured (`models.mcp.catalogue`)."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "mcp__"
SEPARATOR: Final = "__"


def tool_name(server: str, tool: str) -> str:
    """agentq's name of `server`'s tool `tool`: `mcp__<server>__<tool>`."""
    return f"{PREFIX}{server}{SEPARATOR}{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """`(server, tool)` of an agentq MCP tool name; None for a name not of that form. A server's
    name holds no `__` (`models.settings_mcp`), so the first one after the prefix splits it."""
    if not name.startswith(PREFIX):
        return None
    server, separator, tool = name.removeprefix(PREFIX).partition(SEPARATOR)
    return (server, tool) if separator and server and tool else None
