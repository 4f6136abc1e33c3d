"""`agentq runs`: list the newest runs; `agentq runs purge --before DATE`: delete the runs that
ended before DATE with their rows (retention, issue 15).

Thin adapters: the listing reads `models.front.queries.newest_runs`, the purge is
`models.front.commands.purge_runs` (the same `models.operations.retention.purge` beat runs).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from models.db import session_scope
from models.front import commands, queries
from models.states import RUN_STATUSES
from ops import views
from ops.connection import connect
from ops.json_output import JsonFlag, print_json
from ops.option_values import run_status

runs_app = typer.Typer(
    help="The newest runs (no subcommand), and the purge of ended ones.",
    invoke_without_command=True,
)
console = Console()


@runs_app.callback()
def runs(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option(
            callback=run_status, help=f"Only runs in this status: {', '.join(RUN_STATUSES)}."
        ),
    ] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's runs.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=1000, help="How many runs to show, newest first.")
    ] = 20,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """List the newest runs."""
    if ctx.invoked_subcommand is not None:
        return
    connect()
    with session_scope() as session:
        found = queries.newest_runs(session, limit=limit, status=status, user_id=user)
        if as_json:
            from api.runs import run_out  # FastAPI's models: loaded only for --json

            print_json([run_out(r) for r in found])
        else:
            console.print(views.runs_table(found))


def cutoff_time(value: str) -> datetime:
    """Typer callback: an ISO 8601 date (midnight UTC) or time (UTC unless it says otherwise)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an ISO 8601 date or time (2026-11-30, 2026-11-30T12:00:00Z)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@runs_app.command("purge")
def purge(
    before: Annotated[
        str,
        typer.Option(help="Delete the runs that ended before this date or time (UTC)."),
    ],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the ended runs that ended before DATE with their steps, attempts, events and
    turns, and print the rows deleted per table; episodes and facts stay (README, Retention)."""
    when = cutoff_time(before)
    connect()
    if not yes:
        typer.confirm(
            f"Delete the runs that ended before {when.isoformat()}? This cannot be undone",
            abort=True,
        )
    counts = commands.purge_runs(when)
    table = Table("table", "rows deleted")
    for name, rows in counts.items():
        table.add_row(name, str(rows))
    console.print(table)
