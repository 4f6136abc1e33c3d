"""The OpenAPI spec states every rule the server enforces on a request (issue 9, finding 10).

FastAPI writes the spec from the pydantic models, so it says what pydantic checks and nothing
else. A conforming client was refused for rules the spec did not state. `state_rules` adds them,
so that a request the spec allows is accepted and one it forbids is refused
(schemathesis's positive and negative data checks, `tests/api/test_schema.py`):

- **Budgets within the operator's ceilings** (`AGENTQ_MAX_*`): the settings' values, as maxima.
- **A tool-scoped procedure names an enabled tool**: the enabled tools, as an enum.
- **Nothing Postgres cannot store** (`models.storable`): no string anywhere in a request holds
  NUL. Every string without a pattern gets `NO_NUL_PATTERN`; free-form JSON (`{}`, an object's
  unlisted keys) becomes `JsonValue`, a recursive JSON value whose strings and keys hold no NUL.
  (Lone surrogates and non-finite numbers, refused too, are not JSON in the first place.)
- **A plan's steps, exactly** (`models.plans.plans.StepSpec`'s validators and the tool registry's
  argument checks): a step is a model step (an instruction that is not blank; optional `tools`,
  enabled ones, each once) or a call of one enabled tool with that tool's own arguments, where
  any argument may instead be a string holding a `${steps...}` / `${facts...}` reference; either
  may name the steps it waits for (`after`: step names, each once) and declare checks of its
  result (`expect`, `models.plans.expectations.expect_schema`); a model step may declare the typed
  fields of its answer (`output`, `models.plans.step_outputs.output_spec_schema`).

What JSON Schema cannot state is in the descriptions and refused with 400 naming the step: rules
across fields (step names unique in a plan; `after` names steps of the plan, not the step itself,
and makes no cycle; a reference names a step the referring step waits for, or a pinned fact;
`models.plans.graph`) and rules of the server's state (a tool that exists but is not enabled cannot
appear, since the enum is the enabled set; an edit's `after` may also name the run's steps that
ran or still run). One more rule across fields, an expectation's `min` at most its `max`, is
refused with 422, as the step validators' rules are.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from models.patterns import NO_NUL_PATTERN, NOT_BLANK_PATTERN, STEP_NAME_PATTERN
from models.plans.expectations import expect_schema
from models.plans.plans import (
    MAX_INSTRUCTION_CHARS,
    MAX_PLAN_STEPS,
    MAX_STEP_TOOLS,
)
from models.plans.references import REFERENCE_PATTERN
from models.plans.step_outputs import output_spec_schema
from models.storable import MAX_JSON_DEPTH

JSON_VALUE: Final = "JsonValue"
JSON_VALUE_REF: Final = {"$ref": f"#/components/schemas/{JSON_VALUE}"}
_ANNOTATIONS: Final = frozenset({"title", "description", "default", "examples"})
_STRING_CONSTRAINED: Final = frozenset({"pattern", "enum", "const", "format"})


def state_rules(
    spec: dict[str, Any],
    tools: Sequence[Mapping[str, Any]],
    ceilings: Mapping[str, float],
) -> dict[str, Any]:
    """A copy of `spec` (FastAPI's) with the rules above added. `tools` is the enabled tools'
    catalog (`models.plans.tools.catalog()`: name and `parameters` schema each); `ceilings` the most
    a run's budgets may be, by name (`AGENTQ_MAX_*`, `models.engine.runs.run_budgets`)."""
    spec = copy.deepcopy(spec)  # FastAPI shares some of its dicts between apps
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    if "StepSpec" in schemas:
        schemas["StepSpec"] = step_schema(tools, schemas)
        schemas.pop("Expectation", None)  # pydantic's, which only StepSpec used; now inlined
    _cap_budgets(schemas.get("Budgets", {}), ceilings)
    _enabled_tool(schemas.get("ToolProcedure", {}), [t["name"] for t in tools])
    submit = schemas.get("RunSubmit", {}).get("properties", {})
    if "approvals" in submit:
        submit["approvals"] = approvals_schema([t["name"] for t in tools], submit["approvals"])
    for schema in _all_schemas(spec):
        _no_nul(schema)
    schemas[JSON_VALUE] = json_value_schema()
    return spec


def _cap_budgets(budgets: dict[str, Any], ceilings: Mapping[str, float]) -> None:
    """Each budget's maximum lowered to its ceiling (the numeric branch of `int | None`)."""
    for name, most in ceilings.items():
        budget = budgets.get("properties", {}).get(name, {})
        for branch in budget.get("anyOf", [budget]):
            if branch.get("type") in ("integer", "number"):
                branch["maximum"] = min(branch.get("maximum", most), most)


def _enabled_tool(procedure: dict[str, Any], names: list[str]) -> None:
    """A tool-scoped procedure's `tool` is one of the enabled tools (as a tool step's)."""
    tool = procedure.get("properties", {}).get("tool")
    if tool is not None:
        tool["enum"] = names


def approvals_schema(names: list[str], given: Mapping[str, Any]) -> dict[str, Any]:
    """A run's tightening of the approval policy exactly (`models.approval_policy`, `run=True`;
    `models.engine.runs.check_run_approvals`): keys are enabled tools or `fnmatch` patterns (a
    key with `*`, `?` or `[`), each rule `"always"` or `{"when": [...]}` whose conditions name an
    argument and exactly one comparison."""
    operands: dict[str, Any] = {
        **{name: {"type": "number"} for name in ("gt", "gte", "lt", "lte")},
        **{name: JSON_VALUE_REF for name in ("eq", "ne")},
        **{name: {"type": "array", "items": JSON_VALUE_REF} for name in ("in", "not_in")},
        **{name: {"type": "string"} for name in ("startswith", "endswith", "not_endswith")},
        "contains": {"type": "string"},
    }
    arg = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^[A-Za-z0-9_.-]+$"}
    conditions = [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["arg", name],
            "properties": {"arg": arg, name: operand},
        }
        for name, operand in operands.items()
    ]
    when = {
        "type": "object",
        "additionalProperties": False,
        "required": ["when"],
        "properties": {
            "when": {"type": "array", "minItems": 1, "maxItems": 20, "items": {"oneOf": conditions}}
        },
    }
    return {
        "type": "object",
        "description": given.get("description", ""),
        "maxProperties": 200,
        "propertyNames": {
            "anyOf": [{"enum": names}, {"type": "string", "pattern": r"^[^\x00]*[*?\[][^\x00]*$"}]
        },
        "additionalProperties": {"oneOf": [{"const": "always"}, when]},
    }


