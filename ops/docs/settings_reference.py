"""The settings reference page (`docs/reference/settings.md`): every field of
`models.settings.Settings`, with its environment variable, type, default, allowed values (the
field's constraints and `Literal` choices) and description, grouped by the class that declares
it (`Settings` and the classes it inherits from, one a module: `models.settings_connections`,
`models.settings_operations`, `models.settings_storage`, ...)."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from models.settings import Settings
from models.settings_variables import field_variables as variables
from ops.docs.markdown import cell, code, prose, table

BOUNDS = {
    annotated_types.Ge: ("ge", "≥"),
    annotated_types.Gt: ("gt", ">"),
    annotated_types.Le: ("le", "≤"),
    annotated_types.Lt: ("lt", "<"),
}


TITLES = {"mcp": "MCP servers"}  # a section's title where capitalising its module's is wrong


def type_name(annotation: Any) -> str:
    """`int`, `float | None`, `list[str]`: the annotation without module prefixes."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    if typing.get_origin(annotation) is typing.Literal:
        return "str"
    return re.sub(r"\b(?:[a-z_]+\.)+([A-Za-z_]\w*)", r"\1", str(annotation))


def _choices(annotation: Any) -> list[str]:
    """The values of the `Literal` in `annotation` (at any depth: `list[Literal[...]]`)."""
    if typing.get_origin(annotation) is typing.Literal:
        return [str(v) for v in typing.get_args(annotation)]
    return [c for arg in typing.get_args(annotation) for c in _choices(arg)]


def allowed(field: FieldInfo) -> str:
    """The values the field accepts beyond its type, as Markdown: bounds, pattern, choices."""
    found = [", ".join(code(c) for c in _choices(field.annotation))]
    for rule in field.metadata:
        if type(rule) in BOUNDS:
            attribute, sign = BOUNDS[type(rule)]
            found.append(f"{sign} {_number(getattr(rule, attribute))}")
        elif getattr(rule, "pattern", None):
            found.append(f"matches {code(rule.pattern)}")
    return cell(", ".join(f for f in found if f)) or "any"


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) and value.is_integer() else str(value)


def default(field: FieldInfo) -> str:
    """The default as it would be written in the environment, Markdown; `unset` for None."""
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, Path):
        text = str(value).replace(str(Path.home()), "~", 1)
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, dict | list):
        text = json.dumps(_plain(value), separators=(",", ":"))
    else:
        text = _number(value) if isinstance(value, float) else str(value)
    return code(text)


def _plain(value: Any) -> Any:
    """`value` with models dumped and secrets hidden, for JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, SecretStr):
        return "**********"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, list) else value


def declared_by() -> list[tuple[type[Settings], list[str]]]:
    """Each settings class (`Settings` first, then its bases) with the fields it declares, in
    source order."""
    classes = [c for c in Settings.__mro__ if hasattr(c, "model_fields") and c.__annotations__]
    groups = [(c, [n for n in c.__annotations__ if n in Settings.model_fields]) for c in classes]
    return [(c, names) for c, names in groups if names]


def _row(name: str, field: FieldInfo) -> list[str]:
    names = " / ".join(code(v) for v in variables(name, field))
    description = cell(field.description or "")
    return [names, code(type_name(field.annotation)), default(field), allowed(field), description]


def render() -> str:
    """The whole page, Markdown."""
    fields = Settings.model_fields
    parts = [
        "# Settings reference\n",
        "Generated from `models.settings.Settings` by `python -m ops.docs.pages` "
        "(`ops/docs/settings_reference.py`). Every setting is an environment variable (or a line "
        "in `.env` in the current directory); nothing needs setting for the embedded stack. "
        "Lists and mappings are JSON. A value outside its allowed range is refused at start-up "
        "with a message naming the variable. An `AGENTQ_` variable that names no setting is "
        "ignored, with a warning on stderr naming the closest setting "
        f"(`models.settings_variables`). {len(fields)} settings.\n",
    ]
    for cls, names in declared_by():
        title = cls.__module__.partition("settings_")[2].replace("_", " ") or "general"
        parts.append(f"## {TITLES.get(title, title.capitalize())}\n")
        doc = prose(cls.__doc__ or "")
        parts.append(f"{doc} Declared in `{cls.__module__}.{cls.__name__}`.\n")
        rows = [_row(n, fields[n]) for n in names]
        parts.append(table(["variable", "type", "default", "allowed", "meaning"], rows))
    return "\n".join(parts)
