"""Which tool calls need a person's approval before they run: the policy and its rule (pure).

DESIGN.md, invariant 14; issue 30, item 1. The operator owns the policy
(`AGENTQ_TOOL_APPROVALS`); a submitter may tighten it for one run (`approvals` at submit), never
loosen it. Both are written in one small declarative form, a JSON object from tool names to what
their calls need:

    {"file_expense_report": "always",
     "pay": {"when": [{"arg": "amount", "gt": 500}, {"arg": "to", "not_endswith": "@acme.com"}]},
     "mcp__crm__*": "never"}

- a key is a tool name or an `fnmatch` pattern (`*`, `?`, `[...]`); an exact name wins over
  patterns, and a longer pattern over a shorter one;
- `"always"`: every call needs approval; `"never"`: none (the operator's word only);
- `{"when": [condition, ...]}`: a call needs approval when any condition holds. A condition names
  an argument (`arg`, a dotted path into objects: `payee.country`) and one comparison:
  `gt`, `gte`, `lt`, `lte` (numbers), `eq`, `ne` (any JSON value), `in`, `not_in` (a list),
  `startswith`, `endswith`, `not_endswith`, `contains` (strings). A condition on an argument
  the call does not pass does not hold; one whose argument has the wrong type for its comparison
  (a string where `gt` wants a number) holds: unsure means ask (fail closed).

A tool the operator's policy does not name is judged by what it says of itself: an MCP tool
(`mcp__<server>__<tool>`) needs approval unless its annotations say `readOnlyHint: true` (the MCP
specification's defaults: a tool that is not read-only may be destructive); agentq's Python tools
do not. A call needs approval when the operator's policy or the run's says so.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from models.errors import InvalidInput

MCP_PREFIX: Final = "mcp__"  # the names MCP tools join the catalogue under
COMPARISONS: Final = (
    "gt",
    "gte",
    "lt",
    "lte",
    "eq",
    "ne",
    "in",
    "not_in",
    "startswith",
    "endswith",
    "not_endswith",
    "contains",
)
RULE_FORM: Final = (
    'a rule is "always", "never" or {"when": [{"arg": <name>, <comparison>: <value>}, ...]}'
)
MAX_RULES: Final = 200  # tools a policy names; a policy is configuration, not data
MAX_CONDITIONS: Final = 20


class Condition(BaseModel):
    """One comparison on one argument (see the module docstring); strict: `false` is no number."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    arg: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.-]+$")
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None
    eq: Any = None
    ne: Any = None
    in_: list[Any] | None = Field(default=None, alias="in")
    not_in: list[Any] | None = None
    startswith: str | None = None
    endswith: str | None = None
    not_endswith: str | None = None
    contains: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_comparison(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [key for key in data if key != "arg"]
            if len(given) != 1 or given[0] not in COMPARISONS:
                raise ValueError(
                    f"a condition is {{'arg': <name>, <comparison>: <value>}} with exactly one "
                    f"comparison of {', '.join(COMPARISONS)}; got {sorted(given)}"
                )
            if data[given[0]] is None and given[0] not in ("eq", "ne"):
                raise ValueError(f"{given[0]}: needs a value, not null")
        return data

    @property
    def comparison(self) -> tuple[str, Any]:
        """The condition's one comparison and its operand: `("gt", 500.0)`."""
        name = next(key for key in self.model_fields_set if key != "arg")
        return ("in" if name == "in_" else name), getattr(self, name)


class When(BaseModel):
    """`{"when": [condition, ...]}`: approval when any condition holds."""

    model_config = ConfigDict(extra="forbid", strict=True)

    when: list[Condition] = Field(min_length=1, max_length=MAX_CONDITIONS)


Rule = Literal["always", "never"] | When


class Policy(BaseModel):
    """A parsed policy: tool name or pattern -> rule."""

    rules: dict[str, Rule] = Field(default_factory=dict, max_length=MAX_RULES)

    def rule_for(self, tool: str) -> tuple[str, Rule] | None:
        """The key and rule that apply to `tool`: its exact name, else the longest matching
        pattern; None when none does."""
        if tool in self.rules:
            return tool, self.rules[tool]
        matching = [key for key in self.rules if fnmatch.fnmatchcase(tool, key)]
        if not matching:
            return None
        key = max(matching, key=lambda k: (len(k), k))
        return key, self.rules[key]


@dataclass(frozen=True)
class Gate:
    """Why a call needs approval, in a reviewer's words: `by` is whose policy ("operator", "run"
    or "annotations") and `why` the rule that matched (`pay: amount 900 > 500`)."""

    by: str
    why: str

    @property
    def text(self) -> str:
        """`the operator's policy: pay: amount 900 > 500`."""
        whose = {"operator": "the operator's policy", "run": "the run's approvals"}.get(self.by)
        return f"{whose or 'the tool annotations'}: {self.why}"


def parse(value: Any, *, field: str, run: bool = False) -> Policy:
    """A policy from its JSON form (a dict, or JSON text), for `field` (named in errors).

    With `run` (a submitter's tightening), `"never"` is refused: a run may only ask for more
    approvals. Raises `InvalidInput` naming `<field>.<tool>` and what is allowed.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{field}: not JSON ({exc.msg} at {exc.pos})") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidInput(
            f"{field}: an object from tool names to rules, not {type(value).__name__}"
        )
    if len(value) > MAX_RULES:
        raise InvalidInput(f"{field}: at most {MAX_RULES} tools or patterns, not {len(value)}")
    policy = Policy(rules={str(key): _rule(rule, f"{field}.{key}") for key, rule in value.items()})
    if run:
        loosening = sorted(key for key, rule in policy.rules.items() if rule == "never")
        if loosening:
            raise InvalidInput(
                f'{field}.{loosening[0]}: a run may only require approval ("always" or a '
                '"when" rule); "never" would loosen the operator\'s policy'
            )
    return policy


def _rule(value: Any, field: str) -> Rule:
    if value in ("always", "never"):
        return value  # type: ignore[no-any-return]
    if not isinstance(value, dict):
        raise InvalidInput(f"{field}: {json.dumps(value)[:80]} is not a rule; {RULE_FORM}")
    try:
        return When.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        raise InvalidInput(f"{field}.{where}: {message}; {RULE_FORM}") from None


def required(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    operator: Policy,
    run: Policy | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> Gate | None:
    """Whether a call of `tool` with `arguments` needs approval, and why (the module docstring's
    rule): the operator's rule for the tool, else the tool's annotations; then the run's rule.
    None: it may run."""
    found = operator.rule_for(tool)
    if found is not None:
        gate = _applies(found[0], found[1], arguments, by="operator")
    elif tool.startswith(MCP_PREFIX) and (annotations or {}).get("readOnlyHint") is not True:
        gate = Gate("annotations", f"{tool} is not marked readOnlyHint: true")
    else:
        gate = None
    if gate is None and run is not None and (tightened := run.rule_for(tool)) is not None:
        gate = _applies(tightened[0], tightened[1], arguments, by="run")
    return gate


def _applies(key: str, rule: Rule, arguments: Mapping[str, Any], *, by: str) -> Gate | None:
    if rule == "never":
        return None
    if rule == "always":
        return Gate(by, f"{key}: always")
    for condition in rule.when:
        held = holds(condition, arguments)
        if held is not None:
            return Gate(by, f"{key}: {held}")
    return None


_ABSENT: Final = object()


def holds(condition: Condition, arguments: Mapping[str, Any]) -> str | None:
    """Why `condition` holds for `arguments` (`amount 900 > 500`), or None when it does not."""
    value = _argument(arguments, condition.arg)
    if value is _ABSENT:
        return None
    name, operand = condition.comparison
    shown = json.dumps(value, ensure_ascii=False)[:80]
    try:
        held = _compare(name, value, operand)
    except TypeError:
        return f"{condition.arg} {shown} cannot be compared ({name}), so it is asked"
    return f"{condition.arg} {shown} {name} {json.dumps(operand)}" if held else None


def _compare(name: str, value: Any, operand: Any) -> bool:
    numeric = name in ("gt", "gte", "lt", "lte")
    textual = name in ("startswith", "endswith", "not_endswith", "contains")
    if numeric and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise TypeError(name)
    if textual and not isinstance(value, str):
        raise TypeError(name)
    match name:
        case "gt":
            return bool(value > operand)
        case "gte":
            return bool(value >= operand)
        case "lt":
            return bool(value < operand)
        case "lte":
            return bool(value <= operand)
        case "eq":
            return bool(value == operand)
        case "ne":
            return bool(value != operand)
        case "in":
            return value in operand
        case "not_in":
            return value not in operand
        case "startswith":
            return str(value).startswith(operand)
        case "endswith":
            return str(value).endswith(operand)
        case "not_endswith":
            return not str(value).endswith(operand)
        case _:
            return operand in str(value)


def _argument(arguments: Mapping[str, Any], path: str) -> Any:
    value: Any = arguments
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value
