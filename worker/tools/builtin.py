"""Built-in tools for benchmarks and demos of failure handling.

`noop` and `sleep` measure the engine's own overhead; `echo` passes a value on; `always_fails`
(with a `noop` fallback) and `flaky` exercise replanning and retries. None of them takes a host
path or reaches the network: a served stack offers them to every submitter (issue 9). Tools that
touch the disk for tests live with the tests (`tests/support/tools.py`).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import Field

from models.errors import ToolError
from models.plans.tools import Fallback, ToolContext, tool
from models.settings import get_settings

# Below the default step time budget (`AGENTQ_STEP_TIME_LIMIT_S`, 90 s): a sleep the Celery
# soft time limit would cut off can never succeed, only hold a worker through its retries (a user
# test held another user's run for 10 minutes with four `sleep` 600 steps).
SLEEP_MAX_SECONDS = 60.0


@tool("noop", description="Do nothing and succeed.", returns=("ok",), read_only=True)
def noop(ctx: ToolContext) -> dict[str, Any]:
    """`{"ok": True}`."""
    return {"ok": True}


@tool(
    "sleep",
    description=f"Sleep for `seconds` (0 to {SLEEP_MAX_SECONDS:g}, and within the step time "
    "budget) and succeed.",
    returns=("slept_s",),
    read_only=True,
)
def sleep(
    ctx: ToolContext, seconds: Annotated[float, Field(ge=0, le=SLEEP_MAX_SECONDS)]
) -> dict[str, Any]:
    """Block for `seconds` (wall clock); `{"slept_s": seconds}`. Raises `ToolError` (it would
    not finish in time) when `seconds` is over `AGENTQ_STEP_TIME_LIMIT_S`."""
    budget = get_settings().step_time_limit_s
    if seconds > budget:
        raise ToolError(
            f"sleep: {seconds:g} s is over the step time budget ({budget:g} s, "
            "AGENTQ_STEP_TIME_LIMIT_S)"
        )
    time.sleep(seconds)
    return {"slept_s": seconds}


@tool("echo", description="Return `value` unchanged.", returns=("value",), read_only=True)
def echo(ctx: ToolContext, value: Any) -> dict[str, Any]:
    """`{"value": value}`; `value` is any JSON value."""
    return {"value": value}


@tool(
    "always_fails",
    description="Fail with `message`; its fallback is `noop`.",
    fallback=Fallback("noop", {}),
    read_only=True,
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
    read_only=True,
)
def flaky(ctx: ToolContext, fail_times: Annotated[int, Field(ge=0)]) -> dict[str, Any]:
    """`{"ok": True, "tries": n}` once `ctx.tries_of_name` > `fail_times`, else `ToolError`."""
    if ctx.tries_of_name <= fail_times:
        raise ToolError(f"flaky: try {ctx.tries_of_name} of {fail_times} failing tries")
    return {"ok": True, "tries": ctx.tries_of_name}
