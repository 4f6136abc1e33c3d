"""The tool registry: the named Python functions and MCP servers' tools a plan step may call.

A tool is a plain function `f(ctx: ToolContext, **args) -> dict[str, Any]` registered with the
`@tool(...)` decorator when its module is imported (`load_tool_modules`), or a tool of an MCP
server of `AGENTQ_MCP_SERVERS`, named `mcp__<server>__<tool>` (`models.mcp`: its function calls
the server). Its arguments are checked before it runs, against the function's signature with
pydantic or against the MCP tool's JSON schema (`models.plans.tool_arguments`), and refused when
they hold what JSON cannot (`NaN`, `Infinity`: `unstorable_argument`), so a model that invents
an argument gets a `ToolArgumentsError` that names the field and what is allowed, and the
function never runs (nor is the server called).

A process offers the tools of the modules in `AGENTQ_TOOL_MODULES` and of the MCP servers
(`enabled_tool`, `configured_tool_names`, `catalog`): a plan naming another is refused, and a
worker never runs one. A tool raising anything but agentq's `ToolError` family fails with
`ToolCrashed`, naming only the tool and the exception's type (the exception, which may hold host
paths, goes to the worker's log). Arguments and results are capped at
`AGENTQ_STEP_DATA_MAX_BYTES` (`models.plans.step_data`).
"""

from __future__ import annotations

import copy
import importlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from billiard.exceptions import SoftTimeLimitExceeded

from models.errors import (
    ConfigurationError,
    McpServerUnavailable,
    ToolArgumentsError,
    ToolCrashed,
    ToolError,
    ToolNotEnabled,
)
from models.mcp.names import split_name
from models.plans import tool_arguments
from models.plans.references import has_reference
from models.plans.step_data import check_step_data
from models.settings import get_settings
from models.storable import storable_problem

if TYPE_CHECKING:
    from models.mcp.catalogue import McpTool

ToolFunction = Callable[..., dict[str, Any]]

DEFAULT_TOOL_MODULES: tuple[str, ...] = ("worker.tools.builtin", "worker.tools.expenses")
"""The modules that register agentq's own tools: the built-ins and the expense-report demo."""

