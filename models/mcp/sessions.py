"""Sessions with MCP servers: one per server per process, opened when first needed, opened again
after the server crashed, closed when the process ends.

A session is the `mcp` SDK's `Client`, entered by a task of its own on the process's loop
(`models.mcp.loop`) that holds it until it is closed: the SDK's client must be left by the task
that entered it, and calls come from other tasks (each caller's). Opening a session starts the
server (stdio: its `command` as a child process in a session of its own, its stderr on this
process's) or connects to it (streamable HTTP, with the `headers`), initializes it and lists its
tools, all within `AGENTQ_MCP_START_TIMEOUT_S`; anything that goes wrong is `CannotStart`, one
line saying why.

A session whose connection has closed (the server exited or was killed, the HTTP server went
away) is not used again: the call that met the closed connection fails (`ConnectionLost`), and
the next call opens a new session. A stdio server that died while idle is seen before the next
call is sent, from the SDK's dispatcher's closed flag (mcp 2.3 has no public one; if it goes,
that call fails instead and the one after opens the new session).

Sessions belong to the process that opened them: a forked child (Celery's pool) forgets the
parent's (`os.register_at_fork`) and opens its own; `close_all` ends them (atexit, and Celery's
`worker_process_shutdown` in `worker.app`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final, TextIO, cast

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    CallToolResult,
    Implementation,
    RequestParamsMeta,
    Tool,
)

from models.mcp import loop
from models.settings import get_settings
from models.settings_mcp import McpServer

CLIENT_INFO: Final = Implementation(name="agentq", version="0.1.0")
MAX_LIST_PAGES: Final = 100  # a server whose pages never end cannot hold a start for ever
CLOSE_TIMEOUT_S: Final = 5.0  # the SDK gives a stdio server 2 s after stdin closes, then kills it
# The SDK's own defaults for an HTTP server (`create_mcp_http_client`): 30 s to connect or write,
# 300 s to read a response stream. A call's own limit is its `timeout_s`.
HTTP_TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)
# httpx2 (the SDK's HTTP client) logs every request at INFO: one or two lines per call in a
# worker's log, which Celery keeps at INFO. Its warnings and errors still show.
logging.getLogger("httpx2").setLevel(logging.WARNING)
CONNECTION_ERRORS: Final = (
    OSError,  # a refused or reset connection, a broken pipe
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,  # the server went away mid-request
)


class CannotStart(Exception):
    """The server could not be started or reached, initialized and listed; the text says why."""


class ConnectionLost(Exception):
    """The connection to the server closed during the call; whether the call took effect is not
    known. The session is dropped: the next call opens a new one."""


class Session:
    """This process's session with the MCP server `name` (`config`); see the module docstring.
    `tools` is the server's listing when the session last opened (None: never opened)."""

    def __init__(self, name: str, config: McpServer, start_timeout_s: float) -> None:
        self.name, self.config, self.start_timeout_s = name, config, start_timeout_s
        self.tools: list[Tool] | None = None
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._opening = asyncio.Lock()

    def alive(self) -> bool:
        """Whether the session is open and its connection not known to be closed."""
        client, holder = self._client, self._holder
        return (
            client is not None
            and holder is not None
            and not holder.done()
            and not (_dispatcher_closed(client))
        )

    async def open(self, timeout_s: float | None = None) -> Client:
        """The open session's client, opening it (again) first if it is not `alive`, within
        `timeout_s` and `start_timeout_s`, whichever is less. Raises `CannotStart`."""
        async with self._opening:
            if self.alive() and self._client is not None:
                return self._client
            await self.close()
            limit_s = min(self.start_timeout_s, timeout_s or self.start_timeout_s)
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            ready.add_done_callback(_retrieved)  # its waiter may be gone (a time limit)
            self._stop = asyncio.Event()
            self._holder = asyncio.create_task(self._hold(ready), name=f"mcp-{self.name}")
            try:
                return await asyncio.wait_for(asyncio.shield(ready), limit_s)
            except TimeoutError:
                self._holder.cancel()
                bound = "AGENTQ_MCP_START_TIMEOUT_S" if limit_s == self.start_timeout_s else ""
                bound = bound or "the time its step had left"
                raise CannotStart(f"no answer within {limit_s:.3g} s ({bound})") from None
            except Exception as exc:
                if _closed_connection(exc):  # a command that exited at once, say
                    raise CannotStart(
                        f"the connection closed before the server answered ({describe(exc)}); "
                        "a command server may have exited (its stderr says why)"
                    ) from exc
                raise CannotStart(describe(exc)) from exc

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        """Enter the SDK's client, list the server's tools, and hold the client until `close`;
        the holder's end (a closed connection included) leaves the session not `alive`."""
        held: Client | None = None
        try:
            async with self._connected() as client:
                self.tools = await _listing(client)
                held = self._client = client
                ready.set_result(client)
                await self._stop.wait()
        except Exception as exc:  # the connection's end, or the start's failure
            if not ready.done():
                ready.set_exception(exc)
        finally:
            if self._client is held:  # not a newer holder's
                self._client = None

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[Client]:
        config = self.config
        async with AsyncExitStack() as stack:
            if config.command is not None:
                params = StdioServerParameters(
                    command=config.command, args=config.args, env=config.env, cwd=server_dir(config)
                )
                transport: Any = stdio_client(params, errlog=_errlog())
            else:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=config.headers, timeout=HTTP_TIMEOUT)
                )
                transport = streamable_http_client(config.url or "", http_client=http)
            client = Client(transport, client_info=CLIENT_INFO, cache=None)
            yield await stack.enter_async_context(client)

    async def call(
        self, tool: str, args: dict[str, Any], *, meta: dict[str, Any], timeout_s: float
    ) -> CallToolResult:
        """Call `tool` with `args` and `_meta` `meta`, opening the session first if needed; the
        whole within `timeout_s`. Raises `CannotStart`, `ConnectionLost` (the session is
        dropped), `TimeoutError`, the SDK's `MCPError` (the server refused the call) and what
        the SDK raises on a malformed answer (`RuntimeError`, pydantic's `ValidationError`)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        client = await self.open(timeout_s)
        left_s = max(deadline - asyncio.get_running_loop().time(), 0.001)
        try:
            return await client.call_tool(
                tool, args, read_timeout_seconds=left_s, meta=cast(RequestParamsMeta, meta)
            )
        except Exception as exc:
            if lost(exc):
                await self.close()
                raise ConnectionLost(describe(exc)) from exc
            raise

    async def close(self) -> None:
        """End the session (the server's process, for stdio) if it is open; never raises."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(holder, CLOSE_TIMEOUT_S)
        except BaseException:
            holder.cancel()


def lost(exc: BaseException) -> bool:
    """Whether `exc` (or every error in its group) says the connection closed or broke."""
    if isinstance(exc, BaseExceptionGroup):
        return all(lost(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    return isinstance(exc, CONNECTION_ERRORS)


def _closed_connection(exc: BaseException) -> bool:
    """Whether `exc` is the SDK's word that the connection closed (not, say, a spawn's error)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_closed_connection(inner) for inner in exc.exceptions)
    return isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED


def describe(exc: BaseException) -> str:
    """One line saying what `exc` is: its first leaf (an exception group's), its type and its
    text, at most 300 characters (a host path or a URL may be in it: it goes to logs and the
    operator, and to a step's error)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or "no detail"
    line = f"{text} ({type(exc).__name__})"
    return line if len(line) <= 300 else line[:297] + "..."


def _retrieved(future: asyncio.Future[Client]) -> None:
    """Mark a start's failure as seen, so asyncio does not log it when nobody waits any more."""
    if not future.cancelled():
        future.exception()


async def _listing(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _dispatcher_closed(client: Client) -> bool:
    """The SDK's dispatcher's `_closed` flag (see the module docstring); False if absent."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's own stderr (file descriptor 2), even
    where `sys.stderr` was replaced by something without one (Celery's pool logs it)."""
    return sys.__stderr__ if sys.__stderr__ is not None else open(os.devnull, "w")


_sessions: dict[str, Session] = {}
_registry_lock = threading.Lock()
_registry_pid = os.getpid()  # whose sessions `_sessions` holds (a fork's hook clears them too)


def session(name: str, config: McpServer, start_timeout_s: float) -> Session:
    """This process's session with server `name`, made (not opened) if there is none or the
    server's configuration changed (the old one is closed first)."""
    global _registry_pid
    with _registry_lock:
        if _registry_pid != os.getpid():  # a child the fork hook missed: not ours to use
            _sessions.clear()
            _registry_pid = os.getpid()
        found = _sessions.get(name)
        if found is not None and found.config == config:
            found.start_timeout_s = start_timeout_s
            return found
        _sessions[name] = Session(name, config, start_timeout_s)
    if found is not None:
        loop.run(found.close(), CLOSE_TIMEOUT_S + 1)
    return _sessions[name]


def close_all() -> None:
    """Close every session of this process (their stdio servers exit); never raises."""
    with _registry_lock:
        found = list(_sessions.values()) if _registry_pid == os.getpid() else []
        _sessions.clear()
    for each in found:  # at shutdown: a close that fails leaves nothing to do
        with contextlib.suppress(Exception):
            loop.run(each.close(), CLOSE_TIMEOUT_S + 1)


def shutdown() -> None:
    """`close_all`, then stop this process's loop: what a process that forks next does first
    (Celery's worker before its pool starts), so no session or loop thread is forked."""
    close_all()
    loop.stop()


def _forget_after_fork() -> None:
    """In a forked child: the parent's sessions live on the parent's loop; never touch them."""
    global _registry_lock, _registry_pid
    _sessions.clear()
    _registry_lock = threading.Lock()
    _registry_pid = os.getpid()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(close_all)


def server_dir(config: McpServer) -> Path:
    """The directory a stdio server runs in, the same in every process (the CLI, the API, a
    worker, which runs in agentq's data directory): its `cwd` when absolute, else `cwd` under
    `AGENTQ_HOME` (no `cwd`: `AGENTQ_HOME` itself). So a relative path in its `command` or `args`
    means one place wherever agentq reads the settings; give absolute paths, as MCP clients ask.
    `AGENTQ_HOME` is made (0700) when it does not exist yet: a first `agentq tools` before any
    `agentq up`."""
    home = get_settings().home
    if config.cwd is None:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home / (config.cwd or "")
