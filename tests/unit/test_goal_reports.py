"""A run's goal check in words (`models.engine.goal_reports`, issue 31 item 5): every state says
whether the goal was met, the criteria judged with their pinned values put in, why and what was
missing; and the offline rules' reasons read as sentences."""

from __future__ import annotations

from typing import Any

import pytest

from models.engine.goal_checks import rule_verdict
from models.engine.goal_reports import ENDED_UNCHECKED, OFFLINE_CHECK, GoalReport, report
from models.engine.runs import add_criteria
from models.tables import Run

PINNED = {"currency": "EUR", "cost_centre": "CC-4410"}
CRITERION = "Filed in ${facts.currency} against ${facts.cost_centre}"


def _run(*, criteria: tuple[str, ...] = (CRITERION,), **fields: Any) -> Run:
    run = Run(user_id="u", goal="g", **{"status": "synthesizing", "plan_version": 1, **fields})
    add_criteria(run, list(criteria), by="user")
    return run


def _verdict(**detail: Any) -> dict[str, Any]:
    return {
        "plan_version": 1,
        "met": False,
        "source": "rules",
        "reason": "the run did not deliver 1 value the criteria name",
        "missing": ["'Filed in EUR against CC-4410': nothing the run delivered holds 'CC-4410'"],
        "criteria": ["Filed in EUR against CC-4410"],
        **detail,
    }


def test_a_verdict_not_met_says_what_was_judged_why_and_what_is_missing() -> None:
    told = report(_run(status="waiting_review"), _verdict(), pinned=PINNED)
    assert (told.state, told.met, told.headline) == ("not_met", False, "Goal not met")
    assert told.summary == "Goal not met (plan version 1, checked by rules, with no model call)"
    assert told.rows == [
        ("goal check", (told.summary,)),
        ("criteria", ("Filed in EUR against CC-4410",)),
        ("why", ("the run did not deliver 1 value the criteria name",)),
        ("missing", tuple(_verdict()["missing"])),
    ]


def test_a_verdict_met_by_the_offline_check_names_it_and_lists_nothing_missing() -> None:
    run = _run(status="succeeded", provider="offline")
    met = _verdict(met=True, source="model", reason="[offline] every value ...", missing=[])
    told = report(run, met, pinned=PINNED)
    assert (told.state, told.met, told.checked_by) == ("met", True, OFFLINE_CHECK)
    assert [label for label, _ in told.rows] == ["goal check", "criteria", "why"]
    model = report(_run(status="succeeded", provider="openai"), met, pinned=PINNED)
    assert model.checked_by == "a model call"


def test_criteria_are_never_shown_as_placeholders() -> None:
    """A verdict recorded before its criteria were kept, and a run not checked yet, show the
    run's criteria with the pinned values put in."""
    old = {k: v for k, v in _verdict().items() if k != "criteria"}
    for told in (
        report(_run(), old, pinned=PINNED),
        report(_run(), None, pinned=PINNED),
    ):
        assert told.criteria == ("Filed in EUR against CC-4410",)
        assert "${" not in " ".join(line for _, lines in told.rows for line in lines)


@pytest.mark.parametrize(
    ("status", "criteria", "pinned", "state", "headline"),
    [
        ("running", (CRITERION,), PINNED, "unchecked", "Not checked yet"),
        ("running", (), PINNED, "unchecked", "Not checked yet"),  # the pins are checked
        ("failed", (CRITERION,), PINNED, "unchecked", ENDED_UNCHECKED),
        ("succeeded", (), {}, "none", "No goal check"),
    ],
)
def test_a_run_without_a_verdict_says_whether_it_will_have_one(
    status: str, criteria: tuple[str, ...], pinned: dict[str, str], state: str, headline: str
) -> None:
    for erased in (None, {}):  # an erased run's verdict is `{}` (models.engine.erased_runs)
        told = report(_run(status=status, criteria=criteria), erased, pinned=pinned)
        assert told.state == state and told.headline.startswith(headline)
        assert told.met is None and told.summary == told.headline  # no version, no checker


def test_an_accepted_verdict_and_a_run_gone_past_it_say_so() -> None:
    accepted = report(_run(status="succeeded"), _verdict(), pinned=PINNED, accepted=True)
    assert accepted.state == "accepted" and "a reviewer accepted" in accepted.headline
    assert accepted.met is False and accepted.missing  # what it lacks still shows
    replanning = report(_run(status="running", plan_version=2), _verdict(), pinned=PINNED)
    assert replanning.summary.endswith("; plan version 2 is checked once its steps finish")
    ended = report(_run(status="failed", plan_version=2), _verdict(), pinned=PINNED)
    assert ended.later is None


def test_a_report_with_nothing_to_say_has_one_row() -> None:
    assert GoalReport("none", "No goal check").rows == [("goal check", ("No goal check",))]


@pytest.mark.parametrize(
    ("criteria", "reason"),
    [
        (["Filed in EUR"], "every value the criteria name is in what the run delivered"),
        (
            ["Filed in EUR", "the report is filed"],
            "every value the criteria name is in what the run delivered; 1 of the 2 criteria "
            "name no value to look for",
        ),
        (["the report is filed"], "no criterion names a value to look for"),
    ],
)
def test_the_rules_reason_reads_as_a_sentence(criteria: list[str], reason: str) -> None:
    """Issue 31 found "every value 0 criteria name is delivered (1 name none)" on a run."""
    met, said, missing = rule_verdict(criteria, {"report": {"currency": "EUR"}})
    assert met and missing == [] and said.startswith(reason)
