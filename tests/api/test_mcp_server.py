"""`agentq mcp` as an MCP client runs it (issue 30, item 8): the CLI in a subprocess over stdio,
with a real API token, against the session engine's API, driven by the `mcp` SDK's own client
(`stdio_client`, `ClientSession`). A submitter submits and follows a run; a reviewer's server
finds a gated call in the queue, sees its tool and arguments, and approves or edits it; what a
token's role may not do, and a bad argument, come back as one-line `isError` results."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from tests.api.conftest import MakeToken
from tests.support.doc_pages import block_matching
from tests.support.net import free_port

pytestmark = [pytest.mark.integration, pytest.mark.acceptance]
AGENTQ = shutil.which("agentq") or "agentq"
TOOLS = {
    "whoami",
    "submit_goal",
    "run_status",
    "list_runs",
    "cancel_run",
    "list_reviews",
    "show_review",
    "claim_review",
    "release_review",
    "approve",
    "reject",
    "respond",
    "edit_arguments",
    "edit_plan",
}
READ_ONLY = {"whoami", "run_status", "list_runs", "list_reviews", "show_review"}
Scenario = Callable[[], Awaitable[None]]


def documented_config() -> dict[str, Any]:
    """The `mcpServers` entry the docs give an MCP client (docs/how-to/mcp-server.md)."""
    block = block_matching(r'"mcpServers"', language="json")
    entry: dict[str, Any] = json.loads(block.body)["mcpServers"]["agentq"]
    return entry


@asynccontextmanager
async def agentq_mcp(token: str, *args: str, **env: str) -> AsyncIterator[ClientSession]:
    """An initialized session with `agentq mcp ARGS`, started as an MCP client starts it from
    the docs' configuration, with `token` in AGENTQ_API_TOKEN (and `env` over the docs')."""
    config = documented_config()
    assert (config["command"], config["args"]) == ("agentq", ["mcp"])
    params = StdioServerParameters(
        command=AGENTQ,
        args=[*config["args"], *args],
        env={**os.environ, **config["env"], "AGENTQ_API_TOKEN": token, **env},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The structured content of a tool's result, which must not be an error."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The one line of a tool's `isError` result."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult) and result.is_error, result
    line = text_of(result)
    assert "\n" not in line and "Traceback" not in line, line
    return line


def text_of(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def wait_status(
    session: ClientSession, run_id: int, statuses: set[str], timeout_s: float = 120
) -> dict[str, Any]:
    """`run_status` polled until the run is in one of `statuses`."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = await call(session, "run_status", run_id=run_id)
        if state["status"] in statuses:
            return state
        assert time.monotonic() < deadline, f"run {run_id} still {state['status']}"
        await anyio.sleep(0.3)


def gated_plan(effects: Path, marker: str) -> dict[str, Any]:
    args = {"path": str(effects), "marker": marker}
    return {"steps": [{"name": "pay", "kind": "tool", "tool": "append_marker", "args": args}]}


def test_a_submitter_submits_and_follows_a_run(api_url: str, make_token: MakeToken) -> None:
    user = f"mcp-{uuid.uuid4().hex[:8]}"
    token = make_token("submitter", user=user)

    async def scenario() -> None:
        async with agentq_mcp(token, "--url", api_url) as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == TOOLS
            for name, tool in listed.items():
                assert tool.description and tool.output_schema, name
                assert tool.annotations is not None, name
                assert tool.annotations.read_only_hint is (name in READ_ONLY), name
            assert listed["submit_goal"].input_schema["required"] == ["goal"]
            assert listed["approve"].annotations.destructive_hint is True  # type: ignore[union-attr]
            assert listed["claim_review"].annotations.destructive_hint is False  # type: ignore[union-attr]
            assert (await call(session, "whoami"))["user"] == user

            plan = {"steps": [{"name": "a", "kind": "tool", "tool": "noop", "args": {}}]}
            submitted = await call(session, "submit_goal", goal="nothing much", plan=plan)
            run_id = submitted["run_id"]
            assert submitted["user"] == user
            done = await wait_status(session, run_id, {"succeeded", "failed"})
            assert done["status"] == "succeeded", done
            assert [(s["name"], s["status"]) for s in done["steps"]] == [("a", "succeeded")]
            assert done["answer"] and done["escalation"] is None
            runs = (await call(session, "list_runs", limit=5))["runs"]
            assert run_id in [r["run_id"] for r in runs]

            line = await refused(session, "list_reviews")
            assert line.startswith("403") and "role 'submitter' may not do this" in line
            assert (await refused(session, "run_status", run_id=2_000_000_000)).startswith("404")
            line = await refused(session, "run_status", run_id="seven")
            assert line.startswith("run_status: run_id: ")
            line = await refused(session, "submit_goal", goal="x", plan={"steps": "a"})
            assert line == "submit_goal: plan.steps: Input should be a valid list", line
            line = await refused(session, "cancel_run", run_id=run_id)
            assert line.startswith("409"), line

    anyio.run(scenario)


