"""A tool's arguments, checked before it runs: against its Python signature (pydantic, strict,
as the API's bodies) or against its JSON schema (`jsonschema`: an MCP tool's `inputSchema`).

Either way each problem is a `Problem`, read as `field: why (got <value>)` (`rate: Input should
be greater than 0 (got 0)`, `amount: should be of type 'number' (got 'ten')`, `title: required
but missing`), and a refusal names the tool, at most `ARG_ERRORS_SHOWN` problems and what the
tool takes (`rejected`), so a model or a person can correct the call.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from jsonschema.exceptions import ValidationError as SchemaViolation
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, create_model

from models.storable import json_integer

ARG_ERRORS_SHOWN: Final = 5  # a model that gets everything wrong does not need 40 lines of errors
SHOWN_MAX_CHARS: Final = 80  # of a rejected value, in a problem


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a tool's arguments: the dotted `field` (`(arguments)`: the whole)
    and `why`, which ends with the value given when there was one."""

    field: str
    why: str

    def __str__(self) -> str:
        return f"{self.field}: {self.why}"


def by_signature(
    func: Callable[..., Any], args: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Problem]]:
    """`args` validated against `func`'s parameters after `ctx` (`signature_model`): the values
    to call it with, or `{}` and the problems."""
    try:
        parsed = signature_model(func).model_validate(args)
    except ValidationError as exc:
        return {}, [_pydantic_problem(error) for error in exc.errors()]
    return {field: getattr(parsed, field) for field in type(parsed).model_fields}, []


def by_schema(schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[Problem]:
    """The problems of `args` against JSON schema `schema` (its `$schema`'s draft, else 2020-12),
    sorted by field. The schema must be valid (`models.mcp.catalogue` leaves out a tool whose
    schema is not)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    found: list[Problem] = []
    for error in validator.iter_errors(dict(args)):
        found += [p for p in _schema_problems(error) if p not in found]
    return sorted(found, key=lambda p: p.field)


def signature_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema (pydantic's) of `func`'s arguments: the signature without `ctx`."""
    return signature_model(func).model_json_schema()


def rejected(name: str, schema: Mapping[str, Any], problems: Sequence[Problem | str]) -> str:
    """`tool 'x' rejected its arguments: rate: ... (got 0); ... Takes: rate: number, ...`."""
    shown = [str(problem) for problem in problems[:ARG_ERRORS_SHOWN]]
    if len(problems) > ARG_ERRORS_SHOWN:
        shown.append(f"and {len(problems) - ARG_ERRORS_SHOWN} more")
    allowed = describe_parameters(schema)
    return f"tool {name!r} rejected its arguments: {'; '.join(shown)}. Takes: {allowed}"


def describe_parameters(schema: Mapping[str, Any]) -> str:
    """`total: number, currency: string, note: string (optional)`, from a tool's arguments'
    JSON schema; "none" for a tool without arguments."""
    required = set(schema.get("required", ()))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or ("any" if not prop.get("anyOf") else "one of several types")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        parts.append(f"{name}: {kind}" + ("" if name in required else " (optional)"))
    return ", ".join(parts) or "none"


@functools.cache
def signature_model(func: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of `func`'s parameters after `ctx`; extra arguments are rejected.
    Raises `ValueError` when the first parameter is not `ctx`, a parameter is `*args` or
    `**kwargs`, or has no type hint."""
    params = list(inspect.signature(func).parameters.values())
    if not params or params[0].name != "ctx":
        raise ValueError(f"{func.__qualname__}: a tool's first parameter must be 'ctx'")
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for param in params[1:]:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ValueError(f"{func.__qualname__}: *args/**kwargs are not allowed in a tool")
        if param.name not in hints:
            raise ValueError(f"{func.__qualname__}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (_whole_numbers_as_json(hints[param.name]), default)
    # Strict, as the API's bodies: a value of another JSON type is refused, never converted
    # ("5" is not 5), so the spec's argument schemas (`api.openapi`) say what is accepted.
    config = ConfigDict(extra="forbid", strict=True)
    model: type[BaseModel] = create_model(f"{func.__name__}_arguments", __config__=config, **fields)
    return model


def _whole_numbers_as_json(hint: Any) -> Any:
    """An `int` argument also takes `3.0` (`models.storable.json_integer`), as JSON Schema's
    `integer` does; every other hint is returned as it is."""
    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    return Annotated[hint, BeforeValidator(json_integer)] if base is int else hint


def _pydantic_problem(error: Mapping[str, Any]) -> Problem:
    field = ".".join(str(part) for part in error["loc"]) or "(arguments)"
    if error["type"] == "missing":
        return Problem(field, "required but missing")
    return Problem(field, f"{error['msg']} (got {_shown(error['input'])})")


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Validator:
    """A validator of the schema `schema_json` (JSON text: the cache's key)."""
    schema = json.loads(schema_json)
    validator: Validator = validator_for(schema, default=Draft202012Validator)(schema)
    return validator


def _schema_problems(error: SchemaViolation) -> list[Problem]:
    """jsonschema's `error` as problems: a missing property and an unexpected one each by its
    own field, a wrong type as `should be of type ...`, anything else as jsonschema words it
    without the repeated value."""
    path = [str(part) for part in error.absolute_path]
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        missing = [name for name in error.validator_value if name not in instance]
        return [Problem(_field([*path, name]), "required but missing") for name in missing]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        declared = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        patterns = (
            error.schema.get("patternProperties", {}) if isinstance(error.schema, dict) else {}
        )
        extra = [
            key
            for key in instance
            if key not in declared and not any(re.search(p, key) for p in patterns)
        ]
        why = "not an argument this tool takes"
        return [Problem(_field([*path, k]), f"{why} (got {_shown(instance[k])})") for k in extra]
    if error.validator == "type":
        expected = error.validator_value
        kinds = " or ".join(map(repr, expected)) if isinstance(expected, list) else repr(expected)
        return [Problem(_field(path), f"should be of type {kinds} (got {_shown(instance)})")]
    why = error.message.removeprefix(repr(instance)).strip() or error.message
    return [Problem(_field(path), f"{why} (got {_shown(instance)})")]


def _field(path: Sequence[str]) -> str:
    return ".".join(path) or "(arguments)"


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= SHOWN_MAX_CHARS else shown[: SHOWN_MAX_CHARS - 3] + "..."
