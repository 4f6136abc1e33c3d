"""Settings errors as a person reads them: each names the environment variable to fix, not the
pydantic field (`models.settings.read_settings` raises them as `ConfigurationError`)."""

from __future__ import annotations

import re
from typing import Final

from pydantic import ValidationError
from pydantic_settings import SettingsError


def describe_parse_error(exc: SettingsError) -> str:
    """pydantic-settings' `error parsing value for field "fact_ttl_s" ...`, naming the variable
    (`AGENTQ_FACT_TTL_S`) and saying what it must be."""
    match = re.search(r'field "(\w+)"', str(exc))
    name = f"AGENTQ_{match.group(1).upper()}" if match else "a setting"
    return f"invalid settings: {name}: must be JSON (an object or a list, as documented); {exc}"


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
