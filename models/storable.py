"""What Postgres can store: the check every input path runs on text and JSON before writing it.

Postgres `text` and `jsonb` cannot hold a NUL character, and text that is not valid Unicode (a
lone surrogate, which Python strings can carry: JSON's `"\\ud800"`, or undecodable command-line
bytes under `surrogateescape`) cannot even be sent to it. JSON has no NaN or infinity. A value
that breaks one of these is bad input, refused with where it is, before anything is written.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

MAX_JSON_DEPTH: Final = 64
"""Arrays and objects nested deeper than this are refused. Real plans, results and answers nest
a few levels; a user test sent arrays nested 255-300 deep, well under every size cap, and the
server's JSON encoders (pydantic's stops at 255 levels) and recursive walks failed on them with
500s, some after the run was written."""


def storable_problem(value: Any, path: str = "body") -> str | None:
    """Where in `value` (decoded JSON: str, number, dict, list, ...) something is that Postgres
    cannot store, as `"<path>: <why>"` (`body.args.rate: numbers must be finite, not nan ...`),
    or None when all of it can be stored. Under the empty `path` the places are the keys and
    indexes alone (`rate`). Nesting deeper than `MAX_JSON_DEPTH` is refused first (and so never
    walked recursively)."""
    if too_deep(value):
        return f"{path}: arrays and objects nest deeper than {MAX_JSON_DEPTH} levels"
    return _unstorable(value, path)


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests arrays and objects more than `limit` levels deep (walked without
    recursion, so any depth is safe to ask about)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            item
            for node in level
            if isinstance(node, dict | list | tuple)
            for item in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return False
    return any(isinstance(node, dict | list | tuple) for node in level)


def _unstorable(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path}: NUL characters (\\u0000) are not allowed"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path}: unpaired surrogates are not valid Unicode text"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{path}: numbers must be finite, not {value!r} (JSON has no NaN or Infinity)"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = _unstorable(key, f"{path} key".lstrip()) or _unstorable(item, _child(path, key))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := _unstorable(item, _child(path, i)):
                return found
    return None


def _child(path: str, key: object) -> str:
    """`path.key`, or `key` alone under the empty path (a tool's arguments name their fields
    as pydantic's errors do: `rate`, `items.0`)."""
    return f"{path}.{key}" if path else str(key)


def json_integer(value: Any) -> Any:
    """`value` as an int when it is a float with no fractional part (`3.0`), else unchanged.

    For a strict integer field (a pydantic `BeforeValidator`): JSON Schema's `integer` is a
    value, not a spelling, so `3.0` is one (JSON Schema Validation 2020-12, section 6.1.1), while
    `"3"` and `true` stay what they are and are refused.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def parse_json(text: str) -> Any:
    """`text` as JSON, where raw control characters (a newline, a tab) inside strings are allowed:
    models write them, grammar-constrained ones too (llama-cpp-python 0.3.36's JSON grammar lets
    them through), and they are unambiguous (Python's `json.loads(strict=False)`). Raises
    `json.JSONDecodeError` (a `ValueError`) for text that is not JSON."""
    return json.loads(text, strict=False)
