"""The schedules page in headless Chromium (issue 32, item 2): a schedule added with the CLI (a
subprocess) is listed to its submitter with its timing and next due time, from the nav; Pause and
Resume change it in place; another user's submitter does not see it."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.support.console import Console

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
MakeToken = Callable[..., tuple[int, str]]


def _sign_in(page: Page, console: Console, token: str) -> None:
    page.goto(f"{console.ui_url}/login?next=/ui/runs")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{console.ui_url}/runs")


def test_a_submitter_pauses_and_resumes_its_schedule(
    console: Console, page: Page, make_token: MakeToken
) -> None:
    user = f"sched-ui-{uuid.uuid4().hex[:6]}"
    added = console.agentq(
        "schedule", "add", "weekday-report", "File the weekly report", "--user", user,
        "--cron", "0 9 * * 1-5", "--timezone", "Europe/Berlin",
    )  # fmt: skip
    assert "weekday-report" in added.stdout, added.stdout
    _, token = make_token("submitter", user, user)
    _sign_in(page, console, token)
    page.get_by_role("link", name="Schedules").click()
    row = page.locator("tr.schedule-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("weekday-report")
    expect(row.locator("td.next-due")).not_to_contain_text("paused")
    row.get_by_role("button", name="Pause").click()
    expect(row.locator("td.next-due")).to_contain_text("paused")
    row.get_by_role("button", name="Resume").click()
    expect(row.locator("td.next-due")).not_to_contain_text("paused")
    expect(row.get_by_role("button", name="Pause")).to_be_visible()

    _, other = make_token("submitter", f"other-{user}", f"other-{user}")
    page.context.clear_cookies()
    _sign_in(page, console, other)
    page.goto(f"{console.ui_url}/schedules")
    expect(page.locator("tr.schedule-row")).to_have_count(0)
