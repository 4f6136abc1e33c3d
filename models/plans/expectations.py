"""Expectations: deterministic checks of a step's result that fail the step without a model.

A plan step may declare `expect` (issue 12, item 2), a list of expectations on its result dict.
Each names a key path and makes one test:

- `{"key": "total", "present": true}`: the key is there (whatever its value, null included);
- `{"key": "total", "min": 0, "max": 500}`: a number within the bounds, both inclusive; either
  bound may be left out. Booleans are not numbers (JSON's `true` is no 1), nor is numeric text;
- `{"key": "currency", "in": ["EUR", "USD"]}`: one of the listed JSON values (text, numbers,
  booleans, null); `1` and `1.0` are the same value, `true` and `1` are not.

A key path is keys separated by dots (`"receipt.total"`); a segment of digits also indexes a
list (`"receipts.0.total"`). Every test needs the key present. `unmet` is the rule alone: the
worker fails a step whose result leaves any expectation unmet (`worker.execution.steps.perform`), so
the coordinator's usual failure handling (a replan under the budget, or an escalation) follows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from models.patterns import KEY_PATH_PATTERN

MAX_STEP_EXPECTATIONS: Final = 20
MAX_IN_VALUES: Final = 100
MAX_KEY_PATH_CHARS: Final = 200
MAX_VALUE_CHARS: Final = 1000  # one text value of `in`
SHOWN_VALUE_MAX_CHARS: Final = 200  # a value seen, as compact JSON in a reason
TESTS: Final = ("present", "min", "max", "in")
ALLOWED_KEYS: Final = "'key' and one test: 'present': true, 'min' and/or 'max' (numbers), or 'in'"


def _number(value: Any) -> Any:
    """A bound must be a JSON number: a boolean or a text is refused, never converted."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a number is needed, not {_shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a finite number is needed, not {value}")
    return value


def _scalar(value: Any) -> Any:
    """A value of `in` must be a JSON scalar: an object or a list is refused."""
    if value is not None and not isinstance(value, str | bool | int | float):
        raise ValueError(f"a text, number, boolean or null is needed, not {_shown(value)}")
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"a text of at most {MAX_VALUE_CHARS} characters (got {len(value)})")
    return value


Bound = Annotated[int | float, BeforeValidator(_number)]
Scalar = Annotated[str | bool | int | float | None, BeforeValidator(_scalar)]


