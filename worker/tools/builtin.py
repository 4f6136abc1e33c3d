"""Built-in tools for tests, benchmarks and demos of failure handling.

`noop` and `sleep` measure the engine's own overhead; `always_fails` (with a `noop` fallback) and
`flaky` exercise replanning and retries; `append_marker` leaves an effect on disk that a test can
count, to check that a step ran exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from models.errors import ToolError
from worker.tools.registry import Fallback, ToolContext, tool

SLEEP_MAX_SECONDS = 600.0


@tool("noop", description="Do nothing and succeed.", returns=("ok",))
def noop(ctx: ToolContext) -> dict[str, Any]:
    """`{"ok": True}`."""
    return {"ok": True}


@tool(
    "sleep",
    description=f"Sleep for `seconds` (0 to {SLEEP_MAX_SECONDS:g}) and succeed.",
    returns=("slept_s",),
)
def sleep(
    ctx: ToolContext, seconds: Annotated[float, Field(ge=0, le=SLEEP_MAX_SECONDS)]
) -> dict[str, Any]:
    """Block for `seconds` (wall clock); `{"slept_s": seconds}`."""
    time.sleep(seconds)
    return {"slept_s": seconds}


@tool("echo", description="Return `value` unchanged.", returns=("value",))
def echo(ctx: ToolContext, value: Any) -> dict[str, Any]:
    """`{"value": value}`; `value` is any JSON value."""
    return {"value": value}


@tool(
    "always_fails",
    description="Fail with `message`; its fallback is `noop`.",
    fallback=Fallback("noop", {}),
)
def always_fails(
    ctx: ToolContext, message: str = "always_fails failed, as it always does"
) -> dict[str, Any]:
    """Raise `ToolError(message)`, every time."""
    raise ToolError(message)


@tool(
    "flaky",
    description="Fail the first `fail_times` tries of this step name in the run, then succeed.",
    returns=("ok", "tries"),
)
def flaky(ctx: ToolContext, fail_times: Annotated[int, Field(ge=0)]) -> dict[str, Any]:
    """`{"ok": True, "tries": n}` once `ctx.tries_of_name` > `fail_times`, else `ToolError`."""
    if ctx.tries_of_name <= fail_times:
        raise ToolError(f"flaky: try {ctx.tries_of_name} of {fail_times} failing tries")
    return {"ok": True, "tries": ctx.tries_of_name}


@tool(
    "append_marker",
    description="Append `marker` and a newline to the file at `path`; return its line count.",
    returns=("lines",),
)
def append_marker(ctx: ToolContext, path: str, marker: str) -> dict[str, Any]:
    """Append `marker + "\\n"` to `path` (created if missing); `{"lines": <lines in the file>}`."""
    target = Path(path)
    with target.open("a", encoding="utf-8") as handle:
        handle.write(marker + "\n")
    with target.open(encoding="utf-8") as handle:
        return {"lines": sum(1 for _ in handle)}
