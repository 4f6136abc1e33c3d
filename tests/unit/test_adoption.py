"""A plan adopts a recalled procedure's template by reference (`worker.phases.adoption`): what is
offered, the schema that offers it, and the plan an answer `{"procedure": ID}` stands for."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from models.errors import InvalidPlan
from models.plans.plans import parse_plan
from models.plans.tools import DEFAULT_TOOL_MODULES, configured_tool_names, load_tool_modules
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.prompts import plan_schema
from worker.model_calls.providers import ModelRequest
from worker.phases.adoption import adoptable, adopted_id, expand, offered, schema
from worker.tools.expenses import EXPENSE_PLAYBOOK

LIVE = {"steps": EXPENSE_PLAYBOOK, "success_criteria": ["Filed in ${facts.currency}."]}
CACHED = {
    "steps": [
        {**s, "tool": "cached_rate", "args": {**s["args"], "month": "${steps.receipts.month}"}}
        if s["name"] == "rate"
        else s
        for s in EXPENSE_PLAYBOOK
    ]
}
RATE = next(s for s in EXPENSE_PLAYBOOK if s["name"] == "rate")
FAILED_RATE = {"name": "rate", "tool": "live_rate", "args": RATE["args"], "error": "timed out"}
PROCEDURES = [
    {"id": 3, "plan_template": LIVE},
    {"id": 4, "plan_template": CACHED},
    {"id": 5, "plan_template": None},  # a how-to only
]


@pytest.fixture(autouse=True, scope="module")
def _tools() -> None:
    load_tool_modules(DEFAULT_TOOL_MODULES)


def test_a_first_plan_is_offered_every_template_a_replan_none_that_repeats_its_failure() -> None:
    assert [p["id"] for p in offered({"procedures": PROCEDURES})] == [3, 4]
    replan = {"procedures": PROCEDURES, "failed_step": FAILED_RATE}
    assert [p["id"] for p in offered(replan)] == [4]
    other_args = {**FAILED_RATE, "args": {"base": "USD", "quote": "EUR"}}
    assert [p["id"] for p in offered({**replan, "failed_step": other_args})] == [3, 4]
    # a succeeded step the goal check judged (it carries its result) is no failure to avoid
    judged = {**FAILED_RATE, "result": {"rate": 0.9}}
    assert adoptable(LIVE, judged) and not adoptable(None, None) and adoptable(CACHED, None)


def test_the_schema_offers_the_ids_beside_the_plan_and_only_to_planning_calls() -> None:
    plan = plan_schema(["live_rate", "cached_rate"])
    payload = {"procedures": PROCEDURES}
    offering = schema("plan", plan, payload)
    assert offering is not None
    jsonschema.validate({"procedure": 4}, offering)
    written = {"steps": [{"name": "a", "kind": "model", "instruction": "x"}]}
    jsonschema.validate({"procedure": None, **written}, offering)
    assert next(iter(offering["anyOf"][1]["properties"])) == "procedure"  # both open with it
    for refused in ({"procedure": 5}, written, {"procedure": None}, {"procedure": 4, **written}):
        with pytest.raises(jsonschema.ValidationError):  # 5: no template, so not offered
            jsonschema.validate(refused, offering)
    assert schema("step", plan, payload) is plan
    assert schema("plan", plan, {"procedures": []}) is plan
    assert schema("plan", None, payload) is None


def test_an_adopted_template_is_the_first_plan_criteria_and_all() -> None:
    plan = expand('{"procedure": 3}', {"procedures": PROCEDURES}, kept=set())
    assert plan == LIVE and plan["steps"] is not EXPENSE_PLAYBOOK  # a copy
    parsed = parse_plan(
        plan, tools=configured_tool_names(), facts={"currency", "trip", "cost_centre"}
    )
    assert [s.name for s in parsed.steps] == ["receipts", "rate", "convert", "attach", "submit"]


def test_a_replan_adopts_only_the_steps_the_plan_lacks() -> None:
    kept = {"receipts", "convert", "attach", "submit"}  # the plan less its failed `rate`
    payload = {"procedures": PROCEDURES, "failed_step": FAILED_RATE}
    plan: dict[str, Any] = expand(' {"procedure": 4}\n', payload, kept=kept)
    assert [s["name"] for s in plan["steps"]] == ["rate"]
    assert plan["steps"][0]["tool"] == "cached_rate" and "success_criteria" not in plan
    with pytest.raises(InvalidPlan, match=r"procedure: 3 is not a procedure offered here \(4\)"):
        expand('{"procedure": 3}', payload, kept=kept)  # it would call live_rate again
    everything = {s["name"] for s in EXPENSE_PLAYBOOK}
    with pytest.raises(InvalidPlan, match="all in the plan already"):
        expand('{"procedure": 4}', payload, kept=everything)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"procedure": 4}', 4),
        ('{"procedure": "4"}', None),
        ('{"procedure": true}', None),
        ('{"procedure": 4, "steps": []}', None),
        ('{"procedure": null, "steps": []}', None),
        ('{"steps": []}', None),
        ("not json", None),
        ("[4]", None),
    ],
)
def test_only_an_answer_of_one_integer_id_adopts(text: str, found: int | None) -> None:
    assert adopted_id(text) == found
    if found is None and "null" not in text:
        assert expand(text, {"procedures": PROCEDURES}, kept=set()) == text  # parsed as a plan


def test_a_plan_written_out_drops_its_null_procedure() -> None:
    text = '{"procedure": null, "steps": [{"name": "a", "kind": "model", "instruction": "x"}]}'
    plan = expand(text, {"procedures": PROCEDURES}, kept=set())
    assert plan == {"steps": [{"name": "a", "kind": "model", "instruction": "x"}]}


def test_the_offline_planner_adopts_a_template_it_can_follow_as_it_is() -> None:
    tools = [{"name": n} for n in configured_tool_names()]
    payload = {
        "goal": "File my expense report",
        "tools": tools,
        "facts": {"trip": "lisbon-2026-10", "currency": "EUR", "cost_centre": "CC-4410"},
        "procedures": [{"id": 9, "title": "File an expense report", "plan_template": CACHED}],
    }
    request = ModelRequest(purpose="plan", messages=[], payload=payload)
    assert json.loads(OfflineProvider().complete(request).text) == {"procedure": 9}
    unrelated = {"id": 9, "title": "File a customer note", "plan_template": CACHED}
    request = ModelRequest(
        purpose="plan", messages=[], payload={**payload, "procedures": [unrelated]}
    )
    assert "steps" in json.loads(OfflineProvider().complete(request).text)  # one word shared
    no_trip = {**payload, "facts": {"currency": "EUR"}}  # `${facts.trip}` it cannot follow
    request = ModelRequest(purpose="plan", messages=[], payload=no_trip)
    assert "steps" in json.loads(OfflineProvider().complete(request).text)
