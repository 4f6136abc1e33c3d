"""Settings errors as a person reads them: each names the environment variable to fix, not the
pydantic field (`models.settings.read_settings` raises them as `ConfigurationError`)."""

from __future__ import annotations

import re

from pydantic import ValidationError
from pydantic_settings import SettingsError


def describe_parse_error(exc: SettingsError) -> str:
    """pydantic-settings' `error parsing value for field "fact_ttl_s" ...`, naming the variable
    (`AGENTQ_FACT_TTL_S`) and saying what it must be."""
    match = re.search(r'field "(\w+)"', str(exc))
    name = f"AGENTQ_{match.group(1).upper()}" if match else "a setting"
    return f"invalid settings: {name}: must be JSON (an object or a list, as documented); {exc}"


def describe_settings_error(exc: ValidationError) -> str:
    """Pydantic's errors, each naming the environment variable rather than the field."""
    aliases = {
        "database_url": "DATABASE_URL",
        "broker_url": "BROKER_URL",
        "openai_api_key": "OPENAI_API_KEY",
    }
    parts = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        name = aliases.get(field, f"AGENTQ_{field.upper()}") if field else "settings"
        parts.append(f"{name}: {error['msg']}")
    return "invalid settings: " + "; ".join(parts)
