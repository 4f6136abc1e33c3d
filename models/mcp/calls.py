"""One call of an MCP server's tool, from synchronous code: its answer as a step's result, or a
`ToolError` that names the server and the tool.

The call carries the step's idempotency key in its request's `_meta`
(`agentq/idempotency_key`: `run-<run>/step-<step>`, with `/call-<n>` in a model step; the same
on every attempt), so a server can make a call that agentq tries again (after a crash, a lost
connection, a timeout) take effect at most once. It must answer within `timeout_s`, the time
its step has left (`models.plans.tools.ToolContext.time_left_s`); opening the session, when the
server must be started first, counts in it.

What becomes of each outcome:
- an answer: `models.mcp.results.result_dict`;
- an `isError` answer, a JSON-RPC error (say, unknown tool or invalid params), an answer the SDK
  cannot read (malformed, or structured content that does not fit the tool's output schema):
  `McpToolFailed`, not retried;
- the server cannot start: `McpServerUnavailable`; the connection closed mid-call (the server
  crashed): `McpConnectionLost` (the session is opened again by the next call); no answer in
  time: `McpCallTimedOut`. All three are `RetryableToolError`s: the step is tried again.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from mcp.shared.exceptions import MCPError
from mcp.types import REQUEST_TIMEOUT
from pydantic import ValidationError

from models.errors import (
    McpCallTimedOut,
    McpConnectionLost,
    McpServerUnavailable,
    McpToolFailed,
    ToolNotEnabled,
)
from models.mcp import loop, sessions
from models.mcp.results import error_text, result_dict
from models.settings import get_settings

IDEMPOTENCY_META_KEY: Final = "agentq/idempotency_key"
WAIT_GRACE_S: Final = 1.0  # the wait's backstop beyond the call's own deadline
log = logging.getLogger("agentq.mcp")


def call_tool(
    server: str, tool: str, args: dict[str, Any], *, idempotency_key: str, timeout_s: float
) -> dict[str, Any]:
    """Call `server`'s tool `tool` (the server's name for it) with `args` (already checked
    against its schema), within `timeout_s` seconds. Returns the step's result
    (`models.mcp.results`). Raises `ToolNotEnabled` for a server `AGENTQ_MCP_SERVERS` does not
    name, `McpCallTimedOut` at once when `timeout_s` is not positive, and the errors of the
    module docstring."""
    settings = get_settings()
    config = settings.mcp_servers.get(server)
    if config is None:
        raise ToolNotEnabled(f"no MCP server {server!r} in AGENTQ_MCP_SERVERS")
    where = f"tool {tool!r} of mcp server {server!r}"
    if timeout_s <= 0:
        raise McpCallTimedOut(f"{where}: the step had no time left for the call")
    held = sessions.session(server, config, settings.mcp_start_timeout_s)
    meta = {IDEMPOTENCY_META_KEY: idempotency_key}
    try:
        result = loop.run(
            held.call(tool, args, meta=meta, timeout_s=timeout_s), timeout_s + WAIT_GRACE_S
        )
    except sessions.CannotStart as exc:
        log.warning("mcp server %r cannot start: %s", server, exc)
        raise McpServerUnavailable(f"mcp server {server!r} cannot start: {exc}") from None
    except sessions.ConnectionLost as exc:
        raise McpConnectionLost(
            f"{where}: the connection closed during the call ({exc}); it may or may not have "
            "taken effect, and is tried again with the same idempotency key"
        ) from None
    except TimeoutError:
        raise _timed_out(where, timeout_s) from None
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            raise _timed_out(where, timeout_s) from None
        refused = f"{where}: the server refused the call: {exc.message} ({exc.code})"
        raise McpToolFailed(refused) from None
    except (RuntimeError, ValidationError) as exc:  # the SDK's checks of the answer
        unread = f"{where}: its answer cannot be read: {sessions.describe(exc)}"
        raise McpToolFailed(unread) from None
    if result.is_error:
        raise McpToolFailed(f"{where} answered an error: {error_text(result)}")
    return result_dict(result)


def _timed_out(where: str, timeout_s: float) -> McpCallTimedOut:
    return McpCallTimedOut(
        f"{where}: no answer within {timeout_s:.3g} s (the time its step had left); it may have "
        "taken effect, and is tried again with the same idempotency key"
    )