log = structlog.get_logger("agentq.worker")


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the step that called it.

    `attempt` is the 1-based attempt number of this step row; `tries_of_name` counts every
    attempt of a step with this name in the run (a replanned step keeps counting), this one
    included. `facts` are the run's pinned facts, such as `currency=EUR`. `call_number` is the
    1-based number of this call among the tool calls of a model step (0 in a tool step).
    `deadline` is when the step's time limit passes, on `time.monotonic()`'s clock (None: not
    known, as outside a worker's step).
    """

    run_id: int
    step_id: int
    step_name: str
    attempt: int
    tries_of_name: int
    facts: Mapping[str, str]
    call_number: int = 0
    deadline: float | None = None

    def time_left_s(self, default_s: float) -> float:
        """Seconds until `deadline` (0 or less: passed), or `default_s` when it is not known."""
        return default_s if self.deadline is None else self.deadline - time.monotonic()

    @property
    def idempotency_key(self) -> str:
        """`run-<run_id>/step-<step_id>` (and `/call-<n>` for a model step's n-th tool call):
        the same on every attempt of the same step row."""
        key = f"run-{self.run_id}/step-{self.step_id}"
        return f"{key}/call-{self.call_number}" if self.call_number else key


@dataclass(frozen=True)
class Fallback:
    """Another tool to try when this one fails; `args` may hold `${...}` references."""

    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Tool:
    """A tool: its function, its description for the planner and its result keys; `module` is
    where the function is defined (what `AGENTQ_TOOL_MODULES` must name; "" for an MCP tool).

    `schema` is the JSON schema its arguments are checked against (an MCP tool's
    `inputSchema`); None: its function's signature is (pydantic). `annotations` are its hints
    as its MCP server sent them, camelCase keys as in the protocol (`readOnlyHint`,
    `destructiveHint`, `idempotentHint`, `openWorldHint`, `title`); a Python tool's are `{}`, or
    `{"readOnlyHint": true}` when registered `read_only`; an MCP tool sent without any has the
    protocol's defaults: not read-only, destructive, not idempotent, open world.
    """

    name: str
    description: str
    func: ToolFunction
    returns: tuple[str, ...]
    fallback: Fallback | None
    module: str = ""
    schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def parameters_schema(self) -> dict[str, Any]:
        """The arguments' JSON schema: `schema`, or pydantic's of the signature without `ctx`."""
        if self.schema is not None:
            return copy.deepcopy(dict(self.schema))
        return tool_arguments.signature_schema(self.func)

    def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        """Validate `args`, call the function and check its result.

        Raises `ToolArgumentsError` (the function is not called) when the arguments do not fit
        the signature or `schema` or hold a non-finite number (`unstorable_argument`),
        `StepDataTooLarge` when the arguments or the result are over `AGENTQ_STEP_DATA_MAX_BYTES`,
        `ToolError` when the result is not a JSON-serialisable dict holding every key in
        `returns`, what the function raises of the `ToolError` family (`RetryableToolError`
        too; an MCP tool's: `models.mcp.calls`) and `SoftTimeLimitExceeded`; anything else
        it raises is logged with its traceback and raised as `ToolCrashed`."""
        max_bytes = get_settings().step_data_max_bytes
        check_step_data(args, what=f"the arguments of tool {self.name!r}", max_bytes=max_bytes)
        validated = self._validate(args)
        try:
            result = self.func(ctx, **validated)
        except (ToolError, SoftTimeLimitExceeded):
            raise
        except Exception as exc:
            log.exception("tool.crashed", tool=self.name, run_id=ctx.run_id, step_id=ctx.step_id)
            raise ToolCrashed(self.name, exc) from exc
        _check_result(self.name, result, self.returns)
        check_step_data(result, what=f"the result of tool {self.name!r}", max_bytes=max_bytes)
        return result

    def _validate(self, args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolArgumentsError(f"tool {self.name!r}: arguments must be an object: {args!r}")
        problems: Sequence[tool_arguments.Problem | str] = []
        if problem := unstorable_argument(args):
            problems = [problem]
        else:
            validated, problems = self.checked(args)
        if problems:
            schema = self.parameters_schema()
            raise ToolArgumentsError(tool_arguments.rejected(self.name, schema, problems))
        return validated

    def checked(
        self, args: Mapping[str, Any]
    ) -> tuple[dict[str, Any], list[tool_arguments.Problem]]:
        """`args` checked against `schema` or the signature: the arguments to call the function
        with (pydantic's values for a Python tool, `args` as they are for a schema), or the
        problems."""
        if self.schema is not None:
            return dict(args), tool_arguments.by_schema(self.schema, args)
        return tool_arguments.by_signature(self.func, args)

    def describe(self) -> dict[str, Any]:
        """This tool as a catalog entry (see `catalog`)."""
        fallback = self.fallback and {"tool": self.fallback.tool, "args": self.fallback.args}
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters_schema(),
            "returns": list(self.returns),
            "fallback": fallback,
        }


def argument_problems(name: str, args: dict[str, Any]) -> list[str]:
    """What is wrong with calling tool `name` with `args`, before the plan is written.

    Arguments holding a `${...}` reference are checked for presence only (their value is known at
    run time); everything else is validated as `Tool.invoke` would. An unknown tool is one problem.
    """
    try:
        found = get_tool(name)
    except ToolError as exc:
        return [str(exc)]
    if problem := unstorable_argument(args):
        return [f"tool {name!r}: {problem}"]
    deferred = {key for key, value in args.items() if has_reference(value)}
    problems = found.checked(args)[1]
    return [f"tool {name!r}: {p}" for p in problems if p.field.split(".")[0] not in deferred]


def unstorable_argument(args: Mapping[str, Any]) -> str | None:
    """The first argument in `args` (decoded JSON) holding what JSON and Postgres cannot: a
    non-finite number (`NaN`, `Infinity`, `-Infinity`, which Python's `json` reads), a NUL
    character or a lone surrogate; as `"<field>: <why>"` (`rate: numbers must be finite, not
    nan ...`, `items.0: ...`), or None. Pydantic would pass such a value to a `float` or `Any`
    parameter, and the call's event could not be written (issue 11)."""
    return storable_problem(dict(args), "")


_TOOLS: dict[str, Tool] = {}


def tool(
    name: str,
    *,
    description: str,
    returns: tuple[str, ...] = (),
    fallback: Fallback | None = None,
    read_only: bool = False,
) -> Callable[[ToolFunction], ToolFunction]:
    """Register the decorated function as the tool `name`; the function itself is returned as is.
    `read_only`: it changes nothing (MCP's `readOnlyHint`); else it may (`models.engine.effects`).

    The function's first parameter must be `ctx` (a `ToolContext`); the others are the tool's
    arguments and need type hints (pydantic validates them). Raises `ValueError` when the name
    is taken or is an MCP tool's (`mcp__<server>__<tool>`), or the signature does not fit.
    """

    def register(func: ToolFunction) -> ToolFunction:
        if split_name(name) is not None:
            raise ValueError(f"tool {name!r}: names mcp__<server>__<tool> are MCP servers' tools")
        if name in _TOOLS:
            raise ValueError(f"tool {name!r} is already registered (by {_TOOLS[name].func!r})")
        tool_arguments.signature_model(func)  # fail at import, not at the first call
        hints = {"readOnlyHint": True} if read_only else {}
        _TOOLS[name] = Tool(
            name, description, func, tuple(returns), fallback, func.__module__, annotations=hints
        )
        return func

    return register


def get_tool(name: str) -> Tool:
    """The registered tool `name`, or the MCP tool `name` (`mcp__<server>__<tool>`) if its server
    offers it (its `annotations` are the server's hints). Raises `ToolError` listing the
    registered names if unknown, or saying why the MCP tool is not offered."""
    if split_name(name) is not None:
        return _mcp_tool(name)
    try:
        return _TOOLS[name]
    except KeyError:
        known = ", ".join(sorted(_TOOLS)) or "none"
        raise ToolError(f"unknown tool {name!r}; registered: {known}") from None


def enabled_tool(name: str) -> Tool:
    """The tool `name` if `AGENTQ_TOOL_MODULES` or an MCP server (`AGENTQ_MCP_SERVERS`) offers
    it: what a worker runs.

    Raises `ToolNotEnabled` naming the tool and the enabled ones otherwise (registered by some
    other imported module, or not at all), or why the MCP tool is not offered;
    `McpServerUnavailable` (retryable) when its MCP server cannot start now.
    """
    if split_name(name) is not None:
        return _mcp_tool(name)
    enabled = _module_tool_names()
    if name not in enabled:
        raise ToolNotEnabled(
            f"tool {name!r} is not enabled (AGENTQ_TOOL_MODULES); enabled: "
            f"{', '.join(enabled) or 'none'}"
        )
    return _TOOLS[name]


def unavailable_reason(name: str) -> str | None:
    """Why the MCP tool `name` is not offered (`models.mcp.catalogue.unavailable`: its server is
    not configured, cannot start, or does not offer it), for a plan's refusal; None otherwise."""
    if split_name(name) is None:
        return None
    from models.mcp import catalogue

    found = catalogue.unavailable(name)
    return found.why if found else None


def catalog() -> list[dict[str, Any]]:
    """Every enabled tool (`configured_tool_names`), sorted by name, as shown to planners.

    Shape: `[{"name", "description", "parameters": <JSON schema>, "returns": [key, ...],
    "fallback": {"tool", "args"} | None}, ...]`.
    """
    tools = {name: _TOOLS[name] for name in _module_tool_names()} | _mcp_tools()
    return [tools[name].describe() for name in sorted(tools)]


def configured_tool_names() -> list[str]:
    """Names of the tools of the modules in `AGENTQ_TOOL_MODULES` (or their submodules) and of
    the MCP servers of `AGENTQ_MCP_SERVERS` that can start (`models.mcp.catalogue`), sorted, for
    checking plans in any process (the CLI, the API) and running them in a worker; importing the
    modules registers their tools and runs nothing else. Tools registered by other modules (a
    test's own) are not among them."""
    return sorted([*_module_tool_names(), *_mcp_tools()])


def _module_tool_names() -> list[str]:
    modules = get_settings().tool_modules
    load_tool_modules(modules)
    return sorted(
        name
        for name, found in _TOOLS.items()
        if any(found.module == m or found.module.startswith(f"{m}.") for m in modules)
    )


def declared_returns(name: str | None) -> tuple[str, ...]:
    """The result keys the configured tool `name` declares; () for None or an unknown tool."""
    if name and split_name(name) is not None:
        try:
            return _mcp_tool(name).returns
        except ToolError:
            return ()
    _module_tool_names()
    return found.returns if (found := _TOOLS.get(name or "")) else ()


def _mcp_tools() -> dict[str, Tool]:
    if not get_settings().mcp_servers:  # the MCP SDK is loaded only where servers are configured
        return {}
    from models.mcp import catalogue

    return {name: _as_tool(found) for name, found in catalogue.offered().items()}


def _mcp_tool(name: str) -> Tool:
    """The MCP tool `name`; raises `McpServerUnavailable` or `ToolNotEnabled` saying why not."""
    from models.mcp import catalogue

    missing = catalogue.unavailable(name)
    if missing is not None:
        raise (McpServerUnavailable if missing.retryable else ToolNotEnabled)(missing.why)
    server, _ = split_name(name) or ("", "")
    return _as_tool(catalogue.listing(server).offered[name])


def _as_tool(found: McpTool) -> Tool:
    """An MCP server's tool as a `Tool`: its function calls the server within the step's time
    left (`AGENTQ_STEP_TIME_LIMIT_S` outside a step), with the step's idempotency key."""
    from models.mcp import calls

    def call(ctx: ToolContext, **args: Any) -> dict[str, Any]:
        return calls.call_tool(
            found.server,
            found.tool,
            args,
            idempotency_key=ctx.idempotency_key,
            timeout_s=ctx.time_left_s(get_settings().step_time_limit_s),
        )

    returns = ("content", "text", "structured") if found.has_output else ("content", "text")
    return Tool(
        found.name,
        found.description,
        call,
        returns,
        None,
        schema=found.input_schema,
        annotations=found.annotations,
    )


def load_tool_modules(modules: Sequence[str]) -> None:
    """Import each module so its `@tool`s register; importing twice is a no-op (sys.modules).

    Raises `ConfigurationError` naming `AGENTQ_TOOL_MODULES` for a module that is not found.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ConfigurationError(
                f"AGENTQ_TOOL_MODULES: cannot import {module!r} ({exc}); list importable modules "
                "that register tools"
            ) from exc


def _check_result(name: str, result: object, returns: tuple[str, ...]) -> None:
    """Raise `ToolError` unless `result` is a dict with the `returns` keys that is JSON (no NaN)."""
    if not isinstance(result, dict):
        raise ToolError(f"tool {name!r} returned {type(result).__name__}, expected a dict")
    if missing := [key for key in returns if key not in result]:
        raise ToolError(f"tool {name!r} returned no {', '.join(missing)}; got {sorted(result)}")
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"tool {name!r} returned a result that is not JSON: {exc}") from exc
