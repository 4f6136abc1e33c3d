"""The tool registry: named Python functions a plan step may call, and the playbooks that use them.

A tool is a plain function `f(ctx: ToolContext, **args) -> dict[str, Any]` registered with the
`@tool(...)` decorator when its module is imported (`load_tool_modules`). Its arguments are
checked against its signature with pydantic before it runs, and refused when they hold what JSON
cannot (`NaN`, `Infinity`: `unstorable_argument`), so a model that invents an argument gets a
`ToolArgumentsError` that names the field and what is allowed, and the function never runs.

The tools a process offers are those of the modules in `AGENTQ_TOOL_MODULES` (`enabled_tool`,
`configured_tool_names`, `catalog`), whatever else happens to be imported: a plan naming any
other tool is refused, and a worker never runs one. A tool that raises anything but agentq's own
`ToolError` family fails with `ToolCrashed`, which names only the tool and the exception's type;
the exception itself, which may hold host paths, goes to the worker's log. A tool's arguments
and result are capped at `AGENTQ_STEP_DATA_MAX_BYTES` (`models.plans.step_data`).

A playbook is a canned plan (a list of step dicts) that the offline planner returns for goals that
contain all of its keywords.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import structlog
from billiard.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, create_model

from models.errors import (
    ConfigurationError,
    ToolArgumentsError,
    ToolCrashed,
    ToolError,
    ToolNotEnabled,
)
from models.plans.references import has_reference
from models.plans.step_data import check_step_data
from models.settings import get_settings
from models.storable import json_integer, storable_problem

ToolFunction = Callable[..., dict[str, Any]]

DEFAULT_TOOL_MODULES: tuple[str, ...] = ("worker.tools.builtin", "worker.tools.expenses")
"""The modules that register agentq's own tools: the built-ins and the expense-report demo."""

_ARG_ERRORS_SHOWN = 5  # a model that gets everything wrong does not need 40 lines of errors
log = structlog.get_logger("agentq.worker")


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the step that called it.

    `attempt` is the 1-based attempt number of this step row; `tries_of_name` counts every
    attempt of a step with this name in the run (a replanned step keeps counting), this one
    included. `facts` are the run's pinned facts, such as `currency=EUR`. `call_number` is the
    1-based number of this call among the tool calls of a model step (0 in a tool step).
    """

    run_id: int
    step_id: int
    step_name: str
    attempt: int
    tries_of_name: int
    facts: Mapping[str, str]
    call_number: int = 0

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
    """A registered tool: its function, its description for the planner and its result keys;
    `module` is where the function is defined (what `AGENTQ_TOOL_MODULES` must name)."""

    name: str
    description: str
    func: ToolFunction
    returns: tuple[str, ...]
    fallback: Fallback | None
    module: str = ""

    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema (pydantic's) of the arguments: the signature without `ctx`."""
        return _arguments_model(self.func).model_json_schema()

    def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        """Validate `args`, call the function and check its result.

        Raises `ToolArgumentsError` (the function is not called) when the arguments do not fit
        the signature or hold a non-finite number (`unstorable_argument`), `StepDataTooLarge`
        when the arguments or the result are over `AGENTQ_STEP_DATA_MAX_BYTES`, `ToolError`
        when the result is not a JSON-serialisable dict holding every key in `returns`, what
        the function raises of the `ToolError` family (`RetryableToolError` included) and
        billiard's `SoftTimeLimitExceeded`; anything else the function raises is logged with
        its traceback and raised as `ToolCrashed`.
        """
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
        model = _arguments_model(self.func)
        if not isinstance(args, dict):
            raise ToolArgumentsError(f"tool {self.name!r}: arguments must be an object: {args!r}")
        if problem := unstorable_argument(args):
            raise ToolArgumentsError(_rejected(self, [problem]))
        try:
            parsed = model.model_validate(args)
        except ValidationError as exc:
            raise ToolArgumentsError(_describe_errors(self, exc)) from exc
        return {field: getattr(parsed, field) for field in type(parsed).model_fields}

    def describe(self) -> dict[str, Any]:
        """This tool as a catalog entry (see `catalog`)."""
        fallback = self.fallback
        fallback_entry = fallback and {"tool": fallback.tool, "args": fallback.args}
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters_schema(),
            "returns": list(self.returns),
            "fallback": fallback_entry,
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
    try:
        _arguments_model(found.func).model_validate(args)
    except ValidationError as exc:
        deferred = {key for key, value in args.items() if has_reference(value)}
        errors = [e for e in exc.errors() if not (e["loc"] and e["loc"][0] in deferred)]
        return [f"tool {name!r}: {_describe_error(e)}" for e in errors]
    return []


