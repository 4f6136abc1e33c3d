"""References in tool arguments: how one step's result reaches the next step's arguments.

A string argument that is exactly one reference is replaced by the referenced value, whatever its
JSON type:

- `${steps.NAME.KEY}`: the value of KEY in the result of the succeeded step NAME;
- `${steps.NAME}`: that step's whole result dict;
- `${facts.KEY}`: the run's pinned fact KEY (a string).

A reference inside a longer string is interpolated as text (`"Trip ${facts.trip}"`; non-string
values as compact JSON). Lists and dicts are walked recursively (values only, not keys). Text of the
form `${...}` that does not start with `steps.` or `facts.` is left alone.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.errors import ToolArgumentsError

_ANY_REFERENCE = re.compile(r"\$\{((?:steps|facts)\.[^}]*)\}")
_NAME = r"[A-Za-z0-9_]+"
_STEP = re.compile(rf"steps\.(?P<step>{_NAME})(?:\.(?P<key>{_NAME}))?")
_FACT = re.compile(rf"facts\.(?P<fact>{_NAME})")


@dataclass(frozen=True)
class _Reference:
    """One parsed reference: `step` (with an optional `key`) or `fact`."""

    text: str
    step: str | None = None
    key: str | None = None
    fact: str | None = None


def resolve(
    args: dict[str, Any], *, results: Mapping[str, dict[str, Any]], facts: Mapping[str, str]
) -> dict[str, Any]:
    """A copy of `args` with every reference replaced.

    `results` maps succeeded step names to their result dicts; `facts` are the pinned facts.
    Raises `ToolArgumentsError` naming the reference and what is available when a step, key or
    fact is missing, or when a `${steps...}`/`${facts...}` reference is malformed.
    """
    resolved = _walk(args, results, facts)
    assert isinstance(resolved, dict)  # _walk maps a dict to a dict
    return resolved


def references(args: Any) -> set[str]:
    """The step names that `args` (any JSON value) refers to, for plan validation.

    Raises `ToolArgumentsError` when a `${steps...}`/`${facts...}` reference is malformed.
    """
    return {ref.step for ref in _all_references(args) if ref.step is not None}


def referenced_facts(args: Any) -> set[str]:
    """The pinned-fact keys that `args` (any JSON value) refers to with `${facts.KEY}`.

    Raises `ToolArgumentsError` when a reference is malformed.
    """
    return {ref.fact for ref in _all_references(args) if ref.fact is not None}


def _all_references(value: Any) -> list[_Reference]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [ref for item in value for ref in _all_references(item)]
    return _parse_all(value) if isinstance(value, str) else []


def _walk(value: Any, results: Mapping[str, dict[str, Any]], facts: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {key: _walk(item, results, facts) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, results, facts) for item in value]
    if isinstance(value, str):
        return _substitute(value, results, facts)
    return value


def _substitute(text: str, results: Mapping[str, dict[str, Any]], facts: Mapping[str, str]) -> Any:
    """The referenced value for a whole-string reference, else the text with values spliced in."""
    whole = _ANY_REFERENCE.fullmatch(text)
    if whole is not None:
        return copy.deepcopy(_lookup(_parse(whole.group(1)), results, facts))

    def splice(match: re.Match[str]) -> str:
        found = _lookup(_parse(match.group(1)), results, facts)
        return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))

    return _ANY_REFERENCE.sub(splice, text)


def _parse_all(text: str) -> list[_Reference]:
    return [_parse(match.group(1)) for match in _ANY_REFERENCE.finditer(text)]


def _parse(inner: str) -> _Reference:
    """Parse the text between `${` and `}`; raises `ToolArgumentsError` if it is malformed."""
    step = _STEP.fullmatch(inner)
    if step is not None:
        return _Reference(inner, step=step.group("step"), key=step.group("key"))
    fact = _FACT.fullmatch(inner)
    if fact is not None:
        return _Reference(inner, fact=fact.group("fact"))
    forms = "${steps.NAME}, ${steps.NAME.KEY} or ${facts.KEY}"
    raise ToolArgumentsError(f"malformed reference ${{{inner}}}: use {forms}")


def _lookup(
    ref: _Reference, results: Mapping[str, dict[str, Any]], facts: Mapping[str, str]
) -> Any:
    if ref.fact is not None:
        if ref.fact not in facts:
            raise _missing(ref, f"no fact {ref.fact!r}", "facts", facts)
        return facts[ref.fact]
    assert ref.step is not None  # _parse sets either fact or step
    if ref.step not in results:
        raise _missing(ref, f"no succeeded step {ref.step!r}", "succeeded steps", results)
    result = results[ref.step]
    if ref.key is None:
        return result
    if ref.key not in result:
        raise _missing(ref, f"step {ref.step!r} returned no {ref.key!r}", "its keys", result)
    return result[ref.key]


def _missing(ref: _Reference, problem: str, label: str, available: Mapping[str, Any]) -> Exception:
    names = ", ".join(sorted(available)) or "none"
    return ToolArgumentsError(f"reference ${{{ref.text}}}: {problem}; {label}: {names}")
