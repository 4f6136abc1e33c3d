"""The run page tells the run's goal check in headless Chromium (issue 31, item 5): met or not, by
whom, the criteria with the pinned values put in (never `${facts.KEY}`), why and what was
missing, in the words `agentq run show` and the API use (`models.engine.goal_reports`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from models.engine import transitions
from models.states import RUN_TERMINAL
from tests.support.console import Console, submitted_id, wait_for_status

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
MakeToken = Callable[..., tuple[int, str]]
CRITERION = "Filed in ${facts.currency}"


@pytest.fixture(scope="module")
def left_open(console: Console) -> Iterator[list[int]]:
    """Runs left waiting for review: cancelled at the module's end, so the inbox the README's
    screenshots show (tests/browser/test_review_console.py) does not list them."""
    runs: list[int] = []
    yield runs
    with console.db() as session:
        for run_id in runs:
            run = transitions.lock_run(session, run_id)
            if run is not None and run.status not in RUN_TERMINAL:
                transitions.cancel_run(session, run_id)


def _run(console: Console, user: str, report: dict[str, Any], status: str) -> int:
    """A run filing `report` (an `echo`), with `currency=EUR` pinned and `CRITERION`, no replans;
    its id once it is `status`."""
    plan = console.home / f"plan-{user}-{status}.json"
    steps = [{"name": "report", "kind": "tool", "tool": "echo", "args": {"value": report}}]
    plan.write_text(json.dumps({"steps": steps}))
    args = ["--user", user, "--plan", str(plan), "--fact", "currency=EUR"]
    args += ["--criterion", CRITERION, "--replans", "0"]
    run_id = submitted_id(console.agentq("run", "submit", "file it", *args).stdout)
    wait_for_status(console, run_id, (status,))
    return run_id


def _open(page: Page, console: Console, token: str, run_id: int) -> None:
    page.goto(f"{console.ui_url}/login?next=/ui/runs/{run_id}")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{console.ui_url}/runs/{run_id}")


def test_the_run_page_tells_a_goal_not_met_and_one_met(
    console: Console, page: Page, make_token: MakeToken, left_open: list[int]
) -> None:
    user = f"goals-{uuid.uuid4().hex[:6]}"
    unmet = _run(console, user, {"total": 473.43}, "waiting_review")
    left_open.append(unmet)
    met = _run(console, user, {"total": 473.43, "currency": "EUR"}, "succeeded")
    _, token = make_token("submitter", user, user)

    _open(page, console, token, unmet)
    check = page.locator("dl.goal-check")
    expect(check).to_have_attribute("data-state", "not_met")
    expect(check.locator("dd.goal-goal-check")).to_contain_text(
        "not met Goal not met (plan version 1, checked by rules, with no model call)"
    )
    expect(check.locator("dd.goal-criteria li")).to_have_text(["Filed in EUR"])
    expect(check.locator("dd.goal-missing li")).to_have_text(
        ["'Filed in EUR': nothing the run delivered holds 'EUR'"]
    )
    assert "${facts." not in page.locator("main").inner_text()

    page.goto(f"{console.ui_url}/runs/{met}")
    expect(check).to_have_attribute("data-state", "met")
    expect(check.locator("dd.goal-goal-check")).to_contain_text(
        "Goal met (plan version 1, checked by the offline provider, by the values the criteria"
    )
    expect(check.locator("dd.goal-missing")).to_have_count(0)
