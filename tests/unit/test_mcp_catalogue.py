"""The names agentq gives MCP servers' tools and which tools of a listing it offers
(`models.mcp.catalogue`), and the process's event loop for the SDK (`models.mcp.loop`): no
server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from types import FrameType
from typing import Any

import pytest
from mcp.types import Tool, ToolAnnotations

from models.mcp import loop
from models.mcp.catalogue import listed
from models.mcp.names import split_name, tool_name
from models.settings_mcp import McpServer

OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def mcp_tool(name: str, schema: dict[str, Any] | None = None, **more: Any) -> Tool:
    return Tool(name=name, inputSchema=OBJECT if schema is None else schema, **more)


def test_names_round_trip_and_split_at_the_first_separator() -> None:
    assert tool_name("files", "read") == "mcp__files__read"
    assert split_name("mcp__files__read") == ("files", "read")
    assert split_name("mcp__files__read__all") == ("files", "read__all")
    assert split_name("mcp__local-1__a") == ("local-1", "a")
    for other in ("echo", "mcp__files", "mcp____read", "mcp__files__", "files__read"):
        assert split_name(other) is None


def test_a_listing_offers_every_tool_with_its_schema_and_hints_as_sent() -> None:
    hints = ToolAnnotations(title="Read", readOnlyHint=True, openWorldHint=False)
    tools = [
        mcp_tool("read", description="Read a file.", annotations=hints),
        mcp_tool("write", title="Write a file", outputSchema={"type": "object"}),
    ]
    found = listed("files", McpServer(command="x"), tools)
    assert sorted(found.offered) == ["mcp__files__read", "mcp__files__write"]
    read, write = found.offered["mcp__files__read"], found.offered["mcp__files__write"]
    assert read.annotations == {"title": "Read", "readOnlyHint": True, "openWorldHint": False}
    assert (read.server, read.tool, read.description) == ("files", "read", "Read a file.")
    assert read.input_schema == OBJECT and not read.has_output
    assert write.annotations == {} and write.description == "Write a file" and write.has_output
    assert found.left_out == {}


def test_the_allow_list_and_unusable_tools_are_left_out_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = [
        mcp_tool("read"),
        mcp_tool("write"),
        mcp_tool("list.all"),
        mcp_tool("x" * 60),
        mcp_tool("broken", {"type": 5}),
        mcp_tool("scalar", {"type": "string"}),
    ]
    allowed = ["read", "list.all", "broken", "scalar", "gone", "x" * 60]
    with caplog.at_level(logging.WARNING, logger="agentq.mcp"):
        found = listed("files", McpServer(command="x", tools=allowed), tools)
    assert list(found.offered) == ["mcp__files__read"]
    assert found.left_out["write"].startswith("is not in the server's allow-list")
    assert "at most 64 letters, digits, _ or -" in found.left_out["list.all"]
    assert "at most 64" in found.left_out["x" * 60]
    assert found.left_out["broken"].startswith("is not offered: its input schema is no JSON schema")
    assert found.left_out["scalar"] == "is not offered: its input schema must be of type object"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 5  # write is the allow-list's choice, not news
    assert "mcp server 'files' has no tool 'gone' (AGENTQ_MCP_SERVERS.files.tools)" in said


def test_run_returns_what_the_coroutine_returns_or_raises() -> None:
    async def answer() -> int:
        await asyncio.sleep(0.01)
        return 42

    async def refuse() -> None:
        raise ValueError("no")

    async def own_timeout() -> None:
        raise TimeoutError("the coroutine's own")

    assert loop.run(answer(), 5) == 42
    with pytest.raises(ValueError, match="no"):
        loop.run(refuse(), 5)
    with pytest.raises(TimeoutError, match="the coroutine's own"):
        loop.run(own_timeout(), 5)


def test_a_wait_that_runs_out_or_is_interrupted_cancels_the_coroutine() -> None:
    cancelled: list[str] = []

    async def slow(label: str) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(label)
            raise

    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
        loop.run(slow("timeout"), 0.2)

    class Limit(Exception):
        pass

    def went_off(signum: int, frame: FrameType | None) -> None:
        raise Limit  # as a step's time limit does (worker.execution.time_limits)

    previous = signal.signal(signal.SIGALRM, went_off)
    other_s, _ = signal.setitimer(signal.ITIMER_REAL, 0.2)  # pytest-timeout's, put back below
    armed_at = time.monotonic()
    try:
        with pytest.raises(Limit):
            loop.run(slow("signal"), 10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if other_s > 0:
            signal.setitimer(signal.ITIMER_REAL, max(other_s - (time.monotonic() - armed_at), 1))
    deadline = time.monotonic() + 5
    while len(cancelled) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cancelled == ["timeout", "signal"] and time.monotonic() - started < 3


def test_a_forked_child_runs_its_own_loop() -> None:
    async def where() -> int:
        return os.getpid()

    parents = loop.event_loop()
    assert loop.run(where(), 5) == os.getpid()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            own = loop.event_loop() is not parents and loop.run(where(), 5) == os.getpid()
            os.write(write, json.dumps(own).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        assert json.loads(answer.read() or "false") is True
    assert os.waitpid(pid, 0)[1] == 0
    assert loop.event_loop() is parents