def test_a_reviewer_approves_a_gated_call_and_edits_another(
    api_url: str, make_token: MakeToken, tmp_path: Path
) -> None:
    """The submitter's server submits two runs whose call waits for approval; the reviewer's
    server (the API's URL from AGENTQ_API_URL) finds the first in the queue, approves it, and
    runs the second with other arguments; the submitter's own `approve` is refused."""
    submitter = make_token("submitter", user=f"mcp-{uuid.uuid4().hex[:8]}")
    reviewer = make_token("reviewer")
    effects = tmp_path / "effects.txt"

    async def scenario() -> None:
        async with (
            agentq_mcp(submitter, "--url", api_url) as alice,
            agentq_mcp(reviewer, AGENTQ_API_URL=api_url) as rita,
        ):
            first = await gated(alice, effects, "pay 900")
            queue = (await call(rita, "list_reviews"))["reviews"]
            (listed,) = [r for r in queue if r["run_id"] == first["run_id"]]
            esc_id = listed["escalation_id"]
            assert first["escalation"]["escalation_id"] == esc_id
            shown = await call(rita, "show_review", escalation_id=esc_id)
            assert shown["reason"] == "approval_required" and shown["failed_step"] is None
            assert shown["call"]["tool"] == "append_marker"
            assert shown["call"]["arguments"] == {"path": str(effects), "marker": "pay 900"}
            assert "append_marker" in shown["call"]["why"]
            line = await refused(alice, "approve", escalation_id=esc_id)
            assert line.startswith("403") and "role 'submitter' may not do this" in line
            claimed = await call(rita, "claim_review", escalation_id=esc_id)
            assert claimed["review"]["escalation_id"] == esc_id
            decided = await call(rita, "approve", escalation_id=esc_id, comment="fine")
            assert (decided["decision"], decided["run_id"]) == ("approve", first["run_id"])
            done = await wait_status(alice, first["run_id"], {"succeeded", "failed"})
            assert done["status"] == "succeeded", done
            assert effects.read_text().splitlines() == ["pay 900"]

            second = await gated(alice, effects, "pay 800")
            esc_id = second["escalation"]["escalation_id"]
            line = await refused(rita, "edit_arguments", escalation_id=esc_id, arguments={})
            assert line.startswith("400") and "arguments" in line, line
            edited = {"path": str(effects), "marker": "pay 400"}
            decided = await call(rita, "edit_arguments", escalation_id=esc_id, arguments=edited)
            assert decided["decision"] == "edit"
            done = await wait_status(alice, second["run_id"], {"succeeded", "failed"})
            assert done["status"] == "succeeded", done
            assert effects.read_text().splitlines() == ["pay 900", "pay 400"]
            line = await refused(rita, "approve", escalation_id=esc_id)  # decided already
            assert line.startswith("409") and f"escalation {esc_id}" in line, line

    anyio.run(scenario)


async def gated(session: ClientSession, effects: Path, marker: str) -> dict[str, Any]:
    """Submit a run whose one call (`append_marker` `marker`) needs approval; its run_status
    once it waits for review."""
    submitted = await call(
        session,
        "submit_goal",
        goal=f"{marker} to the supplier",
        plan=gated_plan(effects, marker),
        approvals={"append_marker": "always"},
    )
    state = await wait_status(session, submitted["run_id"], {"waiting_review", "failed"})
    assert state["status"] == "waiting_review", state
    assert state["escalation"]["reason"] == "approval_required"
    return state


@pytest.mark.parametrize(
    ("token", "path", "said"),
    [
        ("aq_not-a-token", "", "error: the API at {url} refused the token (401: "),
        ("", "", "error: no API token: set AGENTQ_API_TOKEN"),
        ("aq_any", "/not-agentq", "error: {url} has no agentq API (GET /api/v1/me: 404)"),
    ],
)
def test_a_token_or_url_the_api_refuses_is_one_line_at_start(
    api_url: str, token: str, path: str, said: str
) -> None:
    done = subprocess.run(
        [AGENTQ, "mcp", "--url", api_url + path],
        env={**os.environ, "AGENTQ_API_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.PIPE,
    )
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.startswith(said.format(url=api_url + path)), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_api_that_does_not_answer_yet_is_said_by_each_tool() -> None:
    """An MCP client starts its servers when it starts, maybe before `agentq up`: the server
    starts, and each call says the API does not answer."""
    url = f"http://127.0.0.1:{free_port()}"

    async def scenario() -> None:
        async with agentq_mcp("aq_whoever", "--url", url) as session:
            line = await refused(session, "run_status", run_id=1)
            assert line.startswith(f"run_status: agentq's API at {url} does not answer ("), line

    anyio.run(scenario)


def test_over_streamable_http_until_interrupted(api_url: str, make_token: MakeToken) -> None:
    """`agentq mcp --http 127.0.0.1:PORT` serves the same tools at /mcp; Ctrl-C (SIGINT) stops
    it quietly."""
    port = free_port()
    server = subprocess.Popen(
        [AGENTQ, "mcp", "--url", api_url, "--http", f"127.0.0.1:{port}"],
        env={**os.environ, "AGENTQ_API_TOKEN": make_token("reviewer", name=f"h-{port}")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    async def scenario() -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                await anyio.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            assert (await call(s, "whoami"))["token"] == f"h-{port}"
            assert "reviews" in await call(s, "list_reviews", limit=1)

    try:
        anyio.run(scenario)
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == 0 and out == b"", (out, err)
    assert b"Traceback" not in err, err


def test_the_resource_of_a_run(api_url: str, make_token: MakeToken) -> None:
    token = make_token("admin")

    async def scenario() -> None:
        async with agentq_mcp(token, "--url", api_url) as session:
            plan = {"steps": [{"name": "a", "kind": "tool", "tool": "noop", "args": {}}]}
            submitted = await call(session, "submit_goal", goal="g", plan=plan, user="mcp-res")
            templates = (await session.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["agentq://runs/{run_id}"]
            read = await session.read_resource(f"agentq://runs/{submitted['run_id']}")
            (content,) = read.contents
            assert json.loads(content.text)["run_id"] == submitted["run_id"]  # type: ignore[union-attr]

    anyio.run(scenario)
