"""Forking a run from a step by its faces (issue 32, item 1): the CLI as a subprocess (`agentq run
fork`, then `run show` on both runs), and the console in headless Chromium ("Fork from here" on
a step, which opens the new run, its copied step marked); a reviewer is offered no fork."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.support.console import AGENTQ, Console, submitted_id, wait_for_status

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
MakeToken = Callable[..., tuple[int, str]]


def _succeeded_run(console: Console, user: str) -> int:
    """A run of two `echo` steps, `fetch` then `report` (the pinned currency), once succeeded."""
    steps = [
        {"name": "fetch", "kind": "tool", "tool": "echo", "args": {"value": 42}},
        {"name": "report", "kind": "tool", "tool": "echo", "args": {"value": "${facts.cur}"}},
    ]
    plan = console.home / f"fork-plan-{user}.json"
    plan.write_text(json.dumps({"steps": steps}))
    args = ["--user", user, "--plan", str(plan), "--fact", "cur=GBP"]
    run_id = submitted_id(console.agentq("run", "submit", "report it", *args).stdout)
    wait_for_status(console, run_id, ("succeeded",))
    return run_id


def test_the_cli_forks_a_run_and_both_runs_show_it(console: Console) -> None:
    source = _succeeded_run(console, f"forkcli-{uuid.uuid4().hex[:6]}")
    said = console.agentq("run", "fork", str(source), "--from", "report", "--fact", "cur=EUR")
    found = re.search(r"run (\d+) forked from run (\d+) at step 'report' \(1 copied\)", said.stdout)
    assert found is not None, said.stdout
    forked = int(found[1])
    assert wait_for_status(console, forked, ("succeeded",)).final_result is not None
    shown = console.agentq("run", "show", str(forked)).stdout
    assert f"forked from run {source} at step 'report' (1 step copied)" in " ".join(shown.split())
    assert "copied" in shown.split("fetch", 1)[1].splitlines()[0]  # its try column
    assert f"forked as run {forked}" in console.agentq("run", "show", str(source)).stdout
    refused = subprocess.run(
        [AGENTQ, "run", "fork", str(source), "--from", "nope"],
        env=console.env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode == 2, refused
    assert f"from_step: run {source} has no step 'nope'" in " ".join(refused.stderr.split())


def test_fork_from_here_opens_the_new_run_with_its_copied_step(
    console: Console, page: Page, make_token: MakeToken
) -> None:
    user = f"forkui-{uuid.uuid4().hex[:6]}"
    source = _succeeded_run(console, user)
    _, token = make_token("submitter", user, user)
    page.goto(f"{console.ui_url}/login?next=/ui/runs/{source}")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{console.ui_url}/runs/{source}")
    row = page.locator("tr.step-row[data-step='report']")
    row.get_by_role("button", name="Fork from here").click()
    expect(page).not_to_have_url(f"{console.ui_url}/runs/{source}")
    forked = int(page.url.rsplit("/", 1)[1])
    expect(page.locator(".fork-lineage")).to_contain_text(
        f"forked from run {source} at step report (1 copied)"
    )
    expect(page.locator("tr.step-row[data-step='fetch'] .tag")).to_have_text("copied")
    assert wait_for_status(console, forked, ("succeeded",))
    page.goto(f"{console.ui_url}/runs/{source}")
    expect(page.locator(".fork-lineage")).to_contain_text(f"forked as run {forked}")


def test_a_reviewer_is_offered_no_fork(console: Console, page: Page, make_token: MakeToken) -> None:
    source = _succeeded_run(console, f"forkrev-{uuid.uuid4().hex[:6]}")
    _, token = make_token("reviewer", f"rev-{uuid.uuid4().hex[:6]}")
    page.goto(f"{console.ui_url}/login?next=/ui/runs/{source}")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{console.ui_url}/runs/{source}")
    expect(page.locator("tr.step-row[data-step='report']")).to_be_visible()
    expect(page.get_by_role("button", name="Fork from here")).to_have_count(0)
