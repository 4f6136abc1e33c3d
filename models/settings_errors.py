"""Settings errors as a person reads them: each names the environment variable to fix, not the
pydantic field (`models.settings.read_settings` raises them as `ConfigurationError`)."""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Mapping
from typing import Final

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python
from pydantic_settings import SettingsError


def describe_parse_error(exc: SettingsError, fields: Mapping[str, FieldInfo]) -> str:
    """pydantic-settings' `error parsing value for field "tool_modules" from source
    "EnvSettingsSource"` as one line naming the variable (`AGENTQ_TOOL_MODULES`) and the JSON it
    must hold, with the field's default as the example (`fields`: the settings' fields) unless
    the field may hold a credential (`UNSHOWN`) or the default is empty or long."""
    match = re.search(r'field "(\w+)"', str(exc))
    field = match.group(1) if match else ""
    name = f"AGENTQ_{field.upper()}" if field else "a setting"
    return f"invalid settings: {name}: must be {json_shape(field, fields.get(field))}"


JSON_SHAPES: Final[dict[object, str]] = {list: "a JSON list", dict: "a JSON object"}


def json_shape(field: str, info: FieldInfo | None) -> str:
    """`a JSON list, such as ["worker.tools.builtin"]`: what a setting of `info` holds."""
    origin = typing.get_origin(info.annotation) if info else None
    shape = JSON_SHAPES.get(origin, "JSON")
    default = info.get_default(call_default_factory=True) if info else None
    example = json.dumps(to_jsonable_python(default)) if default else ""
    if example and len(example) <= SHOWN_MAX_CHARS and UNSHOWN.isdisjoint(field.split("_")):
        return f"{shape}, such as {example}"
    return f"{shape}, as the settings reference shows"


# Words of a setting's name that say its value may hold a credential (a URL's or an endpoint's
# password, a key, a secret): such a bad value is never echoed in an error, which reaches logs and
# terminals. Whole words: `context_window_tokens` is a count.
UNSHOWN: Final = frozenset({"url", "endpoint", "key", "secret", "secrets", "token", "password"})
SHOWN_MAX_CHARS: Final = 60


def describe_settings_error(exc: ValidationError) -> str:
    """Pydantic's errors, each naming the environment variable rather than the field, and the
    value given (`got '-1'`) unless it may hold a credential (`UNSHOWN`) or is long."""
    aliases = {  # either name sets the field (`AliasChoices`): the error cannot tell which did
        "database_url": "AGENTQ_DATABASE_URL or DATABASE_URL",
        "broker_url": "AGENTQ_BROKER_URL or BROKER_URL",
        "openai_api_key": "AGENTQ_OPENAI_API_KEY or OPENAI_API_KEY",
    }
    parts = []
    for error in exc.errors():
        # A value read by an alias is located by it (`DATABASE_URL`, `AGENTQ_BROKER_URL`).
        field = str(error["loc"][0]).lower().removeprefix("agentq_") if error["loc"] else ""
        name = aliases.get(field, f"AGENTQ_{field.upper()}") if field else "settings"
        given = error.get("input")
        shown = (
            isinstance(given, str | int | float)
            and len(repr(given)) <= SHOWN_MAX_CHARS
            and UNSHOWN.isdisjoint(field.split("_"))
        )
        parts.append(f"{name}: {error['msg']}" + (f" (got {given!r})" if shown else ""))
    return "invalid settings: " + "; ".join(parts)
