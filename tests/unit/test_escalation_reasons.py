"""Why a run escalated (models/review/reasons.py), as `run show`, `review show` and the console's
review page all tell it: one function of the escalation and its failed step."""

from __future__ import annotations

from models.review.reasons import REASON_TEXT, why
from models.tables import Escalation, Step


def escalation(reason: str, detail: dict[str, object]) -> Escalation:
    return Escalation(id=2, run_id=1, plan_version=1, step_id=9, reason=reason, detail=detail)


def test_the_failed_steps_error_wins_over_the_detail_and_shown_keys_are_left_out() -> None:
    esc = escalation(
        "replan_budget_spent",
        {"step": "x", "error": "old", "tool": "flaky", "replans": 0, "raw_output": "", "n": [1]},
    )
    told = why(esc, Step(id=9, run_id=1, plan_version=1, name="x", kind="tool", error="new"))
    assert told.error == "new" and told.extra == {"n": [1]}  # no empty raw_output either
    assert told.summary == f"replan_budget_spent: {REASON_TEXT['replan_budget_spent']}"
    assert why(esc, None).error == "old"


def test_an_unknown_reason_is_its_code_and_no_error_is_none() -> None:
    told = why(escalation("something_new", {"error": ""}), None)
    assert (told.text, told.summary, told.error, told.extra) == (
        "something_new",
        "something_new",
        None,
        {},
    )
