"""`agentq run ...`: every command about runs, as one noun and its verbs (as `review`, `memory`,
`procedure`, `token` and `webhook` are): `submit`, `list`, `show`, `watch`, `cancel`, `purge`.

The names before (issue 28, item 3) still work, hidden from `agentq --help` and printing nothing
more: `agentq submit` (run submit), `runs` (run list), `runs purge` (run purge), `status`
(run show), `watch` (run watch), `cancel` (run cancel); `ops.cli` registers them (`ALIASES`).

Thin adapters over `models.front` (the listing is `queries.newest_runs`, the purge
`commands.purge_runs`, the same `models.operations.retention.purge` beat runs). Heavy modules are
imported when a command runs: `ops.cli` imports this module to build `agentq --help`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Final

import typer
from rich.console import Console

from models.bounds import PG_INT_MAX
from models.states import RUN_STATUSES
from ops.fork_command import fork
from ops.json_output import JsonFlag
from ops.option_values import run_status
from ops.submit_command import submit

RUN_HELP: Final = "Runs: submit a goal, list, show, watch, fork, cancel, purge the ended ones."
run_app = typer.Typer(help=RUN_HELP, no_args_is_help=True)
console = Console()
RunId = Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Run id.")]
Status = Annotated[
    str | None,
    typer.Option(callback=run_status, help=f"Only runs in this status: {', '.join(RUN_STATUSES)}."),
]
UserFilter = Annotated[str | None, typer.Option(help="Only this user's runs.")]
Limit = Annotated[int, typer.Option(min=1, max=1000, help="How many runs to show, newest first.")]
Before = Annotated[
    str, typer.Option(help="Delete the runs that ended before this date or time (UTC).")
]
Yes = Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")]

run_app.command("submit")(submit)


@run_app.command("list")
def list_runs(
    status: Status = None,
    user: UserFilter = None,
    limit: Limit = 20,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """List the newest runs."""
    from models.db import session_scope
    from models.front import queries
    from ops import views
    from ops.connection import connect
    from ops.json_output import print_json

    connect()
    with session_scope() as session:
        found = queries.newest_runs(session, limit=limit, status=status, user_id=user)
        if as_json:
            from api.run_views import run_out  # FastAPI's models: loaded only for --json

            print_json([run_out(r) for r in found])
        else:
            console.print(views.runs_table(found))


@run_app.command("show")
def show(run_id: RunId, as_json: Annotated[bool, JsonFlag] = False) -> None:
    """Show one run: budgets and deadline, pinned facts, plan and steps, escalation, answer."""
    from models.db import session_scope
    from models.engine.runs import get_run
    from ops import views
    from ops.connection import connect
    from ops.json_output import print_json

    connect()
    with session_scope() as session:
        run = get_run(session, run_id)
        if as_json:
            from api.run_views import run_detail  # FastAPI's models: loaded only for --json

            print_json(run_detail(session, run))
        else:
            console.print(views.run_panel(session, run))


@run_app.command("watch")
def watch(run_id: RunId) -> None:
    """A live table of the run's steps until it ends or waits for review."""
    from ops.connection import connect
    from ops.watch import run_goes_on, watch_until_settled

    connect()
    with run_goes_on(console, run_id):
        raise typer.Exit(watch_until_settled(console, run_id))


run_app.command("fork")(fork)


@run_app.command("cancel")
def cancel(run_id: RunId) -> None:
    """Cancel an active run: steps not yet running are cancelled, a running step finishes and
    nothing follows it, and an escalation waiting for review is withdrawn."""
    from models.front import commands
    from ops.connection import connect

    connect()
    commands.cancel(run_id)  # its follow-up writes the cancelled run's episode
    console.print(f"run {run_id} cancelled")


def cutoff_time(value: str) -> datetime:
    """Typer callback: an ISO 8601 date (midnight UTC) or time (UTC unless it says otherwise)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an ISO 8601 date or time (2026-11-30, 2026-11-30T12:00:00Z)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@run_app.command("purge")
def purge(before: Before, yes: Yes = False) -> None:
    """Delete the ended runs that ended before DATE with their steps, attempts, events and
    turns, and print the rows deleted per table; episodes and facts stay (README, Retention)."""
    from rich.table import Table

    from models.front import commands
    from ops.connection import connect

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


# `agentq runs [purge]`, the old name of `run list` and `run purge` (hidden; `ops.cli`).
runs_app = typer.Typer(help="Same as `agentq run list` (and `run purge`).")
runs_app.command("purge")(purge)


@runs_app.callback(invoke_without_command=True)
def runs(
    ctx: typer.Context,
    status: Status = None,
    user: UserFilter = None,
    limit: Limit = 20,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """Same as `agentq run list` (and `agentq run purge`)."""
    if ctx.invoked_subcommand is None:
        list_runs(status=status, user=user, limit=limit, as_json=as_json)


# The old top-level names -> the `run` command each is (hidden in `agentq --help`).
ALIASES: Final[dict[str, Callable[..., None]]] = {
    "submit": submit,
    "status": show,
    "watch": watch,
    "cancel": cancel,
}
