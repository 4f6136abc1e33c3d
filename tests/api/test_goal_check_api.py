"""A run's goal check in the API's run resource and the Python client (issue 31, item 5): the
verdict in words, its criteria with the pinned values put in, what was missing."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.client import Client

pytestmark = pytest.mark.integration
CRITERIA = ["Filed in ${facts.currency}", "The total is 473.43"]


def _echo(value: Any) -> dict[str, Any]:
    return {"name": "report", "kind": "tool", "tool": "echo", "args": {"value": value}}


def test_a_goal_not_met_reads_in_words_with_its_criteria_filled_in(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url, tokens["alice"]) as agentq:
        run_id = agentq.submit(
            "File the report",
            facts={"currency": "EUR"},
            plan={"steps": [_echo({"total": 473.43})]},
            success_criteria=CRITERIA,
            budgets={"replans": 0},
        ).run.id
        run = agentq.wait(run_id, timeout_s=90, or_review=True)
    assert run.status == "waiting_review"
    check = run.goal_check
    assert (check.state, check.met, check.plan_version) == ("not_met", False, 1)
    assert check.summary == "Goal not met (plan version 1, checked by rules, with no model call)"
    assert check.criteria == ["Filed in EUR", "The total is 473.43"]
    assert check.missing == ["'Filed in EUR': nothing the run delivered holds 'EUR'"]
    assert check.reason == "the run did not deliver 1 value the criteria name"
    assert check.checked_at is not None
    assert [(c.text, c.shown) for c in run.success_criteria] == list(
        zip(CRITERIA, ["Filed in EUR", "The total is 473.43"], strict=True)
    )


def test_a_run_with_nothing_to_check_says_so(api_url: str, tokens: dict[str, str]) -> None:
    with Client(api_url, tokens["alice"]) as agentq:
        run_id = agentq.submit("echo", plan={"steps": [_echo(1)]}).run.id
        run = agentq.wait(run_id, timeout_s=60)
    assert run.status == "succeeded"
    assert (run.goal_check.state, run.goal_check.met) == ("none", None)
    assert run.goal_check.headline.startswith("No goal check")
