"""Issue 9, findings 1 and 2, against `agentq up` with its default settings.

1. A submitter's plan called the built-in `append_marker` on any host path and wrote a `.pth` file
   into site-packages (code execution at the next Python start); reviewers (plan edit) and model
   steps listing the tool reached it too, and its errors told which paths exist.
2. `${steps...}` references turned a 66 KB request into an 18 MB step result, and
   `GET /api/v1/runs/{id}` returned all of it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import select

from models.access import api_tokens
from models.plans.tools import DEFAULT_TOOL_MODULES
from models.tables import Escalation, Run
from tests.support.console import (
    Console,
    csrf_of,
    escalate_run,
    running_console,
    wait_for_status,
)

pytestmark = pytest.mark.security
MakeToken = Callable[..., tuple[int, str]]
SignIn = Callable[[str], httpx.Client]
CAP = 256 * 1024  # AGENTQ_STEP_DATA_MAX_BYTES's default
AGENTQ = shutil.which("agentq") or "agentq"


@pytest.fixture
def pth_file() -> Iterator[Path]:
    """A `.pth` path in the site-packages this stack's workers start from; removed afterwards
    whatever happened (its content would run at every Python start)."""
    path = Path(sysconfig.get_paths()["purelib"]) / f"agentq_probe_{uuid.uuid4().hex[:8]}.pth"
    yield path
    path.unlink(missing_ok=True)


def write_pth(path: Path, name: str = "w") -> dict[str, Any]:
    """The issue's step: `append_marker` on a `.pth` path (the marker here is a harmless
    comment line)."""
    args = {"path": str(path), "marker": "# agentq security probe"}
    return {"name": name, "kind": "tool", "tool": "append_marker", "args": args}


LURED = {  # a model step offered the tool: a prompt injection away from calling it
    "name": "m",
    "kind": "model",
    "instruction": "Write the file.",
    "tools": ["append_marker"],
}


def api(console: Console, token: str) -> httpx.Client:
    base = console.ui_url.removesuffix("/ui")
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=base, headers=headers, timeout=60, trust_env=False)


def runs_of(console: Console, user: str) -> int:
    with console.db() as session:
        return len(session.exec(select(Run).where(Run.user_id == user)).all())


def assert_refused_naming_append_marker(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "InvalidPlan"
    assert "unknown tool 'append_marker'" in body["detail"]


# -- finding 1: no tool touches the host -----------------------------------------------------


def test_a_submitters_pth_write_is_refused_naming_the_tool(
    console: Console, make_token: MakeToken, pth_file: Path
) -> None:
    user = f"mallory-{uuid.uuid4().hex[:6]}"
    _, raw = make_token("submitter", user, user)
    with api(console, raw) as mallory:
        plan = {"steps": [write_pth(pth_file)]}
        refused = mallory.post("/api/v1/runs", json={"goal": "w", "plan": plan})
        assert_refused_naming_append_marker(refused)
        lured = mallory.post("/api/v1/runs", json={"goal": "w", "plan": {"steps": [LURED]}})
        assert_refused_naming_append_marker(lured)
        assert "steps.0.tools: unknown tool 'append_marker'" in lured.json()["detail"]
    assert runs_of(console, user) == 0  # nothing stored
    assert not pth_file.exists()


def test_a_reviewers_plan_edit_cannot_reach_the_tool_in_api_cli_or_console(
    console: Console, make_token: MakeToken, sign_in: SignIn, pth_file: Path
) -> None:
    run_id, esc_id = escalate_run(console, user=f"edited-{uuid.uuid4().hex[:6]}")
    _, raw = make_token("reviewer", f"rev-{uuid.uuid4().hex[:6]}")
    direct = {"steps": [write_pth(pth_file)]}
    lured = {"steps": [LURED]}
    with api(console, raw) as rita:
        for plan in (direct, lured):
            edited = rita.post(f"/api/v1/reviews/{esc_id}/edit", json={"plan": plan})
            assert_refused_naming_append_marker(edited)
    plan_file = console.home / f"edit-{esc_id}.json"
    plan_file.write_text(json.dumps(direct))
    cli = subprocess.run(
        [AGENTQ, "review", "edit", str(esc_id), "--plan", str(plan_file)],
        env={**console.env, "AGENTQ_REVIEWER": "cli-rev"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert cli.returncode == 2, (cli.stdout, cli.stderr)
    assert "unknown tool 'append_marker'" in cli.stdout + cli.stderr
    browser = sign_in(raw)
    csrf = csrf_of(browser.get(f"/ui/reviews/{esc_id}").text)
    form = {"plan": json.dumps(direct), "csrf_token": csrf}
    shown = browser.post(f"/ui/reviews/{esc_id}/edit", data=form)
    assert shown.status_code == 400 and "unknown tool &#39;append_marker&#39;" in shown.text
    with console.db() as session:
        esc = session.get(Escalation, esc_id)
        assert esc is not None and esc.decision is None  # still waiting: nothing was decided
    assert wait_for_status(console, run_id, ("waiting_review",)).status == "waiting_review"
    assert not pth_file.exists()


# -- finding 2: no result amplifies ----------------------------------------------------------


LARGEST_VALUES = sa.text(
    """
    SELECT greatest(
        (SELECT max(octet_length(args::text)) FROM steps WHERE run_id = :run),
        (SELECT max(octet_length(result::text)) FROM steps WHERE run_id = :run),
        (SELECT max(octet_length(detail::text)) FROM run_events WHERE run_id = :run),
        (SELECT max(octet_length(detail::text)) FROM escalations WHERE run_id = :run),
        (SELECT max(octet_length(content)) FROM messages WHERE run_id = :run),
        (SELECT octet_length(final_result::text) FROM runs WHERE id = :run)
    )
    """
)


def test_references_cannot_amplify_a_result_past_the_cap(
    console: Console, make_token: MakeToken
) -> None:
    user = f"amplifier-{uuid.uuid4().hex[:6]}"
    _, raw = make_token("submitter", user, user)
    value = {"name": "s0", "kind": "tool", "tool": "echo", "args": {"value": "a" * 60_000}}
    many = ["${steps.s0.value}"] * 300  # 18 MB once resolved
    copies = {"name": "s1", "kind": "tool", "tool": "echo", "args": {"value": many}}
    body = {"goal": "amplify", "plan": {"steps": [value, copies]}, "budgets": {"replans": 0}}
    assert len(json.dumps(body)) < 70_000  # the 66 KB request
    with api(console, raw) as mallory:
        created = mallory.post("/api/v1/runs", json=body)
        assert created.status_code == 201, created.text
        run_id = created.json()["run"]["id"]
        wait_for_status(console, run_id, ("waiting_review", "failed"))
        detail = mallory.get(f"/api/v1/runs/{run_id}")
    assert detail.status_code == 200 and len(detail.content) < 64 * 1024  # was 18 MB
    s0, s1 = detail.json()["steps"]
    assert s0["status"] == "succeeded" and s0["shortened"] == ["args", "result"]
    assert s1["status"] == "failed" and s1["result"] is None
    assert s1["error"] == (
        "the resolved arguments pass the cap of 262,144 bytes as JSON "
        "(AGENTQ_STEP_DATA_MAX_BYTES) at ${steps.s0.value}; refer to less data"
    )
    assert s1["attempt"] == 1  # not retried: it would build the same data again
    with console.db() as session:
        largest = session.execute(LARGEST_VALUES, {"run": run_id}).scalar_one()
    assert largest <= CAP


RUN_BUDGET = 8 * 1024 * 1024  # AGENTQ_RUN_STEP_DATA_MAX_BYTES's default
# what each step of the run stores, as compact JSON (`models.plans.step_data.json_bytes`)
# (a step not run yet holds JSON null: the ORM writes None so)
STORED = sa.text(
    "SELECT name, result FROM steps WHERE run_id = :run AND jsonb_typeof(result) = 'object'"
)


def test_many_results_within_the_step_cap_stop_at_the_runs_step_data_budget(
    console: Console, make_token: MakeToken
) -> None:
    """Issue 27, item 5: a 68 KB request made 49 steps of 240 KB each, 11.8 MB of results. The
    48 copies run side by side (each waits only for the seed), so their charges race."""
    user = f"hoarder-{uuid.uuid4().hex[:6]}"
    _, raw = make_token("submitter", user, user)
    seed = {"name": "s0", "kind": "tool", "tool": "echo", "args": {"value": "a" * 60_000}}
    four = {"value": ["${steps.s0.value}"] * 4}  # 240,023 bytes once resolved, under the cap
    copies = [
        {"name": f"s{i}", "kind": "tool", "tool": "echo", "args": four, "after": ["s0"]}
        for i in range(1, 49)
    ]
    body = {"goal": "hoard", "plan": {"steps": [seed, *copies]}, "budgets": {"replans": 0}}
    assert len(json.dumps(body)) < 70_000  # the 68 KB request
    with api(console, raw) as mallory:
        created = mallory.post("/api/v1/runs", json=body)
        assert created.status_code == 201, created.text
        run_id = created.json()["run"]["id"]
        wait_for_status(console, run_id, ("waiting_review", "failed", "succeeded"))
        detail = mallory.get(f"/api/v1/runs/{run_id}").json()
    assert detail["status"] == "waiting_review"
    assert detail["escalations"][0]["reason"] == "step_data_budget_spent"
    refused = [s for s in detail["steps"] if s["status"] == "failed"]
    assert refused and all(s["result"] is None for s in refused)
    assert "do not fit run" in refused[0]["error"]
    assert "(AGENTQ_RUN_STEP_DATA_MAX_BYTES)" in refused[0]["error"]
    with console.db() as session:
        results = session.execute(STORED, {"run": run_id}).all()
        run = session.get(Run, run_id)
        total = session.execute(
            sa.text("SELECT bytes FROM user_step_data WHERE user_id = :u"), {"u": user}
        ).scalar_one()
    stored = sum(len(json.dumps(r, separators=(",", ":")).encode()) for _, r in results)
    assert run is not None and run.step_data_bytes == stored == total  # each with its charge
    assert RUN_BUDGET - 240_023 < stored <= RUN_BUDGET  # was 11.8 MB
    assert len(results) == 35  # the seed and 34 copies
    spend = detail["spend"]
    assert (spend["step_data_bytes"], spend["step_data_limit_bytes"]) == (stored, RUN_BUDGET)


# -- finding 1: errors do not tell which host paths exist ------------------------------------


def test_a_tools_internal_error_shows_no_host_path(make_token: MakeToken) -> None:
    """The test-only tool is enabled on a stack of its own; its OSError names a path."""
    modules = json.dumps([*DEFAULT_TOOL_MODULES, "tests.support.tools"])
    missing = f"/nonexistent-{uuid.uuid4().hex[:8]}/secret-dir/notes.txt"
    with running_console({"AGENTQ_TOOL_MODULES": modules}) as console:
        with console.db() as session:
            _, raw = api_tokens.create_token(session, name="probe", role="admin", user_id=None)
        step = write_pth(Path(missing))
        plan = {"steps": [step]}
        body = {"goal": "probe", "user": "prober", "plan": plan, "budgets": {"replans": 0}}
        with api(console, raw) as admin:
            created = admin.post("/api/v1/runs", json=body)
            assert created.status_code == 201, created.text
            run_id = created.json()["run"]["id"]
            wait_for_status(console, run_id, ("waiting_review", "failed"))
            detail = admin.get(f"/api/v1/runs/{run_id}")
            reviews = admin.get("/api/v1/reviews", params={"status": "all"})
        (failed,) = detail.json()["steps"]
        assert failed["error"] == (
            "tool 'append_marker' failed with an internal error (FileNotFoundError); "
            "see the worker log"
        )
        shown = detail.json()
        queue = reviews.json()
        assert [s["args"]["path"] for s in shown["steps"]] == [missing]  # the caller's own input
        for step in [*shown["steps"], *(r["failed_step"] for r in queue if r["failed_step"])]:
            step.pop("args")
        assert "secret-dir" not in json.dumps(shown) + json.dumps(queue)  # events, escalations
        with console.db() as session:
            esc = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
            assert esc.detail["error"] == failed["error"]
        worker_log = (console.home / "logs" / "worker.log").read_text(errors="replace")
        assert missing in worker_log and "tool.crashed" in worker_log  # the whole story
