"""A small MCP server for the tests, written with the `mcp` SDK (`MCPServer`, mcp 2.x's FastMCP).

Run over stdio (`python tests/mcp_servers/reports.py`) or streamable HTTP
(`python tests/mcp_servers/reports.py --http PORT`, served at `http://127.0.0.1:PORT/mcp`).

Its tools:
- `lookup(key)`: read-only, a value from a fixed table (structured content);
- `file_report(title, amount)`: effectful (`destructiveHint`), appends one line
  `<idempotency key>\\t<title>\\t<amount>` to the file named by `MCP_TEST_EFFECTS` and returns the
  report's number; a call whose `_meta` carries an `agentq/idempotency_key` already in the file is
  no second effect (it answers the first report's number, `repeated: true`). When the file named
  by `MCP_TEST_CRASH_AFTER_EFFECT` exists, the call deletes it, writes its effect, then kills the
  server before answering: a crash after the effect and before the answer;
- `crash(delay_s)`: kills the server (exit code 3) after `delay_s`, mid-call;
- `fail(message)`: raises, which the SDK answers as an `isError` result;
- `slow(seconds)`: sleeps, then answers;
- `picture()`: an image block and an embedded text resource.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, ImageContent, TextContent, TextResourceContents
from mcp.types import ToolAnnotations as Hints

IDEMPOTENCY_META_KEY = "agentq/idempotency_key"
TABLE = {"eur": "euro", "usd": "US dollar", "gbp": "pound sterling"}

server = MCPServer("reports", log_level="WARNING")


@server.tool(
    title="Look up a currency",
    description="The name of the currency whose code is `key` (eur, usd, gbp).",
    annotations=Hints(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
)
def lookup(key: str) -> dict[str, Any]:
    if key.lower() not in TABLE:
        raise ToolError(f"no currency {key!r}; known: {', '.join(sorted(TABLE))}")
    return {"key": key.lower(), "value": TABLE[key.lower()]}


@server.tool(
    description="File an expense report; each new idempotency key is one more report.",
    annotations=Hints(destructiveHint=True, idempotentHint=False, openWorldHint=True),
)
def file_report(title: str, amount: float, ctx: Context) -> dict[str, Any]:
    meta = ctx.request_context.meta or {}
    key = str(meta.get(IDEMPOTENCY_META_KEY) or "-")
    effects = Path(os.environ["MCP_TEST_EFFECTS"])
    lines = effects.read_text(encoding="utf-8").splitlines() if effects.exists() else []
    for number, line in enumerate(lines, 1):
        if key != "-" and line.split("\t")[0] == key:
            return {"report": number, "repeated": True}
    with effects.open("a", encoding="utf-8") as handle:
        handle.write(f"{key}\t{title}\t{amount}\n")
    crash_file = Path(os.environ.get("MCP_TEST_CRASH_AFTER_EFFECT", "/nonexistent"))
    if crash_file.exists():
        crash_file.unlink()
        os._exit(4)  # the effect is written; the answer never is
    return {"report": len(lines) + 1, "repeated": False}


@server.tool(description="Kill this server after `delay_s` seconds, in the middle of the call.")
async def crash(delay_s: float = 0.0) -> str:
    await asyncio.sleep(delay_s)
    os._exit(3)


@server.tool(description="Fail with `message` (an isError result).")
def fail(message: str) -> str:
    raise ToolError(message)  # the SDK's: answered as an error, logged without a traceback


@server.tool(description="Sleep `seconds`, then answer.")
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="A tiny image and an embedded text resource.", structured_output=False)
def picture() -> list[Any]:
    return [
        TextContent(type="text", text="a red dot"),
        ImageContent(type="image", data="iVBORw0KGgo=", mimeType="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(uri="memo://dot", mimeType="text/plain", text="dot"),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on PORT")
    given = parser.parse_args()
    if given.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=given.http)


if __name__ == "__main__":
    main()
