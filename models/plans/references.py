"""References in tool arguments: how one step's result reaches the next step's arguments.

A string argument that is exactly one reference is replaced by the referenced value, whatever its
JSON type:

- `${steps.NAME.KEY}`: the value of KEY in the result of the succeeded step NAME;
- `${steps.NAME}`: that step's whole result dict;
- `${facts.KEY}`: the run's pinned fact KEY (a string).

A reference inside a longer string is interpolated as text (`"Trip ${facts.trip}"`; non-string
values as compact JSON). Lists and dicts are walked recursively (values only, not keys). Text of the
form `${...}` that does not start with `steps.` or `facts.` is left alone.

Resolution is capped (`max_bytes`, `AGENTQ_STEP_DATA_MAX_BYTES` in the worker): the running size
of the arguments is counted as each reference is looked up, before its value is copied in, so
arguments that would pass the cap are never built (issue 9: 300 references to one
60,000-character value built 18 MB).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from models.errors import StepDataTooLarge, ToolArgumentsError
from models.plans.step_data import CAP_SETTING, json_bytes

REFERENCE_PATTERN = r"\$\{((?:steps|facts)\.[^}]*)\}"  # a reference somewhere in a string
_ANY_REFERENCE = re.compile(REFERENCE_PATTERN)
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
    args: dict[str, Any],
    *,
    results: Mapping[str, dict[str, Any]],
    facts: Mapping[str, str],
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """A copy of `args` with every reference replaced.

    `results` maps succeeded step names to their result dicts; `facts` are the pinned facts.
    Raises `ToolArgumentsError` naming the reference and what is available when a step, key or
    fact is missing, or when a `${steps...}`/`${facts...}` reference is malformed; and
    `StepDataTooLarge` naming the cap when the resolved arguments would be more than `max_bytes`
    as compact JSON (None: no cap). The running size is checked before each referenced value is
    copied in, so at most about `max_bytes` plus one referenced value is ever built.
    """
    meter = _Meter(json_bytes(args) if max_bytes is not None else 0, max_bytes)
    resolved = _walk(args, results, facts, meter)
    assert isinstance(resolved, dict)  # _walk maps a dict to a dict
    if max_bytes is not None and (size := json_bytes(resolved)) > max_bytes:
        raise meter.too_large(size=size)
    return resolved


def has_reference(value: Any) -> bool:
    """Whether `value` (any JSON value) holds a `${steps...}` or `${facts...}` reference."""
    return _ANY_REFERENCE.search(json.dumps(value, ensure_ascii=False)) is not None


def references(args: Any) -> set[str]:
    """The step names that `args` (any JSON value) refers to, for plan validation.

    Raises `ToolArgumentsError` when a `${steps...}`/`${facts...}` reference is malformed.
    """
    return {ref.step for ref in _all_references(args) if ref.step is not None}


def referenced_keys(args: Any, step: str) -> set[str]:
    """The keys of step `step`'s result that `args` refers to (`${steps.STEP.KEY}`; `""` for
    `${steps.STEP}`, the whole result).

    Raises `ToolArgumentsError` when a reference is malformed.
    """
    return {ref.key or "" for ref in _all_references(args) if ref.step == step}


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


@dataclass
class _Meter:
    """The running size of arguments being resolved, bytes of compact JSON: the literal
    arguments, plus each referenced value as it is looked up (minus the reference's own text).
    Sizes are remembered per reference, so 300 references to one value measure it once."""

    used: int
    max_bytes: int | None
    sizes: dict[str, int] = field(default_factory=dict)

    def add(self, reference: str, value: Any, *, spliced: bool) -> None:
        """Count `value` in place of `${reference}`; raise `StepDataTooLarge` past the cap."""
        if self.max_bytes is None:
            return
        key = f"{spliced}:{reference}"
        if key not in self.sizes:
            size = len(value.encode("utf-8")) if spliced else json_bytes(value)
            self.sizes[key] = size - len(reference.encode("utf-8")) - 3  # "${" and "}"
        self.used += self.sizes[key]
        if self.used > self.max_bytes:
            raise self.too_large(reference)

    def too_large(self, reference: str = "", size: int | None = None) -> StepDataTooLarge:
        """The error naming the cap, and the reference that crossed it or the final size."""
        cap = f"the cap of {self.max_bytes or 0:,} bytes as JSON ({CAP_SETTING})"
        said = f"are {size:,} bytes, over {cap}" if size else f"pass {cap} at ${{{reference}}}"
        return StepDataTooLarge(f"the resolved arguments {said}; refer to less data")


def _walk(
    value: Any, results: Mapping[str, dict[str, Any]], facts: Mapping[str, str], meter: _Meter
) -> Any:
    if isinstance(value, dict):
        return {key: _walk(item, results, facts, meter) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, results, facts, meter) for item in value]
    if isinstance(value, str):
        return _substitute(value, results, facts, meter)
    return value


def _substitute(
    text: str, results: Mapping[str, dict[str, Any]], facts: Mapping[str, str], meter: _Meter
) -> Any:
    """The referenced value for a whole-string reference, else the text with values spliced in;
    each value is counted by `meter` before it is copied or spliced."""
    whole = _ANY_REFERENCE.fullmatch(text)
    if whole is not None:
        found = _lookup(_parse(whole.group(1)), results, facts)
        meter.add(whole.group(1), found, spliced=False)
        return copy.deepcopy(found)

    def splice(match: re.Match[str]) -> str:
        found = _lookup(_parse(match.group(1)), results, facts)
        piece = found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))
        meter.add(match.group(1), piece, spliced=True)
        return piece

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
