"""The should-replan check's parts that need no services (issue 12, item 2): the offline
provider's rule, the prompt's view of the steps not started, and the answer's validation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from models.tables import Step
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.providers import ModelRequest
from worker.phases.replan_checks import CheckPlanSpec, check_plan_prompt


def _answer(result: Any, uses: list[str]) -> dict[str, Any]:
    payload = {
        "goal": "g",
        "step": {"name": "receipts", "result": result},
        "remaining": [{"name": "report", "uses": uses}],
    }
    request = ModelRequest(purpose="check_plan", messages=[], payload=payload)
    return dict(json.loads(OfflineProvider().complete(request).text))


@pytest.mark.parametrize(
    ("result", "uses", "go_on"),
    [
        ({"receipts": []}, ["receipts"], False),
        ({"receipts": ["a.pdf"]}, ["receipts"], True),
        ({"receipts": [], "total": 3}, ["total"], True),  # the empty value is not used
        ({"total": None}, ["total"], False),
        ({}, ["total"], False),  # missing
        ({}, [""], False),  # the whole result, empty
        ({"receipts": []}, [], True),  # nothing used: nothing to doubt
    ],
)
def test_the_offline_check_doubts_a_plan_whose_next_steps_use_an_empty_value(
    result: Any, uses: list[str], go_on: bool
) -> None:
    answer = _answer(result, uses)
    assert answer["go_on"] is go_on
    assert answer["reason"].startswith("[offline] ")
    CheckPlanSpec.model_validate(answer)  # what the provider says, the worker accepts


def test_the_prompt_names_what_each_step_not_started_uses() -> None:
    done = Step(run_id=1, plan_version=1, position=0, name="receipts", kind="tool", tool="echo")
    later = Step(
        run_id=1,
        plan_version=1,
        position=1,
        name="report",
        kind="tool",
        tool="echo",
        args={"value": "${steps.receipts.value}", "n": "${steps.receipts}", "c": "${facts.x}"},
    )
    prompt = check_plan_prompt("g", done, {"value": []}, [later])
    assert prompt.purpose == "check_plan" and prompt.query is None
    assert prompt.payload["remaining"] == [
        {"name": "report", "instruction": "", "tool": "echo", "uses": ["", "value"]}
    ]


MALFORMED = ['{"go_on": "maybe", "reason": "x"}', '{"go_on": false}', '{"go_on": 1, "reason": ""}']


@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_answer_is_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        CheckPlanSpec.model_validate_json(text)
