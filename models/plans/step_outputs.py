"""Step outputs: a model step's answer as typed fields, so later steps refer to exact values.

A model step may declare `output` (issue 12, item 4), the fields of its answer and their JSON
types: `{"total": "number", "currency": "string"}`. The types are `string`, `number` (any
finite JSON number), `integer` (a whole number; `3.0` is one, as in JSON Schema) and `boolean`.
Field names are lower-case identifiers (`OUTPUT_FIELD_PATTERN`), at most `MAX_OUTPUT_FIELDS`.

The worker asks the model for JSON of `output_schema` (a `response_format` json_schema), checks
the answer with `parse_output` and stores the fields themselves as the step's result
(`{"total": 473.43, "currency": "EUR"}`), so `${steps.NAME.total}` is the number the model
gave, not a sentence holding it. An answer that does not fit is refused whole, naming the field
and what was expected; nothing of it is stored (`worker.execution.step_outputs`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from models.errors import InvalidStepOutput
from models.patterns import STEP_NAME_PATTERN
from models.storable import storable_problem

OutputType = Literal["string", "number", "integer", "boolean"]
OUTPUT_TYPES: Final[tuple[OutputType, ...]] = ("string", "number", "integer", "boolean")
MAX_OUTPUT_FIELDS: Final = 20  # each is a line of the prompt and a property of the schema
OUTPUT_FIELD_PATTERN: Final = STEP_NAME_PATTERN  # a `${steps.NAME.KEY}` key, named as a step is
SHOWN_CHARS: Final = 100  # of a refused value, in an error
OutputField = Annotated[str, Field(pattern=OUTPUT_FIELD_PATTERN)]
OutputSpec = dict[OutputField, OutputType]
_WORDS: Final[dict[str, str]] = {
    "string": "a text",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
}


def output_schema(output: Mapping[str, str]) -> dict[str, Any]:
    """The JSON schema of an answer to a step declaring `output`: an object with exactly those
    fields, each of its type (for `response_format`; `parse_output` checks it all again)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(output),
        "properties": {name: {"type": kind} for name, kind in output.items()},
    }


def output_spec_schema(*, names: bool = True) -> dict[str, Any]:
    """The JSON schema of a step's `output` itself, for the planner's schema and the API's spec;
    `names=False` leaves out the rule on field names (`propertyNames`), which not every
    server's schema-to-grammar converter reads (the plan is validated all the same)."""
    schema: dict[str, Any] = {
        "description": "Kind 'model' only: the fields of the step's answer and their types "
        f'({", ".join(OUTPUT_TYPES)}), e.g. {{"total": "number", "currency": "string"}}; '
        "the answer is held to them and stored as the step's result, so later steps refer to "
        "'${steps.NAME.FIELD}'.",
        "type": "object",
        "minProperties": 1,
        "maxProperties": MAX_OUTPUT_FIELDS,
        "additionalProperties": {"enum": list(OUTPUT_TYPES)},
    }
    if names:
        schema["propertyNames"] = {"pattern": OUTPUT_FIELD_PATTERN}
    return schema


def describe(output: Mapping[str, str]) -> str:
    """The fields in words, for the prompt: `total (a number), currency (a text)`."""
    return ", ".join(f"{name} ({_WORDS[kind]})" for name, kind in output.items())


def parse_output(text: str, output: Mapping[str, str]) -> dict[str, Any]:
    """The fields of a model's answer `text` (JSON) to a step declaring `output`, in `output`'s
    order, `integer` ones as Python ints. Raises `InvalidStepOutput` naming the first problem:
    not JSON (`NaN` and `Infinity` are not JSON), not an object, a declared field missing, a
    field not declared, a value of another type (`true` is no number, `"12"` is no number, nor
    is `12` a text), or text Postgres cannot store."""
    try:
        answer = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError is one
        raise InvalidStepOutput(f"output: the answer is not JSON ({exc})") from exc
    if not isinstance(answer, dict):
        raise InvalidStepOutput(f"output: expected a JSON object, got {_shown(answer)}")
    declared = ", ".join(output)
    missing = [name for name in output if name not in answer]
    if missing:
        raise InvalidStepOutput(f"output: missing {_names(missing)}; declared: {declared}")
    extra = [name for name in answer if name not in output]
    if extra:
        raise InvalidStepOutput(f"output: {_names(extra)} not declared; declared: {declared}")
    fields = {name: typed(name, answer[name], kind) for name, kind in output.items()}
    if problem := storable_problem(fields, "output"):
        raise InvalidStepOutput(problem)
    return fields


def typed(name: str, value: Any, kind: str) -> Any:
    """`value` as field `name` of type `kind` holds it (an `integer` as an int); raises
    `InvalidStepOutput` naming the field, the type and the value when it is not one."""
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "number" and number:
        return value
    if kind == "integer" and number and float(value).is_integer():
        return int(value)
    raise InvalidStepOutput(f"output.{name}: expected {_WORDS[kind]}, got {_shown(value)}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _names(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."
