"""MCP servers' tools through agentq's tool registry, against the real test server
(`tests/mcp_servers/reports.py`) run as a subprocess over stdio and over streamable HTTP: the
listing, arguments refused before any call, a call's result, errors, a server killed mid-call,
the effect at most once, timeouts, a server that cannot start, sessions started again.

No database or worker here (the engine's own test is tests/integration/test_mcp_engine.py): the
calls go through `Tool.invoke`, as a worker's step and a model step's tool calls do."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from models.errors import (
    InvalidPlan,
    McpCallTimedOut,
    McpConnectionLost,
    McpServerUnavailable,
    McpToolFailed,
    RetryableToolError,
    ToolArgumentsError,
    ToolNotEnabled,
)
from models.mcp import catalogue, sessions
from models.plans.plans import parse_plan
from models.plans.tools import (
    ToolContext,
    argument_problems,
    catalog,
    configured_tool_names,
    enabled_tool,
    get_tool,
)
from tests.support.mcp import (
    REPORTS,
    HttpServer,
    configure,
    effects_of,
    forget_all,
    stdio_server,
)
from tests.support.net import free_port

pytestmark = pytest.mark.integration
LOOKUP, FILE_REPORT = "mcp__reports__lookup", "mcp__reports__file_report"


@dataclass
class Reports:
    """The configured test server: its transport, effects file and crash switch."""

    transport: str
    effects: Path
    crash_file: Path
    http: HttpServer | None

    def back_after_crash(self) -> None:
        """An HTTP server that crashed is started again on its port (stdio: agentq does it)."""
        if self.http is not None:
            self.http.wait_exited()
            self.http.start()


@pytest.fixture(params=["stdio", "http"])
def reports(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Reports]:
    effects, crash_file = tmp_path / "effects.txt", tmp_path / "crash"
    http = HttpServer(effects, crash_file) if request.param == "http" else None
    if http is not None:
        http.start()
        entry = {"url": http.url, "headers": {"X-Test": "yes"}}
    else:
        entry = stdio_server(effects, crash_file)
    configure(monkeypatch, {"reports": entry})
    yield Reports(request.param, effects, crash_file, http)
    forget_all()
    if http is not None:
        http.stop()


def ctx(step_id: int = 2, *, time_left_s: float = 30.0) -> ToolContext:
    return ToolContext(
        run_id=1,
        step_id=step_id,
        step_name="report",
        attempt=1,
        tries_of_name=1,
        facts={},
        deadline=time.monotonic() + time_left_s,
    )


def test_the_servers_tools_join_the_catalogue_with_schemas_and_hints(reports: Reports) -> None:
    names = configured_tool_names()
    assert {LOOKUP, FILE_REPORT, "mcp__reports__crash", "mcp__reports__fail"} <= set(names)
    assert "echo" in names  # the Python tools stay
    entry = next(e for e in catalog() if e["name"] == FILE_REPORT)
    assert entry["parameters"]["required"] == ["title", "amount"]
    assert entry["parameters"]["properties"]["amount"]["type"] == "number"
    assert entry["returns"] == ["content", "text", "structured"]
    assert "idempotency key" in entry["description"]
    assert get_tool(FILE_REPORT).annotations == {
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    assert get_tool(LOOKUP).annotations["readOnlyHint"] is True
    assert get_tool("echo").annotations == {"readOnlyHint": True}  # @tool(read_only=True)
    assert get_tool("submit_report").annotations == {}  # a Python tool that may have an effect
    assert enabled_tool(LOOKUP).module == ""


def test_bad_arguments_are_refused_before_any_call(reports: Reports) -> None:
    tool = enabled_tool(FILE_REPORT)
    with pytest.raises(ToolArgumentsError) as refused:
        tool.invoke(ctx(), {"title": 7, "extra": 1})
    assert str(refused.value) == (
        f"tool {FILE_REPORT!r} rejected its arguments: amount: required but missing; title: "
        "should be of type 'string' (got 7). Takes: title: string, amount: number"
    )
    with pytest.raises(ToolArgumentsError, match="numbers must be finite"):
        tool.invoke(ctx(), {"title": "x", "amount": float("inf")})
    assert argument_problems(FILE_REPORT, {"title": "x", "amount": "ten"}) == [
        f"tool {FILE_REPORT!r}: amount: should be of type 'number' (got 'ten')"
    ]
    assert argument_problems(FILE_REPORT, {"title": "x", "amount": "${steps.total.sum}"}) == []
    step = {"name": "file", "kind": "tool", "tool": FILE_REPORT, "args": {"title": 1}}
    with pytest.raises(InvalidPlan, match="amount: required but missing"):
        parse_plan({"steps": [step]}, tools=configured_tool_names(), check_args=argument_problems)
    assert effects_of(reports.effects) == []  # the server never ran the tool


def test_a_calls_answer_becomes_the_steps_result(reports: Reports) -> None:
    found = enabled_tool(LOOKUP).invoke(ctx(), {"key": "EUR"})
    assert found["structured"] == {"key": "eur", "value": "euro"}
    assert '"value": "euro"' in found["text"]
    assert found["content"] == [{"type": "text", "text": found["text"]}]
    picture = enabled_tool("mcp__reports__picture").invoke(ctx(), {})
    assert picture == {
        "content": [
            {"type": "text", "text": "a red dot"},
            {"type": "image", "mime_type": "image/png", "bytes": 8},
            {"type": "resource", "uri": "memo://dot", "mime_type": "text/plain", "text": "dot"},
        ],
        "text": "a red dot",
    }


def test_the_idempotency_key_makes_each_step_one_effect(reports: Reports) -> None:
    tool = enabled_tool(FILE_REPORT)
    first = tool.invoke(ctx(2), {"title": "Lisbon", "amount": 473.43})
    again = tool.invoke(ctx(2), {"title": "Lisbon", "amount": 473.43})
    other = tool.invoke(ctx(3), {"title": "Porto", "amount": 10})
    assert first["structured"] == {"report": 1, "repeated": False}
    assert again["structured"] == {"report": 1, "repeated": True}
    assert other["structured"] == {"report": 2, "repeated": False}
    assert effects_of(reports.effects) == [
        "run-1/step-2\tLisbon\t473.43",
        "run-1/step-3\tPorto\t10.0",
    ]


def test_an_error_answer_fails_the_step_naming_server_and_tool(reports: Reports) -> None:
    with pytest.raises(McpToolFailed) as failed:
        enabled_tool("mcp__reports__fail").invoke(ctx(), {"message": "the ledger is closed"})
    assert not isinstance(failed.value, RetryableToolError)
    assert str(failed.value) == (
        "tool 'fail' of mcp server 'reports' answered an error: Error executing tool fail: the "
        "ledger is closed"
    )
    with pytest.raises(McpToolFailed, match="no currency 'xyz'"):
        enabled_tool(LOOKUP).invoke(ctx(), {"key": "xyz"})


def test_a_server_killed_mid_call_is_retryable_and_the_next_call_opens_a_new_session(
    reports: Reports,
) -> None:
    with pytest.raises(McpConnectionLost) as lost:
        enabled_tool("mcp__reports__crash").invoke(ctx(), {"delay_s": 0.2})
    assert isinstance(lost.value, RetryableToolError)
    assert "tool 'crash' of mcp server 'reports': the connection closed" in str(lost.value)
    reports.back_after_crash()
    assert enabled_tool(LOOKUP).invoke(ctx(), {"key": "gbp"})["structured"]["value"] == (
        "pound sterling"
    )


def test_a_crash_after_the_effect_is_retried_and_the_effect_stays_one(reports: Reports) -> None:
    tool = enabled_tool(FILE_REPORT)
    reports.crash_file.touch()
    with pytest.raises(McpConnectionLost):
        tool.invoke(ctx(5), {"title": "Lisbon", "amount": 1.5})
    assert effects_of(reports.effects) == ["run-1/step-5\tLisbon\t1.5"]
    reports.back_after_crash()
    retried = tool.invoke(ctx(5), {"title": "Lisbon", "amount": 1.5})  # the step's next attempt
    assert retried["structured"] == {"report": 1, "repeated": True}
    assert effects_of(reports.effects) == ["run-1/step-5\tLisbon\t1.5"]


def test_a_call_times_out_within_its_steps_time_left(reports: Reports) -> None:
    started = time.monotonic()
    with pytest.raises(McpCallTimedOut, match=r"no answer within 0\.5 s"):
        enabled_tool("mcp__reports__slow").invoke(ctx(time_left_s=0.5), {"seconds": 5})
    assert time.monotonic() - started < 4  # the tool sleeps 5 s; a loaded machine starts slowly
    with pytest.raises(McpCallTimedOut, match="no time left"):
        enabled_tool(LOOKUP).invoke(ctx(time_left_s=-1), {"key": "eur"})
    assert enabled_tool(LOOKUP).invoke(ctx(), {"key": "usd"})["structured"]["key"] == "usd"


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ("missing command", "No such file or directory"),
        ("command that exits", "a command server may have exited"),
        ("refused connection", "ConnectError"),
    ],
)
def test_a_server_that_cannot_start_is_named_in_one_line_and_its_tools_are_refused(
    broken: str,
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = {
        "missing command": {"command": str(tmp_path / "no-such-server")},
        "command that exits": {"command": sys.executable, "args": ["-c", "raise SystemExit(2)"]},
        "refused connection": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
    }[broken]
    good = stdio_server(tmp_path / "effects.txt", tmp_path / "crash")
    configure(monkeypatch, {"broken": entry, "reports": good})
    try:
        with caplog.at_level(logging.WARNING, logger="agentq.mcp"):
            names = configured_tool_names()
            configured_tool_names()  # within the recheck interval: not tried, not logged again
        assert LOOKUP in names and not any(n.startswith("mcp__broken__") for n in names)
        lines = [r for r in caplog.records if "broken" in r.getMessage()]
        assert len(lines) == 1 and lines[0].exc_info is None
        assert lines[0].getMessage().startswith("mcp server 'broken' cannot start: ")
        assert why in lines[0].getMessage() and "\n" not in lines[0].getMessage()
        closed = "the connection closed before the server answered" in lines[0].getMessage()
        assert closed == (broken == "command that exits")
        with pytest.raises(
            McpServerUnavailable, match=f"mcp server 'broken' cannot start: .*{why}"
        ):
            enabled_tool("mcp__broken__lookup")
        step = {"name": "look", "kind": "tool", "tool": "mcp__broken__lookup"}
        with pytest.raises(InvalidPlan, match="mcp server 'broken' cannot start"):
            parse_plan({"steps": [step]}, tools=names)
    finally:
        forget_all()


def test_the_allow_list_offers_only_the_tools_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = stdio_server(tmp_path / "effects.txt", tmp_path / "crash", tools=["lookup"])
    configure(monkeypatch, {"reports": entry})
    try:
        assert [n for n in configured_tool_names() if n.startswith("mcp__")] == [LOOKUP]
        with pytest.raises(ToolNotEnabled, match="not in the server's allow-list"):
            enabled_tool(FILE_REPORT)
        with pytest.raises(ToolNotEnabled, match="has no tool 'nothing'; it offers: lookup"):
            enabled_tool("mcp__reports__nothing")
    finally:
        forget_all()


def _server_processes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if str(REPORTS) in p.cmdline()]


def test_a_stdio_server_that_died_while_idle_is_started_again_before_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(monkeypatch, {"reports": stdio_server(tmp_path / "e.txt", tmp_path / "crash")})
    try:
        enabled_tool(LOOKUP).invoke(ctx(), {"key": "eur"})
        (first,) = _server_processes()
        first.kill()
        first.wait(10)
        time.sleep(0.3)  # the session sees its stdout close
        assert enabled_tool(LOOKUP).invoke(ctx(), {"key": "eur"})["structured"]["key"] == "eur"
        (second,) = _server_processes()
        assert second.pid != first.pid
    finally:
        forget_all()
    assert _server_processes() == []  # closing the session ended its server


def test_a_forked_child_opens_a_session_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's pool forks its processes: a child must not use the session its parent opened
    (its loop thread does not exist there, and the server's pipes are the parent's)."""
    configure(monkeypatch, {"reports": stdio_server(tmp_path / "e.txt", tmp_path / "crash")})
    try:
        enabled_tool(LOOKUP).invoke(ctx(), {"key": "eur"})
        (parents,) = _server_processes()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: call, say what it saw, and leave at once
            code = 1
            try:
                found = enabled_tool(LOOKUP).invoke(ctx(), {"key": "usd"})["structured"]
                servers = [p.pid for p in _server_processes()]
                os.write(write, json.dumps({"found": found, "servers": servers}).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as answer:
            said = json.loads(answer.read() or "{}")
        assert os.waitpid(pid, 0)[1] == 0
        assert said["found"] == {"key": "usd", "value": "US dollar"}
        assert said["servers"] and parents.pid not in said["servers"]  # its own server
        assert enabled_tool(LOOKUP).invoke(ctx(), {"key": "gbp"})["structured"]["key"] == "gbp"
        assert [p.pid for p in _server_processes()] == [parents.pid]  # the parent's, still used
    finally:
        forget_all()


def test_agentq_tools_lists_mcp_tools_and_names_a_server_that_cannot_start_in_one_line(
    tmp_path: Path,
) -> None:
    servers = {
        "reports": stdio_server(tmp_path / "e.txt", tmp_path / "crash"),
        "broken": {"command": str(tmp_path / "no-such-server")},
    }
    env = {
        **os.environ,
        "AGENTQ_MCP_SERVERS": json.dumps(servers),
        "AGENTQ_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPORTS.parents[2]),
        "COLUMNS": "250",
    }
    done = subprocess.run(
        [sys.executable, "-c", "from ops.cli import main; main()", "tools"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert LOOKUP in done.stdout and FILE_REPORT in done.stdout and "echo" in done.stdout
    assert "title: string, amount: number" in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mcp server 'broken' cannot start: [Errno 2] No such file")


def test_a_workers_start_check_lists_every_server_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`worker.app` runs `check_servers` before its pool forks: two servers that never answer
    hold it one start timeout (8 s here), not two. (At 2 s the good server, a Python process
    importing the MCP SDK, did not answer in time on a loaded machine.)"""
    monkeypatch.setenv("AGENTQ_MCP_START_TIMEOUT_S", "8")
    silent = {"command": "sleep", "args": ["30"]}
    good = stdio_server(tmp_path / "e.txt", tmp_path / "crash")
    configure(monkeypatch, {"silent-1": silent, "silent-2": silent, "reports": good})
    try:
        started = time.monotonic()
        found = catalogue.check_servers()
        assert time.monotonic() - started < 12  # one after the other: 16 s at least
        assert found == {
            "silent-1": "no answer within 8 s (AGENTQ_MCP_START_TIMEOUT_S)",
            "silent-2": "no answer within 8 s (AGENTQ_MCP_START_TIMEOUT_S)",
            "reports": None,
        }
        sessions.shutdown()  # as the worker does before it forks: the listing stays
        assert LOOKUP in configured_tool_names() and _server_processes() == []
        assert enabled_tool(LOOKUP).invoke(ctx(), {"key": "eur"})["structured"]["key"] == "eur"
    finally:
        forget_all()
