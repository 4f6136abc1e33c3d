"""A run whose plan calls an MCP server's tools succeeds through a real Celery worker, on an
engine of its own whose processes get `AGENTQ_MCP_SERVERS` in their environment: the worker's
pool process starts the test server (`tests/mcp_servers/reports.py`) over stdio when its first
step needs it, and the effectful tool's effect is made once, under the step's idempotency key. A
model step (its model a fake OpenAI-compatible server, `ops.fake_provider`) calls one too. The
effectful tool is not marked read-only, so with no approval policy set its calls wait for a
reviewer first (`models.approval_policy`: MCP tools' default); the read-only one runs at once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import select

from models.db import session_scope
from models.engine import submissions
from models.engine.submissions import RunRequest
from models.front import commands
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import Escalation
from ops.fake_provider import FakeOpenAI, tool_calls
from tests.integration.conftest import fake_model_env, other_engine, run_steps, wait_for_run
from tests.support.mcp import effects_of, stdio_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def effects(fake: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The effects file of the engine's test server, whose workers run with it configured."""
    path = tmp_path_factory.mktemp("mcp") / "effects.txt"
    servers = {"reports": stdio_server(path, path.with_name("crash"))}
    env = fake_model_env(fake.url, AGENTQ_MCP_SERVERS=json.dumps(servers))
    with other_engine(env, worker_concurrency=1):
        yield path


def submit(steps: list[dict[str, object]], tools: list[str]) -> int:
    plan = parse_plan({"steps": steps}, tools=tools)
    settings = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    request = RunRequest(user_id="mcp-tester", goal="file the report", plan=plan)
    return submissions.submit(request, settings=settings).run_id


def test_a_plan_calling_mcp_tools_succeeds_through_a_worker(effects: Path) -> None:
    steps = [
        {
            "name": "currency",
            "kind": "tool",
            "tool": "mcp__reports__lookup",
            "args": {"key": "eur"},
        },
        {
            "name": "report",
            "kind": "tool",
            "tool": "mcp__reports__file_report",
            "args": {"title": "Lisbon", "amount": 473.43},
        },
        {
            "name": "said",
            "kind": "tool",
            "tool": "echo",
            "args": {"value": "${steps.currency.structured}"},
        },
    ]
    run_id = submit(steps, ["mcp__reports__lookup", "mcp__reports__file_report", "echo"])
    _approve_when_asked(run_id, effects)
    run = wait_for_run(run_id, ("succeeded", "failed"), timeout_s=120)
    results = {s.name: s for s in run_steps(run_id)}
    assert run.status == "succeeded", {n: (s.status, s.error) for n, s in results.items()}
    assert results["currency"].result["structured"] == {"key": "eur", "value": "euro"}
    assert results["report"].result["structured"]["repeated"] is False
    assert results["said"].result == {"value": {"key": "eur", "value": "euro"}}
    report_id = results["report"].id
    assert f"run-{run_id}/step-{report_id}\tLisbon\t473.43" in effects_of(effects)


def test_a_model_step_calls_an_mcp_tool_with_its_calls_idempotency_key(
    fake: FakeOpenAI, effects: Path
) -> None:
    mark = f"MARK-{uuid.uuid4().hex[:6]}"
    call = ("mcp__reports__file_report", '{"title": "Porto", "amount": 12.5}')
    fake.script(tool_calls(call), when=mark)
    step = {
        "name": "filer",
        "kind": "model",
        "instruction": f"{mark}: file the Porto report",
        "tools": ["mcp__reports__file_report"],
    }
    run_id = submit([step], ["mcp__reports__file_report"])
    _approve_when_asked(run_id, effects)
    run = wait_for_run(run_id, ("succeeded", "failed"), timeout_s=120)
    (filer,) = run_steps(run_id)
    assert run.status == "succeeded", (filer.status, filer.error)
    (made,) = filer.result["tool_calls"]
    assert made["tool"] == "mcp__reports__file_report"
    assert made["arguments"] == {"title": "Porto", "amount": 12.5}
    assert made["result"]["structured"]["repeated"] is False
    assert f"run-{run_id}/step-{filer.id}/call-1\tPorto\t12.5" in effects_of(effects)


def _approve_when_asked(run_id: int, effects: Path) -> None:
    """Wait for the run's gated call to file a report, check nothing was filed, and approve."""
    assert wait_for_run(run_id, timeout_s=120).status == "waiting_review"
    with session_scope() as session:
        esc = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
    assert (esc.reason, esc.detail["tool"]) == ("approval_required", "mcp__reports__file_report")
    assert "is not marked readOnlyHint: true" in esc.detail["why"]
    assert f"run-{run_id}/" not in "\n".join(effects_of(effects))
    commands.approve(esc.id or 0, reviewer="ann")
