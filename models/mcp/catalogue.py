"""The tools each MCP server offers, under the names agentq gives them: `mcp__<server>__<tool>`.

A server is listed when its session opens (`models.mcp.sessions`); the listing is kept for the
process's life (a server's changed tools are seen by processes started after the change). A
server's tools are all offered unless its `tools` allow-list names some (`AGENTQ_MCP_SERVERS`).
A tool is left out, with one log line, when its name would not be a function name a model can
call (`^[A-Za-z0-9_-]{1,64}$` with the prefix: OpenAI's rule) or its input schema is no JSON
schema of an object.

A server that cannot start is named in one line on this process's log (or stderr, in the CLI):
`mcp server 'x' cannot start: <why>`, never a traceback; it is tried again after
`UNAVAILABLE_RECHECK_S`, not on every look-up meanwhile. Its tools are unknown then: a plan
naming one is refused with that reason (`unavailable`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from mcp.types import Tool

from models.mcp import loop, sessions
from models.mcp.names import split_name, tool_name
from models.settings import get_settings
from models.settings_mcp import McpServer

FUNCTION_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
UNAVAILABLE_RECHECK_S: Final = 10.0
log = logging.getLogger("agentq.mcp")  # plain lines: the CLI's stderr shows them as they are


@dataclass(frozen=True)
class McpTool:
    """One tool of an MCP server as agentq offers it: `name` is agentq's (`mcp__<server>__<tool>`),
    `tool` the server's; `input_schema` its arguments' JSON schema and `annotations` its hints
    (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`, `title`), both as the
    server sent them (camelCase keys; annotations `{}` when it sent none); `has_output`: it
    declared an output schema, so its answers carry structured content."""

    name: str
    server: str
    tool: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any]
    has_output: bool


@dataclass(frozen=True)
class Listing:
    """A server's tools: those offered by agentq's name, and why each other tool is not."""

    offered: dict[str, McpTool]
    left_out: dict[str, str]


@dataclass(frozen=True)
class Unavailable:
    """Why an MCP tool name is not offered; `retryable` when its server cannot start now."""

    why: str
    retryable: bool = False


def offered() -> dict[str, McpTool]:
    """Every offered tool of every configured server that could be listed, by agentq's name;
    a server that cannot start adds none (and is logged, see the module docstring)."""
    found: dict[str, McpTool] = {}
    for server in get_settings().mcp_servers:
        try:
            found.update(listing(server).offered)
        except sessions.CannotStart:
            continue
    return found


def check_servers() -> dict[str, str | None]:
    """List every configured server now, all at once (a worker does at start, so a server that
    cannot start is named in its log at once, and the start waits for the slowest server, at
    most `AGENTQ_MCP_START_TIMEOUT_S`, not for their sum): why each cannot start, by server
    (None: it was listed)."""
    servers = list(get_settings().mcp_servers)
    if not servers:
        return {}
    with ThreadPoolExecutor(len(servers), thread_name_prefix="agentq-mcp-check") as pool:
        return dict(zip(servers, pool.map(_why_not_listed, servers), strict=True))


def _why_not_listed(server: str) -> str | None:
    try:
        listing(server)
    except sessions.CannotStart as exc:
        return str(exc)
    return None


def unavailable(name: str) -> Unavailable | None:
    """Why the MCP tool `name` is not offered here (its server is not configured, cannot start,
    has no such tool, or leaves it out); None when it is offered or `name` is no MCP tool name."""
    parts = split_name(name)
    if parts is None:
        return None
    server, tool = parts
    configured = get_settings().mcp_servers
    if server not in configured:
        names = ", ".join(sorted(configured)) or "none"
        return Unavailable(f"no MCP server {server!r} in AGENTQ_MCP_SERVERS (configured: {names})")
    try:
        found = listing(server)
    except sessions.CannotStart as exc:
        return Unavailable(f"mcp server {server!r} cannot start: {exc}", retryable=True)
    if name in found.offered:
        return None
    if tool in found.left_out:
        return Unavailable(f"tool {tool!r} of mcp server {server!r} {found.left_out[tool]}")
    tools = ", ".join(sorted(t.tool for t in found.offered.values())) or "none"
    return Unavailable(f"mcp server {server!r} has no tool {tool!r}; it offers: {tools}")


_listings: dict[str, tuple[McpServer, Listing]] = {}
_failures: dict[str, tuple[McpServer, float, str]] = {}  # config, monotonic time, why
_lock = threading.Lock()


def listing(server: str) -> Listing:
    """The tools of configured `server`, listed once per process (opening its session).
    Raises `sessions.CannotStart` (the reason, also logged once per attempt), and `KeyError`
    for a server `AGENTQ_MCP_SERVERS` does not name."""
    settings = get_settings()
    config = settings.mcp_servers[server]
    with _lock:
        known, failed = _listings.get(server), _failures.get(server)
    if known is not None and known[0] == config:
        return known[1]
    if failed and failed[0] == config and time.monotonic() - failed[1] < UNAVAILABLE_RECHECK_S:
        raise sessions.CannotStart(failed[2])
    held = sessions.session(server, config, settings.mcp_start_timeout_s)
    try:
        loop.run(held.open(), settings.mcp_start_timeout_s + sessions.CLOSE_TIMEOUT_S)
    except (sessions.CannotStart, TimeoutError) as exc:
        with _lock:
            _failures[server] = (config, time.monotonic(), str(exc))
        log.warning("mcp server %r cannot start: %s", server, exc)
        raise sessions.CannotStart(str(exc)) from None
    found = listed(server, config, held.tools or [])
    with _lock:
        _listings[server] = (config, found)
        _failures.pop(server, None)
    return found


def listed(server: str, config: McpServer, tools: list[Tool]) -> Listing:
    """The `Listing` of `server`'s `tools` (as its `tools/list` answered) under `config`'s
    allow-list; each tool left out is logged once."""
    allowed = set(config.tools) if config.tools is not None else None
    offered: dict[str, McpTool] = {}
    left_out: dict[str, str] = {}
    for tool in tools:
        why = _left_out_because(server, tool, allowed)
        if why is None:
            offered[tool_name(server, tool.name)] = _as_offered(server, tool)
        else:
            left_out[tool.name] = why
            if allowed is None or tool.name in allowed:  # the allow-list's choice is no news
                log.warning("mcp server %r: tool %r %s", server, tool.name, why)
    for missing in sorted((allowed or set()) - {t.name for t in tools}):
        log.warning(
            "mcp server %r has no tool %r (AGENTQ_MCP_SERVERS.%s.tools)", server, missing, server
        )
    return Listing(offered, left_out)


def _left_out_because(server: str, tool: Tool, allowed: set[str] | None) -> str | None:
    if allowed is not None and tool.name not in allowed:
        return f"is not in the server's allow-list (AGENTQ_MCP_SERVERS.{server}.tools)"
    if not FUNCTION_NAME.match(tool_name(server, tool.name)):
        return (
            "is not offered: its name with the prefix must be at most 64 letters, digits, _ or "
            f"- ({tool_name(server, '')}...)"
        )
    schema = tool.input_schema
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"is not offered: its input schema is no JSON schema ({exc.message})"
    if schema.get("type") != "object":
        return "is not offered: its input schema must be of type object"
    return None


def _as_offered(server: str, tool: Tool) -> McpTool:
    hints = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    )
    return McpTool(
        name=tool_name(server, tool.name),
        server=server,
        tool=tool.name,
        description=tool.description or tool.title or "",
        input_schema=dict(tool.input_schema),
        annotations=hints,
        has_output=tool.output_schema is not None,
    )


def forget() -> None:
    """Forget every listing and failure of this process (the tests' fresh start)."""
    with _lock:
        _listings.clear()
        _failures.clear()