def unstorable_argument(args: Mapping[str, Any]) -> str | None:
    """The first argument in `args` (decoded JSON) holding what JSON and Postgres cannot: a
    non-finite number (`NaN`, `Infinity`, `-Infinity`, which Python's `json` reads), a NUL
    character or a lone surrogate; as `"<field>: <why>"` (`rate: numbers must be finite, not
    nan ...`, `items.0: ...`), or None. Pydantic would pass such a value to a `float` or `Any`
    parameter, and the call's event could not be written (issue 11)."""
    return storable_problem(dict(args), "")


_TOOLS: dict[str, Tool] = {}
_PLAYBOOKS: list[tuple[tuple[str, ...], list[dict[str, Any]], tuple[str, ...]]] = []


def tool(
    name: str,
    *,
    description: str,
    returns: tuple[str, ...] = (),
    fallback: Fallback | None = None,
) -> Callable[[ToolFunction], ToolFunction]:
    """Register the decorated function as the tool `name`; the function itself is returned as is.

    The function's first parameter must be `ctx` (a `ToolContext`); the others are the tool's
    arguments and need type hints (pydantic validates them). Raises `ValueError` when the name
    is taken or the signature does not fit.
    """

    def register(func: ToolFunction) -> ToolFunction:
        if name in _TOOLS:
            raise ValueError(f"tool {name!r} is already registered (by {_TOOLS[name].func!r})")
        _arguments_model(func)  # fail at import, not at the first call
        _TOOLS[name] = Tool(name, description, func, tuple(returns), fallback, func.__module__)
        return func

    return register


def get_tool(name: str) -> Tool:
    """The registered tool `name`; raises `ToolError` listing the registered names if unknown."""
    try:
        return _TOOLS[name]
    except KeyError:
        known = ", ".join(sorted(_TOOLS)) or "none"
        raise ToolError(f"unknown tool {name!r}; registered: {known}") from None


def enabled_tool(name: str) -> Tool:
    """The tool `name` if `AGENTQ_TOOL_MODULES` offers it: what a worker runs.

    Raises `ToolNotEnabled` naming the tool and the enabled ones otherwise (registered by some
    other imported module, or not at all).
    """
    enabled = configured_tool_names()
    if name not in enabled:
        raise ToolNotEnabled(
            f"tool {name!r} is not enabled (AGENTQ_TOOL_MODULES); enabled: "
            f"{', '.join(enabled) or 'none'}"
        )
    return _TOOLS[name]


def catalog() -> list[dict[str, Any]]:
    """Every enabled tool (`configured_tool_names`), sorted by name, as shown to planners.

    Shape: `[{"name", "description", "parameters": <JSON schema>, "returns": [key, ...],
    "fallback": {"tool", "args"} | None}, ...]`.
    """
    return [_TOOLS[name].describe() for name in configured_tool_names()]


def configured_tool_names() -> list[str]:
    """Names of the tools of the modules in `AGENTQ_TOOL_MODULES` (or their submodules), sorted,
    for checking plans in any process (the CLI, the API) and running them in a worker;
    importing the modules registers their tools and runs nothing else. Tools registered by
    other modules (a test's own) are not among them."""
    modules = get_settings().tool_modules
    load_tool_modules(modules)
    return sorted(
        name
        for name, found in _TOOLS.items()
        if any(found.module == m or found.module.startswith(f"{m}.") for m in modules)
    )


def declared_returns(name: str | None) -> tuple[str, ...]:
    """The result keys the configured tool `name` declares; () for None or an unknown tool."""
    configured_tool_names()
    found = _TOOLS.get(name or "")
    return found.returns if found else ()


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


