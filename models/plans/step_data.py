"""How big a step's data is, and the cap on what one step stores.

A step's resolved arguments and its result (a tool's result, a model step's answer, a reviewer's
answer) are capped at `AGENTQ_STEP_DATA_MAX_BYTES`, measured as compact JSON in UTF-8: the size
Postgres stores and the API sends. Issue 9 saw 300 `${steps...}` references to one
60,000-character value build an 18 MB result, which every read of the run then returned.

What is shown of a run is shortened further (`models.engine.previews`).
"""

from __future__ import annotations

import json
from typing import Any, Final

from models.errors import StepDataTooLarge
from models.storable import MAX_JSON_DEPTH, too_deep

CAP_SETTING: Final = "AGENTQ_STEP_DATA_MAX_BYTES"


def json_bytes(value: Any) -> int:
    """The size of `value` as compact JSON (`{"a":1}`), UTF-8 bytes."""
    return len(compact_json(value).encode("utf-8"))


def compact_json(value: Any) -> str:
    """`value` as compact JSON text, non-ASCII characters kept as they are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def over_cap(what: str, size: int, max_bytes: int) -> StepDataTooLarge:
    """The error for `what` (e.g. "the result of tool 'echo'") being `size` bytes."""
    return StepDataTooLarge(
        f"{what}: {size:,} bytes as JSON, over the cap of {max_bytes:,} bytes ({CAP_SETTING})"
    )


def check_step_data(value: Any, *, what: str, max_bytes: int) -> None:
    """Raise `StepDataTooLarge` naming `what`, its size and the cap when `value` is larger than
    `max_bytes` as compact JSON, or nests deeper than `models.storable.MAX_JSON_DEPTH`."""
    if too_deep(value):
        raise StepDataTooLarge(f"{what}: nests deeper than {MAX_JSON_DEPTH} levels")
    size = json_bytes(value)
    if size > max_bytes:
        raise over_cap(what, size, max_bytes)


def fit_outputs(outputs: dict[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """`outputs` (step name -> result, as a run's final result holds them) within `max_bytes`:
    while they are larger together, the largest one left is replaced by `{"shortened": True,
    "bytes": <its size>}` (its step's row keeps it whole). Sizes are compact JSON bytes."""
    sizes = {name: json_bytes(value) for name, value in outputs.items()}
    fitted, total = dict(outputs), json_bytes(outputs)
    for name in sorted(sizes, key=lambda n: sizes[n], reverse=True):
        if total <= max_bytes:
            break
        fitted[name] = {"shortened": True, "bytes": sizes[name]}
        total -= sizes[name] - json_bytes(fitted[name])
    return fitted
