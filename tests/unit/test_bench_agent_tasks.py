"""The agent-tasks benchmark's goals, tools and outcome checks (ops/bench/agent_*.py); no
services: the expected totals agree with the bench's data, every planned goal finds its
playbook, and a run is judged by its rows (a false success is a succeeded run that misses)."""

from __future__ import annotations

import argparse
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from models.errors import RetryableToolError, ToolError
from models.plans.playbooks import find_playbook
from models.plans.tools import ToolContext
from ops.bench import agent_tasks, agent_tools
from ops.bench.agent_goals import GOALS, Expected, Goal
from ops.bench.agent_outcomes import Checked, Observed, check, learning_line, table_row, totals
from ops.bench.agent_tasks import selected

CTX = ToolContext(run_id=1, step_id=2, step_name="s", attempt=1, tries_of_name=1, facts={})
LISBON_USD = Decimal("514.60")  # worker/tools/expenses.py: the demo's four receipts
LISBON_OCT_RATE = Decimal("0.92")  # worker/tools/data/rates.json, 2026-10


def _rate(trip: dict[str, Any], quote: str) -> Decimal:
    """The rate the claim plan ends up with: live unless the service is down for the base."""
    data = agent_tools.trips_data()
    base, pair = trip["currency"], f"{trip['currency']}/{quote}"
    if base == quote:
        return Decimal(1)
    if base not in data["live_down_for"]:
        return Decimal(str(data["live_rates"][pair]))
    return Decimal(str(data["rate_tables"][trip["month"]][pair]))


