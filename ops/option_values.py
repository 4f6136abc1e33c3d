"""Typer callbacks that check one option's value, importable without the database layer (the
`agentq` command tree, and so `agentq --help`, is built from them: issue 15, part 10)."""

from __future__ import annotations

import typer

from models.bounds import REPLAN_CHECKS
from models.states import RUN_STATUSES


def not_blank(value: str | None) -> str | None:
    """Typer callback: refuse an empty or all-blank value (None, not given, passes)."""
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def run_status(value: str | None) -> str | None:
    """Typer callback: refuse anything but a run status, naming the allowed ones."""
    if value is not None and value not in RUN_STATUSES:
        raise typer.BadParameter(
            f"{value!r} is not a run status; use one of {', '.join(RUN_STATUSES)}"
        )
    return value


def replan_check_value(value: str | None) -> str | None:
    """Typer callback: refuse anything but a `replan_check` (`models.plans.plan_checks`)."""
    if value is not None and value not in REPLAN_CHECKS:
        raise typer.BadParameter(f"{value!r}: use one of {', '.join(REPLAN_CHECKS)}")
    return value