def json_value_schema() -> dict[str, Any]:
    """Any JSON value whose strings (and object keys) hold no NUL."""
    return {
        "description": "Any JSON value; no string in it may hold NUL (Postgres cannot store "
        f"it), and arrays and objects nest at most {MAX_JSON_DEPTH} levels.",
        "anyOf": [
            {"type": "string", "pattern": NO_NUL_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": JSON_VALUE_REF},
            {
                "type": "object",
                "propertyNames": {"pattern": NO_NUL_PATTERN},
                "additionalProperties": JSON_VALUE_REF,
            },
        ],
    }


def step_schema(tools: Sequence[Mapping[str, Any]], schemas: dict[str, Any]) -> dict[str, Any]:
    """One plan step: a model step, or a call of one of `tools` with its own arguments. The
    argument schemas' own definitions are added to `schemas` (`ToolArgs_<name>`)."""
    names = sorted(str(entry["name"]) for entry in tools)
    variants = [_model_step(names)]
    variants += [_tool_step(entry, schemas) for entry in sorted(tools, key=lambda e: e["name"])]
    return {
        "description": "One step of a plan: a model step, or a call of one enabled tool. Step "
        f"names are unique within a plan (at most {MAX_PLAN_STEPS} steps). `after` names steps "
        "of the plan (in a reviewer's edit, also the run's steps that ran or still run), never "
        "the step itself, and the steps' `after` make no cycle; a `${steps.NAME.KEY}` reference "
        "names a step the referring step waits for (directly or through other steps), a "
        "`${facts.KEY}` reference a pinned fact. Otherwise 400, naming the step. An "
        "expectation's `min` is at most its `max` (otherwise 422).",
        "oneOf": variants,
    }


def _model_step(tool_names: list[str]) -> dict[str, Any]:
    return {
        "title": "ModelStep",
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "kind", "instruction"],
        "properties": {
            "name": _name(),
            "kind": {"const": "model"},
            "instruction": {
                "type": "string",
                "maxLength": MAX_INSTRUCTION_CHARS,
                "pattern": NOT_BLANK_PATTERN,
            },
            "tools": {
                "type": "array",
                "items": {"enum": tool_names},
                "uniqueItems": True,
                "maxItems": MAX_STEP_TOOLS,
                "description": "Enabled tools the model may call itself, each named once.",
            },
            "tool": {"type": "null"},
            "args": {"type": "object", "maxProperties": 0},
            "after": _after(),
            "expect": expect_schema(),
            "output": {"anyOf": [output_spec_schema(), {"type": "null"}]},
        },
    }


