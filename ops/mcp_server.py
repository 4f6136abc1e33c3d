"""`agentq mcp`: agentq served to a person in an MCP client (Claude Desktop, an IDE), over stdio
or streamable HTTP, with the `mcp` SDK's `MCPServer` (mcp 2.x's FastMCP).

Every tool is one call of the Python client (`agentq.client.AsyncClient`) to agentq's HTTP API
with one API token, so what a tool may do is what the token's role may do over the API
(a submitter submits and follows its runs; a reviewer works the review queue; an admin both),
and there is one implementation of each command behind the CLI, the API, the console and this.
A tool's answer is structured content (`ops.mcp_answers`, each tool's `outputSchema`); a
refusal is an `isError` result of one line: the API's (`403 Forbidden: role 'submitter' may
not do this; ...`), a bad argument naming its field, or the API out of reach.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Final

import anyio
import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from agentq.client import ApiError, AsyncClient
from models.errors import ConfigurationError
from models.settings import get_settings
from ops import mcp_answers as answers
from ops.mcp_tools import Api, register
from ops.option_values import host_port
from ops.stack_file import read_stack_file

if TYPE_CHECKING:
    from models.settings import Settings

SERVER_NAME: Final = "agentq"
ROLES_TEXT: Final = (
    "A submitter token submits goals (submit_goal) and follows its own runs (run_status, "
    "list_runs, cancel_run); a reviewer token works the review queue (list_reviews, "
    "show_review, claim_review, then approve, reject, respond, edit_arguments or edit_plan); an "
    "admin token does both. A tool the token's role may not use answers 403."
)


class AgentqServer(MCPServer[Any]):
    """`MCPServer` whose refusals read as one line: the API's as it said it (`404 NotFound: run
    7 does not exist`), and one made here, before anything was sent, after the tool's name:
    arguments that do not fit the tool's schema (`run_status: run_id: Input should be a valid
    integer`, not pydantic's report), a request the API's models refuse, the API out of reach.
    Never the SDK's `Error executing tool ...:` before them."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """As `MCPServer.call_tool`; raises `ToolError` with the one-line message."""
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ToolError):  # raised by `Api.ask`: the refusal's line
                cause, line = cause.__cause__, str(cause)
            elif isinstance(cause, ValidationError):  # by the SDK, checking the arguments
                line = answers.fields_line(cause.errors(include_url=False))
            else:
                raise
            told = line if isinstance(cause, ApiError) else f"{name}: {line}"
            raise ToolError(told) from cause


def build_server(api: Api, instructions: str) -> AgentqServer:
    """The MCP server of agentq's tools (`ops.mcp_tools`) and the run resource
    `agentq://runs/{run_id}`, acting through `api`."""
    server = AgentqServer(
        SERVER_NAME, instructions=instructions, log_level="WARNING", warn_on_duplicate_tools=True
    )
    register(server, api)

    @server.resource(
        "agentq://runs/{run_id}",
        name="run",
        description="Where a run stands (as the run_status tool answers), as JSON.",
        mime_type="application/json",
    )
    async def run_resource(run_id: int) -> str:
        try:
            run = await api.ask(api.client.get(run_id, events_limit=1))
        except ToolError as exc:
            raise ResourceError(str(exc)) from exc.__cause__
        return answers.run_state(run).model_dump_json(indent=2)

    return server


async def principal(api: Api) -> answers.Principal | None:
    """Who the token acts as; None when the API does not answer, or answers an error of its own
    (a 5xx: the server starts anyway, and its tools say what the API says until it answers).
    Raises `ConfigurationError` when the API refuses the token (401), or there is no agentq API
    at that URL (404)."""
    try:
        me = await api.client.me()
    except ApiError as exc:
        if exc.status == 401:
            raise ConfigurationError(
                f"the API at {api.url} refused the token (401: {exc.detail}); make one with "
                "`agentq token create --name NAME --role reviewer` (or submitter, admin)"
            ) from exc
        if exc.status == 404:
            raise ConfigurationError(
                f"{api.url} has no agentq API (GET /api/v1/me: 404); give the address "
                "`agentq up` prints, such as http://127.0.0.1:8765"
            ) from exc
        return None
    except httpx.TransportError:
        return None
    return answers.Principal(token=me.name, role=me.role, user=me.user_id, api_url=api.url)


def instructions(url: str, me: answers.Principal | None) -> str:
    """What the MCP client is told of this server: agentq, the API at `url`, the token it acts
    as (`me`; None when the API did not answer at start), and what each role may do."""
    acting = (
        "(it did not answer when this server started)"
        if me is None
        else f"as the API token {me.token!r}, role {me.role}"
        + (f", user {me.user}" if me.user else "")
    )
    return (
        "agentq runs goals as durable plans of steps on workers; a run that needs a person "
        "(a failed step with no replan left, a spent budget, a tool call that needs approval) "
        f"waits in the review queue. This server acts through agentq's API at {url} {acting}. "
        + ROLES_TEXT
    )


async def serve(url: str, token: str, http: tuple[str, int] | None) -> None:
    """Serve agentq's tools over stdio (`http` None: what an MCP client launches), else over
    streamable HTTP at `http://HOST:PORT/mcp`, until the client closes stdin or Ctrl-C; a line
    on stderr says whom it acts as. Raises `ConfigurationError` when the API refuses the
    token."""
    async with AsyncClient(url, token) as client:
        api = Api(client, url)
        me = await principal(api)
        told = "(the API does not answer yet)" if me is None else f"as {me.token} ({me.role})"
        where = "stdio" if http is None else f"http://{http[0]}:{http[1]}/mcp"
        print(f"agentq mcp: serving {url} {told} over {where}", file=sys.stderr, flush=True)
        server = build_server(api, instructions(url, me))
        if http is None:
            await server.run_stdio_async()
        else:
            await server.run_streamable_http_async(host=http[0], port=http[1])


def run_server(*, url: str | None, token: str | None, http: str | None) -> None:
    """`agentq mcp`: `serve` the API at `url` (else `default_api_url`) with `token` (else
    `AGENTQ_API_TOKEN`), over stdio or, with `http` (`HOST:PORT`), streamable HTTP, until the
    client goes or Ctrl-C. Raises `ConfigurationError` when there is no token or the API
    refuses it."""
    settings = get_settings()
    secret = token or (settings.api_token.get_secret_value() if settings.api_token else None)
    if not secret:
        raise ConfigurationError(
            "no API token: set AGENTQ_API_TOKEN (or pass --token) to a token from "
            "`agentq token create --name NAME --role reviewer` (or submitter, admin)"
        )
    address = None if http is None else host_port(http)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: stopped, as the user asked
        anyio.run(serve, url or default_api_url(settings), secret, address)


def default_api_url(settings: Settings) -> str:
    """`AGENTQ_API_URL`, else the API of the `agentq up` running on `AGENTQ_HOME` (its stack
    file), else `http://AGENTQ_API_HOST:AGENTQ_API_PORT` (a wildcard host as loopback)."""
    if settings.api_url:
        return settings.api_url
    running = read_stack_file(settings.home) or {}
    if isinstance(running.get("api_url"), str):
        return str(running["api_url"])
    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(settings.api_host, settings.api_host)
    return f"http://{host}:{settings.api_port}"