def playbook(
    keywords: tuple[str, ...], steps: list[dict[str, Any]], criteria: tuple[str, ...] = ()
) -> None:
    """Register a canned plan for goals containing every keyword (case-insensitive), with the
    success criteria the offline planner writes with it (`models.engine.goal_checks`).

    Raises `ValueError` for an empty keyword tuple or one already registered.
    """
    key = tuple(word.lower() for word in keywords)
    if not key:
        raise ValueError("a playbook needs at least one keyword")
    if any(existing == key for existing, _, _ in _PLAYBOOKS):
        raise ValueError(f"a playbook for {key!r} is already registered")
    _PLAYBOOKS.append((key, copy.deepcopy(steps), tuple(criteria)))


def find_playbook(goal: str) -> list[dict[str, Any]] | None:
    """A copy of the first registered playbook whose keywords all appear in `goal`, else None."""
    found = _matching(goal)
    return copy.deepcopy(found[1]) if found is not None else None


def playbook_criteria(goal: str) -> list[str]:
    """The success criteria of the playbook `find_playbook` finds for `goal` ([] for none)."""
    found = _matching(goal)
    return list(found[2]) if found is not None else []


def _matching(goal: str) -> tuple[tuple[str, ...], list[dict[str, Any]], tuple[str, ...]] | None:
    text = goal.lower()
    return next((p for p in _PLAYBOOKS if all(word in text for word in p[0])), None)


@functools.cache
def _arguments_model(func: ToolFunction) -> type[BaseModel]:
    """A pydantic model of `func`'s parameters after `ctx`; extra arguments are rejected."""
    params = list(inspect.signature(func).parameters.values())
    if not params or params[0].name != "ctx":
        raise ValueError(f"{func.__qualname__}: a tool's first parameter must be 'ctx'")
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for param in params[1:]:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ValueError(f"{func.__qualname__}: *args/**kwargs are not allowed in a tool")
        if param.name not in hints:
            raise ValueError(f"{func.__qualname__}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (_whole_numbers_as_json(hints[param.name]), default)
    # Strict, as the API's bodies: a value of another JSON type is refused, never converted
    # ("5" is not 5), so the spec's argument schemas (`api.openapi`) say what is accepted.
    config = ConfigDict(extra="forbid", strict=True)
    model: type[BaseModel] = create_model(f"{func.__name__}_arguments", __config__=config, **fields)
    return model


def _whole_numbers_as_json(hint: Any) -> Any:
    """An `int` argument also takes `3.0` (`models.storable.json_integer`), as JSON Schema's
    `integer` does; every other hint is returned as it is."""
    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    return Annotated[hint, BeforeValidator(json_integer)] if base is int else hint


def _describe_errors(tool_: Tool, exc: ValidationError) -> str:
    """`tool 'x' rejected its arguments: rate: Input should be greater than 0 (got 0); ...`."""
    problems = [_describe_error(error) for error in exc.errors()[:_ARG_ERRORS_SHOWN]]
    if exc.error_count() > _ARG_ERRORS_SHOWN:
        problems.append(f"and {exc.error_count() - _ARG_ERRORS_SHOWN} more")
    return _rejected(tool_, problems)


def _rejected(tool_: Tool, problems: list[str]) -> str:
    allowed = describe_parameters(tool_.parameters_schema())
    return f"tool {tool_.name!r} rejected its arguments: {'; '.join(problems)}. Takes: {allowed}"


def _describe_error(error: Mapping[str, Any]) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "(arguments)"
    if error["type"] == "missing":
        return f"{field}: required but missing"
    shown = repr(error["input"])
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return f"{field}: {error['msg']} (got {shown})"


def describe_parameters(schema: Mapping[str, Any]) -> str:
    """`total: number, currency: string, note: string (optional)`, from a tool's arguments'
    JSON schema (`Tool.parameters_schema`); "none" for a tool without arguments."""
    required = set(schema.get("required", ()))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or ("any" if not prop.get("anyOf") else "one of several types")
        parts.append(f"{name}: {kind}" + ("" if name in required else " (optional)"))
    return ", ".join(parts) or "none"


def _check_result(name: str, result: object, returns: tuple[str, ...]) -> None:
    """Raise `ToolError` unless `result` is a dict with the `returns` keys that is JSON (no NaN)."""
    if not isinstance(result, dict):
        raise ToolError(f"tool {name!r} returned {type(result).__name__}, expected a dict")
    missing = [key for key in returns if key not in result]
    if missing:
        raise ToolError(f"tool {name!r} returned no {', '.join(missing)}; got {sorted(result)}")
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"tool {name!r} returned a result that is not JSON: {exc}") from exc
