"""A reviewer works the demo's escalation in headless Chromium: sign in, open it from the inbox,
fix the plan, approve, and watch the run complete. Saves the README's screenshots."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ops.demo import DEMO_FACTS, DEMO_GOAL, DEMO_USER, SCENARIOS
from tests.support.console import Console, submitted_id, wait_for_status

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
RUN_DONE_MS = 120_000
PHONE_WIDTH_PX = 390


def _submit_demo_scenario_2(console: Console) -> int:
    """What `agentq demo` submits for its second scenario (November, a replan budget of 1)."""
    facts = {**DEMO_FACTS, "trip": SCENARIOS[1].trip}
    args = ["run", "submit", DEMO_GOAL, "--user", DEMO_USER, "--replans", "1"]
    for key, value in facts.items():
        args += ["--fact", f"{key}={value}"]
    return submitted_id(console.agentq(*args).stdout)


def test_a_reviewer_fixes_the_plan_approves_and_the_run_completes(
    console: Console, make_token: Callable[..., tuple[int, str]], page: Page, tmp_path: Path
) -> None:
    _, token = make_token("reviewer", "rita")
    run_id = _submit_demo_scenario_2(console)
    assert wait_for_status(console, run_id, ("waiting_review",)).replans_used == 1

    page.goto(f"{console.ui_url}/reviews")
    expect(page).to_have_url(f"{console.ui_url}/login?next=/ui/reviews")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Review inbox")).to_be_visible()
    row = page.locator("tr.inbox-row").filter(has_text=f"run {run_id}")
    expect(row).to_contain_text("replan budget spent")
    expect(row).to_contain_text("rate")
    expect(row).to_contain_text("in 23h")  # the escalation's deadline: 24 h by default
    page.reload()  # without the one-time "signed in" message
    page.screenshot(path=str(SCREENSHOTS / "inbox.png"), full_page=True)

    row.get_by_role("link").first.click()
    expect(page.locator(".why-text")).to_contain_text("no replans left")
    expect(page.locator(".error-block")).to_contain_text("no cached rate table for 2026-11")
    expect(page.locator("dl.facts").last).to_contain_text("CC-4410")
    page.screenshot(path=str(SCREENSHOTS / "review.png"), full_page=True)
    _check_on_a_phone(page, tmp_path / "review-phone.png")

    # The current plan in waves: the two rate lookups (the failed live one, and the cached one
    # the replan put in its place) and attaching the receipts all wait only for the receipts.
    wave_2 = page.locator("table.steps tr[data-wave='2']")
    expect(wave_2).to_have_count(3)
    expect(wave_2.filter(has_text="attach")).to_have_count(1)
    submit_row = page.locator("table.steps tr[data-step='submit']")
    expect(submit_row.locator("td.after-cell")).to_have_text("convert, attach")

    plan = page.locator("#plan")
    prefilled = json.loads(plan.input_value())
    # Every step not yet run (attach ran beside the rate lookup), each with its `after`.
    assert [(s["name"], s["after"]) for s in prefilled["steps"]] == [
        ("rate", ["receipts"]),
        ("convert", ["receipts", "rate"]),
        ("submit", ["convert", "attach"]),
    ]
    assert prefilled["steps"][0]["tool"] == "cached_rate"

    broken = {"steps": [{**prefilled["steps"][0], "tool": "cached_rates"}]}
    plan.fill(json.dumps(broken))
    page.get_by_role("button", name="Approve with this plan").click()
    expect(page.locator("#edit-form .problem")).to_contain_text("steps.0.tool: unknown tool")
    assert "cached_rates" in page.locator("#plan").input_value()  # what was typed is kept

    # November has no cached table yet: the reviewer files at October's, the latest there is.
    prefilled["steps"][0]["args"]["month"] = "2026-10"
    page.locator("#plan").fill(json.dumps(prefilled, indent=2))
    page.locator("#edit-comment").fill("November's table is not out yet; use October's rate")
    page.get_by_role("button", name="Approve with this plan").click()

    expect(page).to_have_url(f"{console.ui_url}/runs/{run_id}")
    expect(page.locator(".run-status")).to_have_attribute(
        "data-status", "succeeded", timeout=RUN_DONE_MS
    )
    expect(page.locator('tr[data-step="submit"]')).to_contain_text("473.43")
    expect(page.locator(".version")).to_have_count(3)  # planner, replanner, reviewer
    expect(page.locator(".version").nth(1).locator(".mark-new")).to_contain_text("cached_rate")
    expect(page.locator(".version").nth(2)).to_contain_text("reviewer")
    # A graph: in the reviewer's version the new rate lookup runs in one wave with attach.
    together = page.locator(".version.current .wave-shared[data-wave='2']")
    expect(together.locator(".plan-step[data-step='attach']")).to_have_count(1)
    expect(together.locator(".plan-step.mark-new[data-step='rate']")).to_have_count(1)
    expect(together.locator(".wave-no")).to_have_attribute("title", re.compile("run together"))
    expect(page.locator("tr[data-step='convert'] td.after-cell")).to_have_text("receipts, rate")
    expect(page.locator(".timeline")).to_contain_text("escalation.decided")
    page.screenshot(path=str(SCREENSHOTS / "run.png"), full_page=True)
    assert wait_for_status(console, run_id, ("succeeded",)).final_result
    _check_on_a_phone(page, tmp_path / "run-phone.png", answer=True)
    page.goto(f"{console.ui_url}/runs")
    _check_on_a_phone(page, tmp_path / "runs-phone.png")


def _check_on_a_phone(page: Page, shot: Path, *, answer: bool = False) -> None:
    """At a phone's width the header wraps (Sign out stays on screen), the page never scrolls
    sideways (wide tables scroll inside their card), and an answer's long tokens wrap. Saves a
    screenshot to `shot` (not the README's) and restores the viewport."""
    desktop = page.viewport_size
    page.set_viewport_size({"width": PHONE_WIDTH_PX, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE_WIDTH_PX
    box = page.get_by_role("button", name="Sign out").bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE_WIDTH_PX
    if answer:
        fits = "el => el.scrollWidth <= el.clientWidth"
        assert page.locator(".callout .answer").evaluate(fits)
    page.screenshot(path=str(shot), full_page=True)
    assert desktop is not None
    page.set_viewport_size(desktop)