def _total(goal: Goal) -> float:
    if goal.facts["trip"].startswith("lisbon"):
        amount = LISBON_USD * LISBON_OCT_RATE
    else:
        trip = agent_tools.trips_data()["trips"][goal.facts["trip"]]
        amount = sum(Decimal(str(line[1])) for line in trip["receipts"]) * _rate(
            trip, goal.facts["currency"]
        )
    return float(amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


FILED = [g for g in GOALS if g.expected.kind == "met" and g.expected.effect == "submit_report"]


@pytest.mark.parametrize("goal", FILED, ids=[g.id for g in FILED])
def test_each_expected_total_is_what_the_receipts_and_rates_give(goal: Goal) -> None:
    assert goal.expected.fields["total"] == _total(goal)
    assert goal.expected.fields["currency"] == goal.facts["currency"]
    assert goal.expected.fields["cost_centre"] == goal.facts["cost_centre"]


def test_there_are_twenty_goals_or_more_of_every_kind_with_a_user_per_family() -> None:
    assert len(GOALS) >= 20
    assert len({g.id for g in GOALS}) == len(GOALS)
    families = {g.family or g.kind for g in GOALS}
    assert len({g.user for g in GOALS}) == len(families)  # a family's goals share its user
    recurring = [g for g in GOALS if g.family]
    assert {g.family for g in recurring} == {"monthly", "notes"}
    for family in ("monthly", "notes"):  # one goal text, what differs is pinned
        assert len({g.text for g in recurring if g.family == family}) == 1
    assert {g.kind for g in GOALS} == {"expense", "lookup", "unmeetable", "pointless"}
    assert {g.expected.kind for g in GOALS} == {"met", "escalates", "stops"}


@pytest.mark.parametrize("goal", [g for g in GOALS if g.plan is None], ids=lambda g: g.id)
def test_every_planned_goal_finds_a_playbook_holding_its_effect(goal: Goal) -> None:
    steps = find_playbook(goal.text)
    assert steps is not None
    assert goal.expected.effect in {s["tool"] for s in steps}


def test_the_services_fail_as_the_scenarios_need() -> None:
    with pytest.raises(RetryableToolError):
        agent_tools.fx_live_rate(CTX, "CHF", "EUR")
    assert agent_tools.fx_table_rate(CTX, "CHF", "EUR", "2026-10")["rate"] == 1.071
    with pytest.raises(ToolError, match="no NOK/EUR rate in the 2026-10 table"):
        agent_tools.fx_table_rate(CTX, "NOK", "EUR", "2026-10")
    with pytest.raises(RetryableToolError):
        agent_tools.crm_account(CTX, "GLOBEX-2002")
    with pytest.raises(ToolError, match="not in the directory"):
        agent_tools.directory_account(CTX, "UMBRELLA-9999")
    with pytest.raises(ToolError, match="known trips"):
        agent_tools.trip_receipts(CTX, "atlantis-2026-10")
    assert agent_tools.trip_receipts(CTX, "rome-2026-10")["receipts"] == []
    assert agent_tools.open_invoices(CTX, "GLOBEX-2002")["invoices"] == []
    assert agent_tools.crm_account(CTX, "HOOLI-4004")["manager_email"] is None
    paris = agent_tools.trip_receipts(CTX, "paris-2026-10")["receipts"]
    assert {r["currency"] for r in paris} == {"EUR", "USD"}


def _seen(
    status: str, effects: list[dict[str, Any]], escalations: tuple[str, ...] = ()
) -> Observed:
    return Observed(status, tuple(effects), escalations, replans=1, tokens=100, seconds=2.0)


REPORT = Expected("met", "submit_report", {"total": 473.43, "currency": "EUR"})


@pytest.mark.parametrize(
    ("expected", "seen", "ok"),
    [
        (REPORT, _seen("succeeded", [{"total": 473.434, "currency": "EUR"}]), True),
        (REPORT, _seen("succeeded", [{"total": 473.44, "currency": "EUR"}]), False),
        (REPORT, _seen("succeeded", [{"total": 473.43, "currency": "USD"}]), False),
        (
            REPORT,
            _seen("succeeded", [{"total": 473.43, "currency": "EUR"}] * 2),
            False,
        ),  # filed twice
        (REPORT, _seen("waiting_review", [{"total": 473.43, "currency": "EUR"}]), False),
        (REPORT, _seen("succeeded", []), False),
        (
            Expected("escalates", "x", reasons=("goal_not_met",)),
            _seen("waiting_review", [{}], ("goal_not_met",)),
            True,
        ),
        (
            Expected("escalates", "x", reasons=("goal_not_met",)),
            _seen("waiting_review", [], ("replan_budget_spent",)),
            False,
        ),
        (Expected("escalates", "x", reasons=("goal_not_met",)), _seen("succeeded", [{}]), False),
        (Expected("stops", "x"), _seen("succeeded", []), True),
        (Expected("stops", "x"), _seen("waiting_review", [], ("goal_not_met",)), True),
        (Expected("stops", "x"), _seen("succeeded", [{"sent": True}]), False),
        (Expected("stops", "x"), _seen("failed", []), False),
        (Expected("stops", "x"), _seen("timeout", []), False),
    ],
)
def test_an_outcome_is_judged_by_its_rows(expected: Expected, seen: Observed, ok: bool) -> None:
    assert check(expected, seen)[0] is ok


def test_a_false_success_is_a_succeeded_run_whose_check_failed() -> None:
    checked = [
        Checked("a", 1, _seen("succeeded", []), ok=False, why="no report"),
        Checked("b", 2, _seen("waiting_review", [], ("goal_not_met",)), ok=False, why="x"),
        Checked("c", 3, _seen("succeeded", [{}]), ok=True, why="filed"),
    ]
    assert [c.false_success for c in checked] == [True, False, False]
    found = totals(checked)
    assert (found.goals, found.as_expected, found.succeeded, found.false_success) == (3, 1, 2, 1)
    assert (found.replans, found.escalated, found.tokens_per_goal) == (3, 1, 100.0)
    row = ["1", "offline", "3", "1/3", "2", "1", "3", "1", "0.0", "100", "2.0"]
    assert table_row("offline", found) == row


def test_goals_are_picked_by_id_in_the_benchmarks_order() -> None:
    args = argparse.Namespace(goals="berlin,lisbon-oct", limit=0)
    assert [g.id for g in selected(args)] == ["lisbon-oct", "berlin"]
    assert len(selected(argparse.Namespace(goals="", limit=3))) == 3
    with pytest.raises(SystemExit, match="unknown goals: nope"):
        selected(argparse.Namespace(goals="nope", limit=0))


def test_each_pass_names_its_provider_and_the_last_serves_the_rest() -> None:
    args = agent_tasks.parse_args(["--provider", "offline,local,gemma3", "--passes", "4"])
    assert agent_tasks.providers(args) == ["offline", "smollm2", "gemma3", "gemma3"]
    with pytest.raises(SystemExit, match="--provider: llama; use offline, smollm2, gemma3"):
        agent_tasks.providers(agent_tasks.parse_args(["--provider", "offline,llama"]))


def test_a_last_pass_cut_short_is_compared_on_the_goals_it_ran() -> None:
    def ran(goal: str, replans: int) -> Checked:
        seen = Observed("succeeded", (), (), replans=replans, tokens=100 * replans, seconds=1.0)
        return Checked(goal, 1, seen, True, "")

    first = [ran("a", 1), ran("b", 3), ran("c", 5)]
    assert learning_line([first, [ran("a", 0), ran("b", 1), ran("c", 1)]]) == (
        "learning: replans 9 -> 2, tokens/goal 300 -> 67, expected 3 -> 3, false successes 0"
    )
    assert learning_line([first, [ran("a", 0)]]) == (
        "learning: replans 1 -> 0, tokens/goal 100 -> 0, expected 1 -> 1, false successes 0"
        ", over 1 of their goals"
    )
