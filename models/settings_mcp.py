"""Settings for the MCP servers whose tools agentq offers (`models.mcp`; issue 30, items 5-7).

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. `AGENTQ_MCP_SERVERS` takes the JSON
that MCP clients already use (Claude Desktop's `mcpServers`, VS Code's and Cursor's `mcp.json`):
`{"<server>": {"command": "...", "args": [...], "env": {...}}}` for a server run over stdio,
`{"<server>": {"url": "https://...", "headers": {...}}}` for one reached over streamable HTTP,
plus agentq's own optional `"tools": ["name", ...]`, the only tools of that server offered
(absent: all of them). A bad value is refused at start with one line naming
`AGENTQ_MCP_SERVERS.<server>.<field>` and what is allowed; values of `env`, `headers` and `url`
are never echoed (they may hold credentials).
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings

from models.errors import ConfigurationError

SETTING: Final = "AGENTQ_MCP_SERVERS"
# A server's name is part of its tools' names (`mcp__<server>__<tool>`), and those are OpenAI
# function names (`^[a-zA-Z0-9_-]{1,64}$`): no `__` inside, so a name splits one way only.
SERVER_NAME_PATTERN: Final = r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$"
SERVER_NAME_WORDS: Final = (
    "must be 1 to 32 letters, digits, _ or -, starting with a letter or digit, with no '__' "
    "(such as github or local-files)"
)
SERVER_EXAMPLE: Final = '{"command": "npx", "args": ["-y", "@scope/server"]}'
EXAMPLE: Final = f'{{"files": {SERVER_EXAMPLE}}}'
# The secret-bearing fields: their values never appear in an error, which reaches logs.
UNSHOWN_FIELDS: Final = frozenset({"env", "headers", "url"})


class McpServer(BaseModel):
    """One MCP server: a `command` run over stdio, or a `url` reached over streamable HTTP.

    Exactly one of `command` and `url` (checked with the rest by `parse_servers`, the way
    settings are read: `transport_problems`). `args`, `env` and `cwd` are for a command (its
    environment is the SDK's safe default, `HOME`, `PATH`, ..., plus `env`); `headers` for a
    URL (each request carries them: an `Authorization` header, say). `type`, which some clients
    write, is optional and must agree (`stdio` with a command, `http` with a URL). `tools`
    lists the server's tools agentq offers, by the server's names (None: all).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["stdio", "http", "streamable-http"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    tools: list[str] | None = Field(default=None, min_length=1)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("must be an http:// or https:// URL with a host")
        return url

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """`stdio` for a command, `http` for a URL."""
        return "stdio" if self.command is not None else "http"


class McpSettings(BaseSettings):
    """Fields of `Settings` for MCP servers (`models.mcp`)."""

    mcp_servers: dict[str, McpServer] = Field(
        default_factory=dict,
        description="MCP servers whose tools plans may call, as `mcp__<server>__<tool>` (JSON, "
        'the form MCP clients use): `{"<server>": {"command": "...", "args": [...], "env": '
        '{...}}}` (stdio) or `{"<server>": {"url": "https://...", "headers": {...}}}` '
        '(streamable HTTP), each with an optional `"tools": [...]` allow-list; unset: none.',
    )
    mcp_start_timeout_s: float = Field(
        default=20.0,
        gt=0,
        le=600,
        description="Time to start an MCP server (spawn or connect), initialize it and list its "
        "tools, s; longer: the server cannot start.",
    )

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _servers(cls, value: Any) -> dict[str, McpServer]:
        return parse_servers(value)


def parse_servers(value: Any) -> dict[str, McpServer]:
    """`AGENTQ_MCP_SERVERS`' value (decoded JSON, or `McpServer`s already) as servers by name.

    Raises `ConfigurationError`, one line naming `AGENTQ_MCP_SERVERS.<server>.<field>` for each
    problem and what is allowed, never a value of `env`, `headers` or `url`.
    """
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"invalid settings: {SETTING}: must be a JSON object of servers by name, such as "
            f"{EXAMPLE}"
        )
    problems: list[str] = []
    servers: dict[str, McpServer] = {}
    for name, raw in value.items():
        if not re.match(SERVER_NAME_PATTERN, str(name)):
            problems.append(f"{SETTING}.{name}: the server's name {SERVER_NAME_WORDS}")
            continue
        try:
            server = raw if isinstance(raw, McpServer) else McpServer.model_validate(raw)
        except ValidationError as exc:
            problems += [_describe(name, error) for error in exc.errors()]
            continue
        found = transport_problems(server)
        problems += [f"{SETTING}.{name}.{field}: {why}" for field, why in found]
        servers[name] = server
    if problems:
        raise ConfigurationError("invalid settings: " + "; ".join(problems))
    return servers


ONE_TRANSPORT: Final = (
    "give exactly one of command (a server run over stdio) or url (streamable HTTP)"
)


def transport_problems(server: McpServer) -> list[tuple[str, str]]:
    """`(field, why)` for each way `server` mixes its transports: exactly one of `command` and
    `url`; `args`, `env`, `cwd` with a command only; `headers` with a URL only; a `type` that
    agrees."""
    if server.command is None and server.url is None:
        return [("command", f"required unless url is given: {ONE_TRANSPORT}")]
    if server.command is not None and server.url is not None:
        return [("url", f"not allowed with command: {ONE_TRANSPORT}")]
    if server.url is not None:
        given = [f for f in ("args", "env", "cwd") if getattr(server, f)]
        found = [(f, "only for a command server; this one has a url") for f in given]
    else:
        found = [("headers", "only for a url server; this one has a command")] * bool(
            server.headers
        )
    if server.type is not None and (server.type == "stdio") != (server.command is not None):
        needs = "a command" if server.type == "stdio" else "a url"
        found.append(("type", f"{server.type!r} needs {needs}; or leave type out"))
    return found


def _describe(server: str, error: Any) -> str:
    """`AGENTQ_MCP_SERVERS.files.args: Input should be a valid list (got 'x')`: one of pydantic's
    errors for `server`, the value shown only when short and not a secret-bearing field's."""
    loc = [str(part) for part in error["loc"]]
    where = ".".join([SETTING, server, *loc])
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(McpServer.model_fields)
        return f"{where}: not a field of an MCP server; allowed: {allowed}"
    if error["type"] == "missing":
        return f"{where}: required but missing"
    if error["type"] == "model_type":
        return f"{where}: must be a JSON object with a command or a url, such as {SERVER_EXAMPLE}"
    given = error.get("input")
    shown = (
        isinstance(given, str | int | float | bool)
        and len(repr(given)) <= 60
        and not (set(loc) & UNSHOWN_FIELDS)
    )
    return f"{where}: {message}" + (f" (got {given!r})" if shown else "")
