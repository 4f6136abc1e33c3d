"""The offline provider's answer to a step that declares `output` (field -> type): each field's
value read by plain rules from what the step's context holds, never made up.

A real model reads the whole context of a step: the run's goal and pinned facts (its run
state), the results it waits for, its instruction. So does this one, in that order of trust:
the pinned facts, the results, then the text of the instruction and of the goal, in which a
value is found under the field's own name (`labelled`: `total 473.43`, `currency: EUR`) or as
one the goal-value rules read (`models.plans.goal_values`: `amount`, `currency`, `date`,
`cost_centre`, ...). A field found nowhere is left out, so the worker refuses the answer naming
it and the step fails: no 0 total, no empty currency, which is what declaring `output` is for.
Issue 31 (item 5): the documented example (`docs/concepts/plans.md`, "Typed answers") escalated
offline because the goal that states the invoice was never read, nor a value named `total`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from models.plans.goal_values import CURRENCY_SYMBOLS, extract

FIELD_MAX_DEPTH: Final = 8  # how deep a step's results are looked into for an output field
_NUMBER: Final = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_SYMBOL: Final = "[" + "".join(re.escape(s) for s in CURRENCY_SYMBOLS) + "]"
# What may stand between a field's name and its value: `total 473.43`, `total: 473.43`,
# `total = 473.43`, `total is 473.43`, `total of €473.43`; text only after `:` or `=`, so
# "the currency of the invoice" states no currency.
_NUMBER_AFTER: Final = (
    rf"\s*(?:[:=]|\s(?:is|of|was))?\s*{_SYMBOL}?\s?(?P<value>{_NUMBER})(?!\w|[.,-]\d)"
)
_TEXT_AFTER: Final = (
    r"\s*[:=]\s*(?:\"(?P<quoted>[^\"]{1,200})\"|(?P<value>[^\s,;\"]{0,199}[^\s,;\".:!?)]))"
)
_BOOLEAN_AFTER: Final = r"\s*(?:[:=]|\s(?:is|was))?\s*(?P<value>true|false|yes|no)\b"
_AFTER: Final = {
    "number": _NUMBER_AFTER,
    "integer": _NUMBER_AFTER,
    "string": _TEXT_AFTER,
    "boolean": _BOOLEAN_AFTER,
}
_NONE: Final = object()  # no value of the type wanted


def offline_fields(output: Mapping[str, str], payload: Mapping[str, Any]) -> dict[str, Any]:
    """The offline answer to a step declaring `output` (field -> type), from its `payload`
    (`{"instruction", "goal", "facts", "results"}`): each field's value from the first place
    that holds one of its type, in this order: the pinned fact of its name; the results of the
    steps it waits for (its name as a key at any depth, up to `FIELD_MAX_DEPTH`, the steps taken
    by name); the instruction's text, then the goal's (`stated`). Text that reads as a number
    counts for a number, a number as text for a string, `true`/`yes`/`false`/`no` for a
    boolean; a field found nowhere is left out."""
    facts = payload.get("facts") or {}
    results = [result for _, result in sorted((payload.get("results") or {}).items())]
    texts = [str(payload.get("instruction") or ""), str(payload.get("goal") or "")]
    fields: dict[str, Any] = {}
    for name, kind in output.items():
        places = [facts.get(name), *_under(name, results)]
        places += [value for text in texts for value in stated(name, kind, text)]
        found = [value for place in places if (value := _as(kind, place)) is not _NONE]
        if found:
            fields[name] = found[0]
    return fields


def stated(name: str, kind: str, text: str) -> list[Any]:
    """The values `text` states for field `name` of type `kind`: each one written after the
    field's name (`labelled`), then the one the goal-value rules read under that key."""
    found = labelled(name, kind, text)
    by_key = {v.key: v.value for v in extract(text)}
    return found + ([by_key[name]] if name in by_key else [])


def labelled(name: str, kind: str, text: str) -> list[str]:
    """The values written right after the field's name in `text`, in order: the name in any
    case, its `_` read as a space or a hyphen (`cost_centre` in "cost centre: CC-4410"); a
    number may follow it directly (`total 473.43`, `total of €1,234.50` -> `1234.50`), a text
    only after `:` or `=` (`currency: EUR`, `vendor = "Hotel Lisboa"`)."""
    words = r"[\s_-]".join(re.escape(part) for part in name.split("_"))
    pattern = rf"(?<![\w-]){words}(?![\w-]){_AFTER.get(kind, _TEXT_AFTER)}"
    values = []
    for match in re.finditer(pattern, text, flags=re.IGNORECASE):
        value = match.groupdict().get("quoted") or match["value"]
        values.append(value.replace(",", "") if kind in ("number", "integer") else value)
    return values


def _under(name: str, value: Any, depth: int = 0) -> list[Any]:
    """The values under key `name` anywhere in `value` (dicts and lists), depth first."""
    if depth > FIELD_MAX_DEPTH:
        return []
    if isinstance(value, Mapping):
        here = [value[name]] if name in value else []
        return here + [v for item in value.values() for v in _under(name, item, depth + 1)]
    if isinstance(value, list):
        return [v for item in value for v in _under(name, item, depth + 1)]
    return []


def _as(kind: str, value: Any) -> Any:
    """`value` as a JSON value of type `kind`, or `_NONE` when it is none."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, str) and re.fullmatch(r"-?\d+(\.\d+)?", value) and kind != "string":
        value, number = (float(value) if "." in value else int(value)), True
    if isinstance(value, str) and kind == "boolean" and value.lower() in _BOOLEANS:
        return _BOOLEANS[value.lower()]
    if kind == "string" and (isinstance(value, str) or number):
        return value if isinstance(value, str) else json.dumps(value)
    if kind == "number" and number:
        return value
    if kind == "integer" and number and float(value).is_integer():
        return int(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    return _NONE


_BOOLEANS: Final = {"true": True, "yes": True, "false": False, "no": False}