def _tool_step(entry: Mapping[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    name = str(entry["name"])
    takes_arguments = bool(entry["parameters"].get("required"))
    return {
        "title": f"ToolStep_{name}",
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "kind", "tool", *(["args"] if takes_arguments else [])],
        "properties": {
            "name": _name(),
            "kind": {"const": "tool"},
            "tool": {"const": name},
            "instruction": {"type": "string", "maxLength": MAX_INSTRUCTION_CHARS},
            "args": _arguments(name, entry["parameters"], schemas),
            "tools": {"type": "array", "maxItems": 0},
            "after": _after(),
            "expect": expect_schema(),
            "output": {"type": "null"},
        },
    }


def _name() -> dict[str, Any]:
    return {"type": "string", "pattern": STEP_NAME_PATTERN, "description": "Result name."}


def _after() -> dict[str, Any]:
    names = {
        "type": "array",
        "items": {"type": "string", "pattern": STEP_NAME_PATTERN},
        "uniqueItems": True,
        "maxItems": MAX_PLAN_STEPS,
    }
    return {
        "description": "The names of the steps this one waits for: it starts once they all "
        "succeeded, together with the other steps ready then. [] starts at once; left out (or "
        "null), the step before it in the list; for the first step, at once (in a reviewer's "
        "edit: what the failed step it replaces waited for).",
        "anyOf": [names, {"type": "null"}],
    }


def _arguments(tool: str, parameters: Mapping[str, Any], schemas: dict[str, Any]) -> Any:
    """The tool's argument schema, each argument also allowed to be a reference string; its
    `$defs` moved to `schemas` as `ToolArgs_<tool>_<name>`."""
    args = copy.deepcopy(dict(parameters))
    defs = args.pop("$defs", {})
    prefix = f"ToolArgs_{tool}_"
    for def_name, definition in defs.items():
        schemas[prefix + def_name] = definition
    _rewrite_refs(args, defs, prefix)
    for def_name in defs:
        _rewrite_refs(schemas[prefix + def_name], defs, prefix)
    reference = {"type": "string", "pattern": REFERENCE_PATTERN}
    properties = args.get("properties", {})
    for key, prop in properties.items():
        properties[key] = {"anyOf": [prop, reference]}
    args.pop("title", None)
    return args


def _rewrite_refs(node: Any, defs: Mapping[str, Any], prefix: str) -> None:
    for item in walk(node):
        ref = item.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            item["$ref"] = "#/components/schemas/" + prefix + ref.removeprefix("#/$defs/")


def _all_schemas(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every schema of `spec`: the components' and the operations' parameters and bodies."""
    yield from spec["components"]["schemas"].values()
    for operations in spec.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                yield parameter.setdefault("schema", {})
            for media in operation.get("requestBody", {}).get("content", {}).values():
                yield media.setdefault("schema", {})


def _no_nul(schema: dict[str, Any]) -> None:
    """Throughout `schema`: `NO_NUL_PATTERN` on every string schema without a pattern, and
    `JsonValue` wherever any value is allowed."""
    for node in walk(schema):
        _close_open_values(node)
        if node.get("type") == "string" and not (_STRING_CONSTRAINED & node.keys()):
            node["pattern"] = NO_NUL_PATTERN


def _close_open_values(node: dict[str, Any]) -> None:
    """`JsonValue` where `node` allows any value: its items, its unlisted keys' values, a
    property with no schema; an object's unlisted keys hold no NUL either. Pydantic writes a
    dict whose keys must match a pattern as `patternProperties`: other keys are refused."""
    for key in ("items", "additionalProperties"):
        if node.get(key) is True or (isinstance(node.get(key), dict) and _is_any(node[key])):
            node[key] = dict(JSON_VALUE_REF)
    if node.get("type") == "array" and "items" not in node and "prefixItems" not in node:
        node["items"] = dict(JSON_VALUE_REF)
    if node.get("type") == "object" and "additionalProperties" not in node:
        if "patternProperties" in node:
            node["additionalProperties"] = False
        elif "properties" not in node:
            node["additionalProperties"] = dict(JSON_VALUE_REF)
    if node.get("type") == "object" and node.get("additionalProperties", False) is not False:
        node.setdefault("propertyNames", {"pattern": NO_NUL_PATTERN})
    for prop, sub in list(node.get("properties", {}).items()):
        if _is_any(sub):
            node["properties"][prop] = {**sub, **JSON_VALUE_REF}


def _is_any(schema: Mapping[str, Any]) -> bool:
    """Whether `schema` allows any value (only annotations, no constraint)."""
    return isinstance(schema, Mapping) and not (set(schema) - _ANNOTATIONS)


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict inside `node` (itself included), depth first."""
    if isinstance(node, dict):
        yield node
        for value in list(node.values()):
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)
