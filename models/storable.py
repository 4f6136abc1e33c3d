"""What Postgres can store: the check every input path runs on text and JSON before writing it.

Postgres `text` and `jsonb` cannot hold a NUL character, and text that is not valid Unicode (a
lone surrogate, which Python strings can carry: JSON's `"\\ud800"`, or undecodable command-line
bytes under `surrogateescape`) cannot even be sent to it. JSON has no NaN or infinity. A value
that breaks one of these is bad input, refused with where it is, before anything is written.
"""

from __future__ import annotations

import json
import math
from typing import Any


def storable_problem(value: Any, path: str = "body") -> str | None:
    """Where in `value` (decoded JSON: str, number, dict, list, ...) something is that Postgres
    cannot store, as `"<path>: <why>"`, or None when all of it can be stored."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path}: NUL characters (\\u0000) are not allowed"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path}: unpaired surrogates are not valid Unicode text"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{path}: numbers must be finite"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = storable_problem(key, f"{path} key") or storable_problem(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := storable_problem(item, f"{path}.{i}"):
                return found
    return None


def parse_json(text: str) -> Any:
    """`text` as JSON, where raw control characters (a newline, a tab) inside strings are allowed:
    models write them, grammar-constrained ones too (llama-cpp-python 0.3.36's JSON grammar lets
    them through), and they are unambiguous (Python's `json.loads(strict=False)`). Raises
    `json.JSONDecodeError` (a `ValueError`) for text that is not JSON."""
    return json.loads(text, strict=False)
