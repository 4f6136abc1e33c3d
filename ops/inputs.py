"""What a user names on the command line: pinned facts (`--fact KEY=VALUE`), plan files
(`--plan`, `agentq review edit --plan`) and who reviews (`$AGENTQ_REVIEWER`), read and checked
before anything is written. Single option values are checked by `ops.option_values`."""

from __future__ import annotations

import getpass
import re
import sys
from pathlib import Path

from models.errors import ConfigurationError
from models.front import commands
from models.patterns import FACT_KEY_PATTERN, WORDS
from models.plans.plans import PlanSpec
from models.review import escalations
from models.settings import get_settings


def parse_facts(pairs: list[str]) -> dict[str, str]:
    """`["currency=EUR", ...]` as a dict; raises `ConfigurationError` naming the bad entry."""
    facts: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.match(FACT_KEY_PATTERN, key):
            raise ConfigurationError(
                f"--fact {pair!r}: expected KEY=VALUE, where KEY {WORDS[FACT_KEY_PATTERN]}"
            )
        if not value:
            raise ConfigurationError(f"--fact {pair!r}: the value is empty")
        if key in facts and facts[key] != value:
            raise ConfigurationError(
                f"--fact {key}: given twice ({facts[key]!r} and {value!r}); pin one value"
            )
        facts[key] = value
    return facts


STDIN_PATH = Path("-")  # `--plan -`: the plan is read from stdin, as `cat`, `jq` and pip take `-`


def read_plan_text(path: Path) -> str:
    """The text of a plan file, or of stdin when `path` is `-` (`STDIN_PATH`); raises
    `ConfigurationError` naming the file if it cannot be read or is not UTF-8."""
    try:
        if path == STDIN_PATH:
            return sys.stdin.buffer.read().decode("utf-8")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--plan {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"--plan {path}: not UTF-8 text (byte {exc.start}); save the plan as UTF-8 JSON"
        ) from exc


def read_plan(path: Path, facts: dict[str, str]) -> PlanSpec:
    """A plan from a JSON file (`{"steps": [...]}`), validated against the registered tools,
    their arguments and the pinned `facts`; raises `ConfigurationError` or `InvalidPlan`."""
    return commands.checked_plan(read_plan_text(path), facts=facts)


def reviewer_name() -> str:
    """Who is reviewing: `$AGENTQ_REVIEWER` (`Settings.reviewer`), else the login name; raises
    `InvalidInput` for a name that breaks `models.review.escalations.REVIEWER_NAME_PATTERN` or is
    reserved."""
    name = get_settings().reviewer or getpass.getuser()
    escalations.check_reviewer_name(name, field="AGENTQ_REVIEWER")
    return name
