"""The API's input checks and error mapping, without services."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, get_args

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from api.errors import field_errors, status_of
from api.schemas import RunStatus, RunSubmit, storable_problem
from models.access import api_tokens
from models.errors import (
    BudgetExhausted,
    ClaimedByAnother,
    IllegalTransition,
    InvalidInput,
    InvalidPlan,
    NotFound,
)
from models.front.commands import checked_plan
from models.states import RUN_STATUSES


def test_the_status_filter_lists_every_run_status() -> None:
    assert get_args(RunStatus) == RUN_STATUSES


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("plain", None),
        ({"a": [1, 2.5, {"b": "ok"}]}, None),
        ("nul\x00", "body: NUL"),
        ({"args": {"x": ["fine", "bad\x00"]}}, "body.args.x.1: NUL"),
        ({"k\x00": 1}, "body key: NUL"),
        ("\ud800", "body: unpaired surrogates"),
        ({"n": float("nan")}, "body.n: numbers must be finite"),
        ([float("inf")], "body.0: numbers must be finite"),
    ],
)
def test_what_postgres_cannot_store_is_found(value: object, problem: str | None) -> None:
    found = storable_problem(value)
    assert (found is None) if problem is None else (found or "").startswith(problem)


def test_a_submission_with_a_nul_in_a_plan_argument_is_refused() -> None:
    step = {"name": "a", "kind": "tool", "tool": "echo", "args": {"value": "x\x00"}}
    with pytest.raises(ValidationError, match=r"body.plan.steps.0.args.value: NUL"):
        RunSubmit.model_validate({"goal": "g", "plan": {"steps": [step]}})


STEP = {"name": "a", "kind": "tool", "tool": "noop"}


@pytest.mark.parametrize(
    ("steps", "refused"),
    [
        ([{**STEP, "name": "Bad"}], "422"),  # the step's shape: read with the body
        ([{**STEP, "colour": 1}], "422"),
        ([{"name": "a", "kind": "tool"}], "422"),
        ([{"name": "m", "kind": "model", "instruction": "x", "args": {"x": 1}}], "422"),
        ([{**STEP, "expect": [{"key": "x", "min": 2, "max": 1}]}], "422"),
        ([{**STEP, "tool": "nope"}], "400"),  # how the steps fit the server and each other
        ([{**STEP, "args": {"x": 1}}], "400"),
        ([{**STEP, "tool": "echo", "args": {"value": "${facts.k}"}}], "400"),
        ([STEP, STEP], "400"),
        ([{**STEP, "after": ["a"]}], "400"),
    ],
)
def test_a_plans_shape_is_a_422_and_how_it_fits_a_400(
    steps: list[dict[str, Any]], refused: str
) -> None:
    """As docs/how-to/python-client.md ("Refusals") says: FastAPI refuses what `RunSubmit` does
    (422), then the submit route's `checked_plan` raises `InvalidPlan` (400)."""
    body = {"goal": "g", "plan": {"steps": steps}}
    try:
        RunSubmit.model_validate(body)
    except ValidationError:
        assert refused == "422"
        return
    with pytest.raises(InvalidPlan):
        checked_plan(body["plan"], facts={})
    assert refused == "400" and status_of(InvalidPlan()) == 400


def test_errors_map_to_statuses() -> None:
    assert status_of(InvalidInput()) == status_of(InvalidPlan()) == 400
    assert status_of(NotFound()) == 404
    assert status_of(IllegalTransition("runs", 1, "failed", "'running'")) == 409
    assert status_of(ClaimedByAnother()) == 409
    assert status_of(BudgetExhausted()) == 500  # never raised to a request: listed nowhere


def test_tokens_are_stored_as_their_sha256() -> None:
    assert api_tokens.hash_token("aq_x") == hashlib.sha256(b"aq_x").hexdigest()


@pytest.mark.parametrize(
    ("role", "user", "named"),
    [
        ("root", None, "role: 'root' is not a role; use one of submitter, reviewer, admin"),
        ("submitter", None, "user: a submitter token needs"),
        ("submitter", " ", "user: a submitter token needs"),
        ("reviewer", "alice", "user: only submitter tokens act for a user"),
    ],
)
def test_token_roles_and_users_are_checked_before_anything_is_stored(
    role: str, user: str | None, named: str
) -> None:
    nothing: Any = None  # no session: the check comes first
    with pytest.raises(InvalidInput, match=re.escape(named)):
        api_tokens.create_token(nothing, name="n", role=role, user_id=user)


def test_field_errors_never_echo_the_input_and_always_encode() -> None:
    lone = "\ud800"
    exc = RequestValidationError(
        [
            {
                "type": "value_error",
                "loc": ("body", lone),
                "msg": f"bad {lone}",
                "input": {"goal": lone},
                "ctx": {"error": ValueError(lone), "limit": 3},
            }
        ]
    )
    (error,) = field_errors(exc)
    assert "input" not in error and error["ctx"]["limit"] == 3
    assert error["loc"] == ["body", "\\ud800"] and error["msg"] == "bad \\ud800"
    json.dumps(error, ensure_ascii=False).encode("utf-8")  # raises if anything cannot be encoded


def test_a_run_pins_at_most_the_facts_a_prompt_can_carry() -> None:
    from models.engine.runs import MAX_PINNED_FACTS

    facts = {f"k{i}": "v" for i in range(MAX_PINNED_FACTS)}
    assert len(RunSubmit.model_validate({"goal": "g", "facts": facts}).facts) == MAX_PINNED_FACTS
    with pytest.raises(ValidationError, match="facts"):
        RunSubmit.model_validate({"goal": "g", "facts": {**facts, "one_more": "v"}})
