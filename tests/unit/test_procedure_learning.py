"""The rules of procedures learned from runs and demoted (issue 31): what teaches, how values
become fact references, when a lesson is the same procedure, how an adopted plan is judged."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import worker.tools.builtin  # noqa: F401  (registers noop and fail, which the templates call)
from models.errors import InvalidInput
from models.memory.procedure_learning import (
    SAME_KIND_SIMILARITY,
    Candidate,
    about_goal,
    decide,
    distill,
    lesson_reason,
    same_kind,
    shape,
    stands_alone,
    templated,
)
from models.memory.procedure_outcomes import Adoption, judge, weight

STEPS: list[dict[str, Any]] = [
    {"name": "receipts", "kind": "tool", "tool": "noop", "args": {}, "after": []},
    {"name": "rate", "kind": "tool", "tool": "noop", "args": {"q": "EUR"}, "after": ["receipts"]},
]


THREE = [*STEPS, {**STEPS[1], "name": "file", "after": ["rate"]}]


def test_a_run_teaches_only_when_it_succeeded_after_finding_something_out() -> None:
    assert lesson_reason(succeeded=True, replanned=True, decisions=[]) == "replan"
    assert lesson_reason(succeeded=True, replanned=False, decisions=["respond"]) == (
        "reviewer_answer"
    )
    assert lesson_reason(succeeded=True, replanned=True, decisions=["edit"]) == "reviewer_edit"
    assert lesson_reason(succeeded=True, replanned=False, decisions=["approve"]) is None
    assert lesson_reason(succeeded=True, replanned=False, decisions=[]) is None  # nothing new
    assert lesson_reason(succeeded=False, replanned=True, decisions=["edit"]) is None
    assert lesson_reason(succeeded=True, replanned=True, decisions=[], doubted=True) == "doubt"


def test_pinned_values_become_fact_references_and_nothing_else_does() -> None:
    facts = {"currency": "EUR", "centre": "CC-1", "n": "1", "a": "X9", "b": "X9"}
    args = {"q": "EUR", "nested": [{"c": "CC-1"}, "EURO"], "n": "1", "k": 1, "x": "X9"}
    assert templated(args, facts) == {
        "q": "${facts.currency}",
        "nested": [{"c": "${facts.centre}"}, "EURO"],  # a whole value only
        "n": "1",  # too short to stand for the fact
        "k": 1,
        "x": "X9",  # two facts hold it: neither
    }


@given(st.recursive(st.text(max_size=5) | st.integers(), lambda c: st.lists(c, max_size=3)))
def test_templating_with_no_facts_changes_nothing(value: Any) -> None:
    assert templated(value, {}) == value


def test_shape_is_names_kinds_and_order_not_tools_or_arguments() -> None:
    other_tool = [STEPS[0], {**STEPS[1], "tool": "fail", "args": {"q": "USD"}}]
    assert shape({"steps": STEPS}) == shape({"steps": other_tool})
    assert shape({"steps": STEPS}) != shape({"steps": [STEPS[0], {**STEPS[1], "after": []}]})
    assert shape({"steps": STEPS}) != shape({"steps": STEPS[:1]})


def test_same_kind_allows_the_one_tool_a_replan_swapped() -> None:
    three = {"steps": [*STEPS, {**STEPS[1], "name": "file", "after": ["rate"]}]}
    swapped = {"steps": [three["steps"][0], {**STEPS[1], "tool": "fail"}, three["steps"][2]]}
    assert same_kind(three, swapped)  # one of three steps on another tool
    two_swapped = {"steps": [{**STEPS[0], "tool": "fail"}, *swapped["steps"][1:]]}
    assert not same_kind(three, two_swapped)  # the same step names over other services
    assert not same_kind({"steps": STEPS[:1]}, {"steps": [{**STEPS[0], "tool": "fail"}]})


def test_the_same_procedure_gets_a_version_never_a_near_duplicate() -> None:
    template = {"steps": THREE}
    changed = {"steps": [THREE[0], {**THREE[1], "tool": "fail"}, THREE[2]]}
    near = Candidate(7, 2, SAME_KIND_SIMILARITY + 0.01, changed)
    far = Candidate(8, 1, SAME_KIND_SIMILARITY - 0.01, changed)
    other_shape = Candidate(9, 1, 0.99, {"steps": THREE[:1]})
    assert decide(template, [far, other_shape, near]).action == "version"
    assert decide(template, [far, other_shape, near]).target == 7
    assert decide(template, [near]).expected == 2
    assert decide(template, [Candidate(7, 2, 0.9, template)]).action == "keep"
    assert decide(template, [far, other_shape]).action == "add"
    # the procedure the run adopted is the same one, however far its text
    assert decide(template, [far, near], adopted=8).target == 8


@given(st.lists(st.floats(min_value=-1, max_value=1), max_size=6))
def test_a_candidate_below_the_similarity_is_never_the_same(similarities: list[float]) -> None:
    template = {"steps": STEPS}
    candidates = [Candidate(i, 1, s, template) for i, s in enumerate(similarities)]
    decision = decide(template, candidates)
    if decision.action == "add":
        assert all(s < SAME_KIND_SIMILARITY for s in similarities)
    else:
        assert similarities[decision.target or 0] >= SAME_KIND_SIMILARITY


def test_a_lesson_is_the_users_unless_a_reviewer_wrote_part_of_it() -> None:
    kwargs: dict[str, Any] = {
        "run_id": 4,
        "user_id": "ana",
        "goal": "File my report",
        "reason": "replan",
        "template": {"steps": STEPS},
        "failures": [("rate", "fail", "boom")],
        "facts": {"currency": "EUR"},
        "adopted": None,
        "tools": ["noop", "fail"],
    }
    mine = distill(**kwargs, reviewer=None)
    assert (mine.writer.role, mine.writer.user_id, mine.spec.user_id) == ("submitter", "ana", "ana")
    assert mine.spec.plan_template["steps"][1]["args"] == {"q": "${facts.currency}"}  # type: ignore[index]
    assert "after a replan" in mine.spec.body and "rate (fail) failed: boom" in mine.spec.body
    theirs = distill(**kwargs, reviewer="rita")
    assert theirs.writer.role == "reviewer" and "rita" in theirs.writer.name
    # a should-replan check's lesson is a how-to: the data of that run made the rest pointless
    doubt = distill(
        **{**kwargs, "reason": "doubt"}, doubts=[("rate", "no receipts")], reviewer=None
    )
    assert doubt.spec.plan_template is None and "after step rate: no receipts" in doubt.spec.body
    assert decide({}, [Candidate(3, 1, 0.9, None)]).action == "keep"  # the same how-to again
    with pytest.raises(InvalidInput, match="plan_template"):
        distill(**{**kwargs, "tools": ["fail"]}, reviewer=None)  # noop since removed
    # a reviewer answered in place of the failed step the kept one refers to: a how-to
    uses = {"name": "file", "kind": "tool", "tool": "noop", "args": {"r": "${steps.rate.rate}"}}
    answered = distill(
        **{**kwargs, "reason": "reviewer_answer", "template": {"steps": [STEPS[0], uses]}},
        reviewer="rita",
    )
    assert answered.spec.plan_template is None and answered.writer.role == "reviewer"
    assert "rate (fail) failed: boom. A reviewer answered in its place." in answered.spec.body
    assert stands_alone(STEPS) and not stands_alone([{**STEPS[0], "after": ["gone"]}])


def test_an_adopted_plan_is_judged_by_what_came_after_it() -> None:
    at_plan = Adoption(procedure_id=1, version=2, plan_version=1)
    assert judge(at_plan, run_status="succeeded", plan_versions=1) == (
        "held",
        "the run succeeded on the adopted plan",
    )
    assert judge(at_plan, run_status="succeeded", plan_versions=3)[0] == "replanned"  # type: ignore[index]
    assert judge(at_plan, run_status="failed", plan_versions=1)[0] == "failed"  # type: ignore[index]
    assert judge(at_plan, run_status="cancelled", plan_versions=1) is None
    in_replan = Adoption(procedure_id=1, version=2, plan_version=2)
    assert judge(in_replan, run_status="succeeded", plan_versions=2)[0] == "held"  # type: ignore[index]
    assert [weight(n) for n in range(4)] == [1.0, 0.5, 0.25, 0.125]


def test_the_offline_planner_follows_only_a_procedure_about_the_goal() -> None:
    assert about_goal("File a trip's expense report", "File my Lisbon trip expense report")
    assert about_goal("Tally the receipts of my Porto trip", "Tally the receipts of my Madrid trip")
    assert not about_goal("File a customer note", "File my expense report")  # one word shared
    assert not about_goal("", "File my expense report")
    assert not about_goal("The", "The report")  # no content words: about nothing
    learned = "File the expense claim for my Zurich trip"
    assert about_goal(learned, "File the expense claim for my London trip")
    assert not about_goal(learned, "File the expense claim for my London trip", share=1.0)
    assert about_goal(learned, "Please file the expense claim for my Zurich trip", share=1.0)
