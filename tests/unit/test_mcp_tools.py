"""The tools `agentq mcp` serves, as an MCP client lists them (the SDK's in-process client; no
API is called to list them), against what the docs and `agentq mcp --help` say of them."""

from __future__ import annotations

import re
from typing import Any

import anyio
from mcp import Client
from mcp.types import Tool

from agentq.client import AsyncClient
from ops.cli import mcp_server
from ops.mcp_server import build_server, instructions
from ops.mcp_tools import Api
from tests.support.doc_pages import ROOT

PAGE = ROOT / "docs" / "how-to" / "mcp-server.md"


def listed() -> dict[str, Tool]:
    async def tools() -> list[Tool]:
        client = AsyncClient("http://127.0.0.1:9", "aq_unused")
        server = build_server(Api(client, "http://127.0.0.1:9"), instructions("", None))
        async with Client(server) as mcp:
            found = (await mcp.list_tools()).tools
        await client.aclose()
        return found

    return {tool.name: tool for tool in anyio.run(tools)}


def documented() -> dict[str, str]:
    """Tool name -> its annotations cell, from the docs page's table of tools."""
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|$", PAGE.read_text(), re.M)
    return {name: hints.strip() for name, hints in rows}


def test_the_docs_table_has_every_tool_with_its_hints() -> None:
    tools, table = listed(), documented()
    assert set(tools) == set(table)
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None, name
        assert hints.read_only_hint is (table[name] == "read-only"), name
        if not hints.read_only_hint:
            destructive = table[name].startswith("destructive")
            assert hints.destructive_hint is destructive, name


def test_every_tool_has_a_description_and_schemas_of_its_arguments_and_answer() -> None:
    for name, tool in listed().items():
        assert tool.description and len(tool.description) > 40, name
        assert tool.input_schema["type"] == "object", name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
    schema: dict[str, Any] = listed()["submit_goal"].input_schema
    assert schema["required"] == ["goal"]
    assert {"facts", "plan", "approvals", "budgets", "user"} <= set(schema["properties"])


def test_the_commands_help_names_every_tool() -> None:
    helped = " ".join((mcp_server.__doc__ or "").split())
    named = re.search(r"Tools: ([\w, ]+)\.", helped)
    assert named is not None, helped
    assert set(named.group(1).split(", ")) == set(listed())
