"""Test-only tools: they touch the host's disk, so no served stack offers them.

The test engines load this module through `AGENTQ_TOOL_MODULES` (`TEST_ENV` in
tests/integration/conftest.py; their Celery workers run `python -m celery` from the repository
root, so `tests.support.tools` imports); unit tests import it directly. Issue 9: while
`append_marker` was a built-in, a submitter's plan wrote a `.pth` file into site-packages and so
ran code as the worker's user.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from models.plans.tools import ToolContext, tool


@tool(
    "append_marker",
    description="Append `marker` and a newline to the file at `path`; return its line count.",
    returns=("lines",),
)
def append_marker(ctx: ToolContext, path: str, marker: str) -> dict[str, Any]:
    """Append `marker + "\\n"` to `path` (created if missing); `{"lines": <lines in the file>}`.

    An effect on disk a test can count, to check that a step ran exactly once. A `path` in a
    missing directory raises `FileNotFoundError` (a tool's "internal error").
    """
    target = Path(path)
    with target.open("a", encoding="utf-8") as handle:
        handle.write(marker + "\n")
    with target.open(encoding="utf-8") as handle:
        return {"lines": sum(1 for _ in handle)}


@tool(
    "append_once_then_sleep",
    description="Append `marker` to the file at `path` under the call's idempotency key, unless "
    "that key is there already; then sleep `seconds`. Return the file's line count.",
    returns=("lines",),
)
def append_once_then_sleep(
    ctx: ToolContext, path: str, marker: str, seconds: float
) -> dict[str, Any]:
    """An effect made once per idempotency key (`ctx.idempotency_key`, the same on every attempt
    of the step), as an idempotent API makes it, then a wait in which a test kills the worker:
    the effect is made and not yet journaled."""
    target = Path(path)
    line = f"{ctx.idempotency_key}\t{marker}"
    seen = target.read_text(encoding="utf-8").splitlines() if target.exists() else []
    if line not in seen:
        with target.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    time.sleep(seconds)
    with target.open(encoding="utf-8") as handle:
        return {"lines": sum(1 for _ in handle)}
