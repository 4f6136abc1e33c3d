"""`AGENTQ_MCP_SERVERS` (`models.settings_mcp`): the forms MCP clients write, and one line naming
`AGENTQ_MCP_SERVERS.<server>.<field>` for each bad value, never a credential."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models.errors import ConfigurationError
from models.settings import Settings, read_settings
from models.settings_mcp import McpServer, parse_servers


def read(monkeypatch: pytest.MonkeyPatch, value: Any) -> Settings:
    raw = value if isinstance(value, str) else json.dumps(value)
    monkeypatch.setenv("AGENTQ_MCP_SERVERS", raw)
    return read_settings()


def refusal(monkeypatch: pytest.MonkeyPatch, value: Any) -> str:
    with pytest.raises(ConfigurationError) as refused:
        read(monkeypatch, value)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_no_servers_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQ_MCP_SERVERS", raising=False)
    assert read_settings().mcp_servers == {}
    assert Settings.model_fields["mcp_servers"].get_default(call_default_factory=True) == {}


def test_the_forms_mcp_clients_write(monkeypatch: pytest.MonkeyPatch) -> None:
    servers = read(
        monkeypatch,
        {
            "files": {"command": "npx", "args": ["-y", "@scope/files"], "env": {"ROOT": "/srv"}},
            "search": {"type": "http", "url": "https://mcp.example/mcp", "tools": ["find"]},
            "local-1": {"type": "stdio", "command": "python", "cwd": "/tmp"},
        },
    ).mcp_servers
    assert servers["files"] == McpServer(
        command="npx", args=["-y", "@scope/files"], env={"ROOT": "/srv"}
    )
    assert servers["files"].transport == "stdio" and servers["files"].tools is None
    assert servers["search"].transport == "http" and servers["search"].tools == ["find"]
    assert servers["local-1"].cwd == "/tmp"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"bad name": {"command": "x"}},
            "AGENTQ_MCP_SERVERS.bad name: the server's name must be 1 to 32 letters",
        ),
        ({"a__b": {"command": "x"}}, "AGENTQ_MCP_SERVERS.a__b: the server's name must be"),
        ({"x": {}}, "AGENTQ_MCP_SERVERS.x.command: required unless url is given: give exactly one"),
        (
            {"x": {"command": "c", "url": "https://h"}},
            "AGENTQ_MCP_SERVERS.x.url: not allowed with command: give exactly one of command",
        ),
        ({"x": {"url": "ftp://h/mcp"}}, "AGENTQ_MCP_SERVERS.x.url: must be an http:// or https://"),
        (
            {"x": {"url": "https://h", "env": {"A": "b"}}},
            "AGENTQ_MCP_SERVERS.x.env: only for a command",
        ),
        (
            {"x": {"command": "c", "headers": {"A": "b"}}},
            "AGENTQ_MCP_SERVERS.x.headers: only for a url",
        ),
        ({"x": {"command": "c", "type": "http"}}, "AGENTQ_MCP_SERVERS.x.type: 'http' needs a url"),
        (
            {"x": {"command": "c", "type": "sse"}},
            "AGENTQ_MCP_SERVERS.x.type: Input should be 'stdio'",
        ),
        (
            {"x": {"command": "c", "tools": []}},
            "AGENTQ_MCP_SERVERS.x.tools: List should have at least",
        ),
        (
            {"x": {"command": "c", "arg": ["a"]}},
            "AGENTQ_MCP_SERVERS.x.arg: not a field of an MCP server; allowed: type, command, args",
        ),
        (
            {"x": {"command": 5}},
            "AGENTQ_MCP_SERVERS.x.command: Input should be a valid string (got 5)",
        ),
        ({"x": "npx"}, "AGENTQ_MCP_SERVERS.x: must be a JSON object with a command or a url"),
        ([{"command": "c"}], "AGENTQ_MCP_SERVERS: must be a JSON object of servers by name"),
        ("{not json", "AGENTQ_MCP_SERVERS: must be a JSON object"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_server_and_field(
    monkeypatch: pytest.MonkeyPatch, value: Any, expected: str
) -> None:
    assert refusal(monkeypatch, value).startswith(f"invalid settings: {expected}")


def test_every_problem_is_named_and_secrets_are_never_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = refusal(
        monkeypatch,
        {
            "a": {"url": "gopher://user:hunter2@h/mcp"},
            "b": {"url": "https://h", "headers": {"Authorization": 7}},
            "c": {"command": "c", "env": {"TOKEN": ["sk-secret"]}},
        },
    )
    assert "AGENTQ_MCP_SERVERS.a.url" in message
    assert "AGENTQ_MCP_SERVERS.b.headers.Authorization" in message
    assert "AGENTQ_MCP_SERVERS.c.env.TOKEN" in message
    assert "hunter2" not in message and "sk-secret" not in message and "got 7" not in message


def test_parse_servers_takes_servers_already_parsed() -> None:
    server = McpServer(command="npx")
    assert parse_servers({"files": server}) == {"files": server}
    with pytest.raises(ConfigurationError, match=r"AGENTQ_MCP_SERVERS\.files\.command: required"):
        parse_servers({"files": McpServer()})
