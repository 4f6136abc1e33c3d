"""Refusals say in words what a pattern allows (`models.patterns.WORDS`), never the regular
expression: the API's 422, the plan checks, a submit's fact check and the CLI's `--fact`."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from pydantic import ValidationError

from api.app import create_api
from api.errors import field_errors
from api.schemas import RunSubmit
from models.engine.runs import _check_submission
from models.errors import ConfigurationError, InvalidInput, InvalidPlan
from models.patterns import FACT_KEY_PATTERN, STEP_NAME_PATTERN, WORDS
from models.plans.plans import parse_plan
from ops.inputs import parse_facts

REGEX = re.compile(r"\^|\$|\[a-z")  # what a pattern's text would show
FACT_KEY_WORDS = WORDS[FACT_KEY_PATTERN]
STEP_NAME_WORDS = WORDS[STEP_NAME_PATTERN]


def _request_patterns() -> set[str]:
    """Every `pattern` pydantic and FastAPI check on a request: in the spec FastAPI builds from
    the routes (before `api.openapi.state_rules` adds the rules only the spec states), under a
    request body or a parameter, following `$ref`s; a dict's key pattern is a key of its
    `patternProperties`."""
    app = create_api()
    spec = get_openapi(title="t", version="1", routes=app.routes)
    schemas = spec["components"]["schemas"]
    roots = [
        node
        for path in spec["paths"].values()
        for operation in path.values()
        for node in (operation.get("requestBody"), *operation.get("parameters", []))
        if node
    ]
    seen: set[str] = set()
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref and ref not in seen:
                seen.add(ref)
                walk(schemas[ref.rsplit("/", 1)[1]])
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            found.update(node.get("patternProperties", {}))  # a dict's keys: `facts`
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(roots)
    return found


def test_every_pattern_a_request_is_checked_against_is_said_in_words() -> None:
    patterns = _request_patterns()
    assert {FACT_KEY_PATTERN, STEP_NAME_PATTERN} <= patterns  # the walk reaches the plan's steps
    assert patterns <= set(WORDS), patterns - set(WORDS)
    assert not any(REGEX.search(words) for words in WORDS.values())


def _refusal(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The 422's `detail` that the API sends for `body` (`api.errors.field_errors`)."""
    with pytest.raises(ValidationError) as refused:
        RunSubmit.model_validate(body)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in refused.value.errors()]
    return field_errors(RequestValidationError(errors))


def test_a_422_for_a_fact_key_or_a_step_name_says_what_is_allowed() -> None:
    step = {"name": "Collect", "kind": "tool", "tool": "noop"}
    detail = _refusal({"goal": "g", "facts": {"Cost Centre": "x"}, "plan": {"steps": [step]}})
    said = {tuple(error["loc"]): error["msg"] for error in detail}
    assert said == {
        ("body", "facts", "Cost Centre", "[key]"): FACT_KEY_WORDS,
        ("body", "plan", "steps", 0, "name"): STEP_NAME_WORDS,
    }
    assert all(error["ctx"]["pattern"] for error in detail)  # the pattern is kept for programs


def test_a_nul_in_the_goal_is_located_at_the_goal() -> None:
    """It was located at the body alone (`["body"]`): the check ran on the whole body."""
    (error,) = _refusal({"goal": "a\x00b", "user": "u"})
    assert error["loc"] == ["body", "goal"]
    assert error["msg"] == "body.goal: NUL characters (\\u0000) are not allowed"
    (error,) = _refusal({"goal": "g", "facts": {"k": "v\x00"}})
    assert error["loc"] == ["body", "facts"] and error["msg"].startswith("body.facts.k: NUL")


def test_a_plan_check_says_what_a_step_name_allows() -> None:
    with pytest.raises(InvalidPlan) as refused:
        parse_plan(
            {"steps": [{"name": "Bad Name", "kind": "tool", "tool": "noop"}]}, tools={"noop"}
        )
    assert str(refused.value) == f"invalid plan: steps.0.name: {STEP_NAME_WORDS}"


def test_the_cli_and_a_submit_say_what_a_fact_key_allows() -> None:
    with pytest.raises(ConfigurationError) as cli:
        parse_facts(["Cost-Centre=CC-1"])
    assert str(cli.value) == (
        f"--fact 'Cost-Centre=CC-1': expected KEY=VALUE, where KEY {FACT_KEY_WORDS}"
    )
    with pytest.raises(InvalidInput) as submit:
        _check_submission(goal="g", user_id="u", facts={"Cost-Centre": "CC-1"})
    assert str(submit.value) == f"fact 'Cost-Centre': the key {FACT_KEY_WORDS}"
