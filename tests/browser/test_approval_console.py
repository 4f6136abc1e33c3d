"""A gated tool call in the console (issue 30, item 4): submitted with the CLI, its run tightening
the approval policy, the call waits in the review queue; in headless Chromium a reviewer sees the
tool, what it does, why it was gated and its arguments, edits the arguments (a wrong one is
refused, what was typed kept) and the call runs with them once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from sqlmodel import select

from models.tables import Escalation, Step
from tests.support.console import Console, submitted_id, wait_for_status

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]


def test_a_reviewer_edits_a_gated_calls_arguments_and_it_runs_with_them(
    console: Console, make_token: Callable[..., tuple[int, str]], page: Page
) -> None:
    _, token = make_token("reviewer", "gus")
    plan = Path(console.home) / "plan-gated.json"
    step = {"name": "tell", "kind": "tool", "tool": "echo", "args": {"value": "pay 900"}}
    plan.write_text(json.dumps({"steps": [step]}))
    gate = json.dumps({"echo": {"when": [{"arg": "value", "startswith": "pay"}]}})
    out = console.agentq(
        "run",
        "submit",
        "tell the payee",
        "--user",
        "gated",
        "--plan",
        str(plan),
        "--approvals",
        gate,
    )
    run_id = submitted_id(out.stdout)
    wait_for_status(console, run_id, ("waiting_review",))
    with console.db() as session:
        esc_id = session.exec(select(Escalation.id).where(Escalation.run_id == run_id)).one()
    shown = console.agentq("run", "show", str(run_id)).stdout
    assert "approval_required" in shown

    page.goto(f"{console.ui_url}/reviews/{esc_id}")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    card = page.locator("#gated-call")
    expect(card).to_contain_text("waiting for your approval")
    expect(card).to_contain_text("Return `value` unchanged.")
    expect(card).to_contain_text('value "pay 900" startswith "pay"')
    expect(card).to_contain_text("pay 900")

    page.locator("#arguments").fill('{"valu": "pay 450"}')  # echo takes `value` alone
    page.get_by_role("button", name="Run with these arguments").click()
    expect(page.locator("#edit-form .problem")).to_contain_text("value: required but missing")
    assert "valu" in page.locator("#arguments").input_value()  # what was typed is kept

    page.locator("#arguments").fill('{"value": "pay 450"}')
    page.get_by_role("button", name="Run with these arguments").click()
    expect(page).to_have_url(f"{console.ui_url}/runs/{run_id}")
    assert wait_for_status(console, run_id, ("succeeded", "failed")).status == "succeeded"
    with console.db() as session:
        ran = session.exec(select(Step).where(Step.run_id == run_id)).one()
        assert ran.result == {"value": "pay 450"}
    page.goto(f"{console.ui_url}/reviews/{esc_id}")
    expect(page.locator("#gated-call")).to_contain_text("edited")
    expect(page.locator("#gated-call")).to_contain_text("pay 450")
