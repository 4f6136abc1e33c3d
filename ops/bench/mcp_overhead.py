"""What calling a tool of an MCP server costs over a Python tool doing the same work.

`python -m ops.bench.mcp_overhead [--calls 200] [--rounds 5]` runs, in one process and one
invocation, the same look-up three ways through `Tool.invoke` (the path a worker's tool step and
a model step's tool calls take: arguments checked, the call, its result checked and capped):
- `python`: a Python tool (`bench_lookup`, registered here), arguments checked by pydantic;
- `stdio`: `lookup` of the test MCP server (`tests/mcp_servers/reports.py`) run over stdio by
  agentq, arguments checked against its JSON schema, the call a hop to the process's MCP loop,
  JSON-RPC over the server's pipes, and the answer made a step's result;
- `http`: the same server over streamable HTTP on 127.0.0.1 (a subprocess of this benchmark);
- `stdio, SDK alone` and `http, SDK alone`: the SDK's client calling `lookup` inside the loop,
  nothing of agentq's around it: the difference is what agentq adds.

Each round times `--calls` calls of each, one by one, the systems' order rotated per round; it
prints each one's per-call milliseconds (p50, p90, mean over every call of every round) and its
p50 over the Python tool's, then what starting a session costs (spawn or connect, initialize,
list: the price of the first call in a process, and of the first after a crash). Needs the
repository's `tests/` (the server). No database, broker or worker: a step's own cost around
its tool (claim, lease, commit: `ops/bench/engine_throughput.py`) is the same for all three.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from models.mcp import loop, sessions
from models.plans.tools import Tool, ToolContext, get_tool, tool
from models.settings import get_settings, use_settings
from ops.bench.figures import machine, markdown_table, percentile, ratio

SERVER: Final = Path(__file__).resolve().parents[2] / "tests" / "mcp_servers" / "reports.py"
TABLE: Final = {"eur": "euro", "usd": "US dollar", "gbp": "pound sterling"}  # the server's
STARTS: Final = 5  # session starts timed per transport
SDK_ALONE: Final = {"stdio, SDK alone": "stdio", "http, SDK alone": "http"}  # rows: their server


@tool("bench_lookup", description="The currency named by code `key`.", returns=("key", "value"))
def bench_lookup(ctx: ToolContext, key: str) -> dict[str, Any]:
    """The Python twin of the test server's `lookup`: the same table, the same answer."""
    return {"key": key.lower(), "value": TABLE[key.lower()]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def http_server() -> Iterator[str]:
    """The test server over streamable HTTP on a free port; yields its URL."""
    port = _free_port()
    argv = [sys.executable, str(SERVER), "--http", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the MCP test server over HTTP did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def timed_calls(found: Tool, calls: int) -> list[float]:
    """Milliseconds of each of `calls` calls of `found`, one after another."""
    ctx = ToolContext(run_id=1, step_id=1, step_name="bench", attempt=1, tries_of_name=1, facts={})
    took = []
    for i in range(calls):
        started = time.perf_counter()
        found.invoke(ctx, {"key": ("eur", "usd", "gbp")[i % 3]})
        took.append((time.perf_counter() - started) * 1000)
    return took


def sdk_calls(server: str, calls: int) -> list[float]:
    """Milliseconds of each of `calls` calls of `server`'s `lookup` made with the SDK's client
    alone, inside the MCP loop: no argument check, no hop from the caller's thread, the answer
    kept as the SDK's (what agentq adds is the difference with the row of `Tool.invoke`)."""
    settings = get_settings()
    held = sessions.session(server, settings.mcp_servers[server], settings.mcp_start_timeout_s)

    async def timed() -> list[float]:
        client = await held.open()
        took = []
        for i in range(calls):
            started = time.perf_counter()
            await client.call_tool("lookup", {"key": ("eur", "usd", "gbp")[i % 3]})
            took.append((time.perf_counter() - started) * 1000)
        return took

    return loop.run(timed(), 600)


def session_starts_ms(server: str) -> list[float]:
    """Milliseconds to open a session with `server` (spawn or connect, initialize, list), each
    of `STARTS` times from no session."""
    settings = get_settings()
    took = []
    for _ in range(STARTS):
        sessions.close_all()
        held = sessions.session(server, settings.mcp_servers[server], settings.mcp_start_timeout_s)
        started = time.perf_counter()
        loop.run(held.open(), settings.mcp_start_timeout_s + 5)
        took.append((time.perf_counter() - started) * 1000)
    return took


def rows(by_system: dict[str, list[float]]) -> list[list[str]]:
    """One row per system: p50, p90, mean ms per call, and p50 over the Python tool's."""
    base = percentile(by_system["python"], 50)
    return [
        [
            name,
            f"{percentile(ms, 50):.3f}",
            f"{percentile(ms, 90):.3f}",
            f"{statistics.fmean(ms):.3f}",
            ratio(percentile(ms, 50), base),
        ]
        for name, ms in by_system.items()
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="calls per system per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the order rotated")
    given = parser.parse_args(argv)
    if not SERVER.is_file():
        raise SystemExit(f"needs the repository's test MCP server: {SERVER}")
    with http_server() as url:
        use_settings(
            mcp_servers={
                "stdio": {"command": sys.executable, "args": [str(SERVER)]},
                "http": {"url": url},
            }
        )
        tools: dict[str, Callable[[], Tool]] = {
            "python": lambda: get_tool("bench_lookup"),
            "stdio": lambda: get_tool("mcp__stdio__lookup"),
            "http": lambda: get_tool("mcp__http__lookup"),
        }
        found = {name: make() for name, make in tools.items()}
        for each in found.values():
            timed_calls(each, 20)  # warm: sessions open, validators built
        by_system: dict[str, list[float]] = {name: [] for name in [*found, *SDK_ALONE]}
        names = [*found, *SDK_ALONE]
        for number in range(given.rounds):
            for name in names[number % len(names) :] + names[: number % len(names)]:
                if name in SDK_ALONE:
                    by_system[name] += sdk_calls(SDK_ALONE[name], given.calls)
                else:
                    by_system[name] += timed_calls(found[name], given.calls)
        starts = {server: session_starts_ms(server) for server in ("stdio", "http")}
        sessions.close_all()
    version = importlib.metadata.version("mcp")
    print(f"{datetime.date.today()}, {machine()}, mcp {version}")
    print(
        f"{given.rounds} rounds x {given.calls} calls per system, through Tool.invoke but for "
        "the SDK's alone\n"
    )
    head = ["system", "p50 ms/call", "p90 ms/call", "mean ms/call", "p50 / python"]
    print(markdown_table(head, rows(by_system)))
    print()
    for server, took in starts.items():
        print(
            f"session start, {server}: p50 {percentile(took, 50):.0f} ms, "
            f"max {max(took):.0f} ms ({STARTS} starts: spawn or connect, initialize, list)"
        )


if __name__ == "__main__":
    main()
