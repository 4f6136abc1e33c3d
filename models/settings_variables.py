"""The environment variables the settings are read from, and the `AGENTQ_` ones that name none.

pydantic-settings ignores a variable that names no field (`extra="ignore"`), so a misspelling
(`AGENTQ_LEASE=20` for `AGENTQ_LEASE_S`) used to change nothing, silently. `warn_unknown` says so
on stderr, once per variable and process, with the closest setting's name (difflib), for every
`AGENTQ_` variable of the environment or `.env` that is no setting and not one of
`NOT_SETTINGS`: the names agentq's tests and docs use for something else.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, TextIO

from dotenv import dotenv_values
from pydantic import AliasChoices
from pydantic.fields import FieldInfo

PREFIX: Final = "AGENTQ_"
# Variables named like settings that are something else, each with what reads it. The test
# suite's services (`tests/support/brokers.py`) and the API token variables that earlier docs
# had people export for their own scripts (`export AGENTQ_TOKEN=aq_...`).
NOT_SETTINGS: Final = {
    "AGENTQ_TOKEN": "a shell variable of the HTTP API examples (curl, the Python client)",
    "AGENTQ_REVIEWER_TOKEN": "the Python client example's reviewer token variable",
}
NOT_SETTINGS_PREFIX: Final = "AGENTQ_TEST_"  # the test suite's own: AGENTQ_TEST_AMQP_URL, ...
CLOSE_ENOUGH: Final = 0.7  # difflib's ratio for a suggestion: LEASE -> LEASE_S is 0.83

_warned: set[str] = set()  # the variables this process has warned of


def field_variables(name: str, field: FieldInfo) -> list[str]:
    """The environment variables that set field `name`: `AGENTQ_<NAME>`, or its aliases
    (`AGENTQ_DATABASE_URL`, `DATABASE_URL`)."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [f"{PREFIX}{name.upper()}"]


def unknown_variables(
    names: Iterable[str], fields: Mapping[str, FieldInfo]
) -> list[tuple[str, str | None]]:
    """`(variable, closest setting or None)` of each of `names` that starts with `AGENTQ_`
    (in any case, as pydantic-settings reads them) and names no field of `fields`, sorted."""
    known = sorted(v for name, info in fields.items() for v in field_variables(name, info))
    ours = [v.removeprefix(PREFIX) for v in known if v.startswith(PREFIX)]
    unknown = []
    for variable in sorted(set(names)):
        upper = variable.upper()
        if not upper.startswith(PREFIX) or upper in known or _not_a_setting(upper):
            continue
        # Compared without the prefix they all share, which would make any two look alike.
        close = difflib.get_close_matches(upper.removeprefix(PREFIX), ours, 1, CLOSE_ENOUGH)
        unknown.append((variable, PREFIX + close[0] if close else None))
    return unknown


def _not_a_setting(variable: str) -> bool:
    return variable in NOT_SETTINGS or variable.startswith(NOT_SETTINGS_PREFIX)


def given_names(env_file: object) -> list[str]:
    """The variables of this process's environment and of `env_file` (the settings' `.env`, if
    it is a file): the names a `Settings` read now may find."""
    found = list(os.environ)
    if isinstance(env_file, str | Path) and Path(env_file).is_file():
        found += [name for name in dotenv_values(env_file) if name]
    return found


def warn_unknown(
    names: Iterable[str], fields: Mapping[str, FieldInfo], stream: TextIO | None = None
) -> None:
    """One line on `stream` (stderr) for each variable of `unknown_variables` not warned of
    before in this process: `warning: AGENTQ_LEASE is no agentq setting, so it is ignored; did
    you mean AGENTQ_LEASE_S?`. Never the value."""
    for variable, close in unknown_variables(names, fields):
        if variable in _warned:
            continue
        _warned.add(variable)
        hint = f"; did you mean {close}?" if close else " (see the settings reference)"
        line = f"warning: {variable} is no agentq setting, so it is ignored{hint}"
        print(line, file=stream or sys.stderr, flush=True)