class Expectation(BaseModel):
    """One expectation on a step's result: `key` (a key path) and one test (see the module)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    key: str = Field(
        pattern=KEY_PATH_PATTERN,
        max_length=MAX_KEY_PATH_CHARS,
        description="Key path in the step's result, e.g. 'total' or 'receipt.total'.",
    )
    present: bool | None = None
    min: Bound | None = None
    max: Bound | None = None
    values: list[Scalar] | None = Field(
        default=None, alias="in", min_length=1, max_length=MAX_IN_VALUES
    )

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic refuses it for its type
        unknown = sorted(set(data) - {"key", *TESTS})
        if unknown:
            raise ValueError(f"unknown {', '.join(map(repr, unknown))}; allowed: {ALLOWED_KEYS}")
        nulls = [name for name in TESTS if name in data and data[name] is None]
        if nulls:
            raise ValueError(f"{nulls[0]!r} may not be null; leave it out instead")
        return data

    @model_validator(mode="after")
    def _one_test(self) -> Expectation:
        ranged = self.min is not None or self.max is not None
        given = [t for t, on in (("present", self.present is not None), ("range", ranged)) if on]
        given += ["in"] if self.values is not None else []
        if len(given) != 1:
            found = " and ".join(given) or "none"
            raise ValueError(
                f"key {self.key!r}: exactly one test is needed (given: {found}); "
                f"allowed: {ALLOWED_KEYS}"
            )
        if self.present is False:
            raise ValueError(f"key {self.key!r}: 'present' may only be true")
        if self.min is not None and self.max is not None and self.min > self.max:
            bounds = f"'min' ({self.min}) is greater than 'max' ({self.max})"
            raise ValueError(f"key {self.key!r}: {bounds}; a range needs min <= max")
        return self

    @model_serializer
    def _as_written(self) -> dict[str, Any]:
        """As a plan writes it (so every `model_dump` of a plan parses again): by its JSON names
        (`in`), without the tests not given."""
        data: dict[str, Any] = {"key": self.key, "present": self.present, "min": self.min}
        data |= {"max": self.max, "in": self.values}
        return {name: value for name, value in data.items() if value is not None}

    def describe(self) -> str:
        """The test in words: `present`, `a number in [0, 500]`, `one of ["EUR", "USD"]`."""
        if self.present:
            return "present"
        if self.values is not None:
            return f"one of {_compact(self.values)}"
        if self.min is not None and self.max is not None:
            return f"a number in [{self.min}, {self.max}]"
        return f"a number >= {self.min}" if self.min is not None else f"a number <= {self.max}"


EXPECTATIONS: Final = TypeAdapter(list[Expectation])


def expect_schema() -> dict[str, Any]:
    """The JSON schema of a step's `expect`, with the rules `Expectation`'s validators check
    spelled out (one test each, nothing null), for the planner's schema and the API's spec. One
    rule across fields is left to words: `min` is at most `max`."""
    key = {"type": "string", "pattern": KEY_PATH_PATTERN, "maxLength": MAX_KEY_PATH_CHARS}
    scalar = [{"type": "string", "maxLength": MAX_VALUE_CHARS}] + [
        {"type": kind} for kind in ("number", "boolean", "null")
    ]
    values = {"type": "array", "items": {"anyOf": scalar}, "minItems": 1, "maxItems": MAX_IN_VALUES}
    tests: list[tuple[dict[str, Any], list[str]]] = [
        ({"present": {"const": True}}, ["present"]),
        ({"min": {"type": "number"}, "max": {"type": "number"}}, []),
        ({"in": values}, ["in"]),
    ]
    variants = [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["key", *required],
            "properties": {"key": key, **test},
            **({} if required else {"minProperties": 2}),
        }
        for test, required in tests
    ]
    return {
        "description": "Checks of the step's result; one unmet fails the step. Each names a "
        "key path ('total', 'receipt.total', 'items.0.total') and one test: present: true; "
        "min and/or max (inclusive; min <= max; booleans are not numbers); or in (allowed "
        "values).",
        "type": "array",
        "maxItems": MAX_STEP_EXPECTATIONS,
        "items": {"anyOf": variants},  # disjoint; anyOf is what more servers read
    }


def loaded(rows: Sequence[Mapping[str, Any]]) -> list[Expectation]:
    """Expectations as a step row stores them (`stored`); raises pydantic's `ValidationError`
    if a row was written by hand and is no expectation."""
    return EXPECTATIONS.validate_python(list(rows))


def stored(expect: Sequence[Expectation]) -> list[dict[str, Any]]:
    """Expectations as JSON for `steps.expect`, as a plan writes them."""
    return [e.model_dump() for e in expect]


def unmet(expect: Sequence[Expectation], result: Mapping[str, Any]) -> list[str]:
    """One reason per expectation `result` (a step's result dict) does not meet, in `expect`'s
    order, each naming the key, the test and the value seen (at most `SHOWN_VALUE_MAX_CHARS`);
    [] when all are met."""
    return [reason for e in expect if (reason := _reason(e, result)) is not None]


def _reason(expectation: Expectation, result: Mapping[str, Any]) -> str | None:
    key, wanted = expectation.key, expectation.describe()
    found, value, missing = _lookup(result, key)
    if not found:
        return f"{key}: expected {wanted}, but it is missing ({missing})"
    if expectation.present:
        return None
    if expectation.values is not None:
        if any(_same(value, allowed) for allowed in expectation.values):
            return None
        return f"{key}: expected {wanted}, got {_shown(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key}: expected {wanted}, got {_shown(value)}, which is not a number"
    low, high = expectation.min, expectation.max
    if (low is not None and value < low) or (high is not None and value > high):
        return f"{key}: expected {wanted}, got {_shown(value)}"
    return None


def _lookup(result: Any, path: str) -> tuple[bool, Any, str]:
    """(found, value, why not found) for the key path `path` in `result`."""
    value, walked = result, list[str]()
    for segment in path.split("."):
        where = ".".join(walked) or "the result"
        if isinstance(value, Mapping):
            if segment not in value:
                keys = ", ".join(sorted(map(str, value))[:20]) or "none"
                return False, None, f"no {segment!r} in {where}; its keys: {keys}"
            value = value[segment]
        elif isinstance(value, list):
            if not segment.isdigit() or int(segment) >= len(value):
                return False, None, f"no item {segment!r} in {where}, a list of {len(value)}"
            value = value[int(segment)]
        else:
            return False, None, f"{where} is {_shown(value)}, which has no keys"
        walked.append(segment)
    return True, value, ""


def _same(value: Any, allowed: Any) -> bool:
    """JSON equality: `1 == 1.0`, but a boolean equals only a boolean (in Python `True == 1`)."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    return bool(value == allowed)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False, default=str)


def _shown(value: Any) -> str:
    """`value` as compact JSON, its start only when longer than `SHOWN_VALUE_MAX_CHARS`."""
    text = _compact(value)
    if len(text) <= SHOWN_VALUE_MAX_CHARS:
        return text
    return text[:SHOWN_VALUE_MAX_CHARS] + f"... ({len(text):,} characters)"
