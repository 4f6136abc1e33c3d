"""`agentq schedule ...`: put a goal on a schedule, list, show, pause, resume and remove
schedules (issue 32, item 2). The commands are `models.front.schedules`'; a schedule's runs are
submitted by the scheduler's beat (`agentq.fire_schedules`), once per due time."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from models.bounds import PG_INT_MAX
from models.formats import utc
from ops.json_output import JsonFlag
from ops.option_values import not_blank
from ops.submit_command import (
    DEFAULT_USER,
    Approvals,
    Criteria,
    Facts,
    PinFromGoal,
    PlanFile,
    ReplanCheck,
    Replans,
    Tokens,
    WallTime,
    run_request,
)
from ops.views import cell

schedule_app = typer.Typer(
    help="Goals on a schedule: a cron expression in a time zone, or an interval.",
    no_args_is_help=True,
)
console = Console()
ScheduleId = Annotated[
    int, typer.Argument(min=1, max=PG_INT_MAX, help="Schedule id (see schedule list).")
]
CRON_HELP = (
    "Five fields (minute hour day-of-month month day-of-week), such as '0 9 * * 1-5', or "
    "@hourly, @daily, @weekly, @monthly, @yearly."
)
CATCH_UP_HELP = (
    "Of the due times missed while no scheduler ran, how many fire (the latest); the rest are "
    "recorded as missed (default AGENTQ_SCHEDULE_CATCH_UP, 1)."
)


@schedule_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Its name, unique among the user's schedules.")],
    goal: Annotated[str, typer.Argument(callback=not_blank, help="The goal of each run.")],
    cron: Annotated[str | None, typer.Option(help=CRON_HELP)] = None,
    timezone: Annotated[
        str | None,
        typer.Option(help="The IANA time zone --cron is read in, such as Europe/Berlin (UTC)."),
    ] = None,
    every: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=PG_INT_MAX,
            help="Or an interval, s, from now (at least AGENTQ_SCHEDULE_MIN_INTERVAL_S, 60).",
        ),
    ] = None,
    user: Annotated[
        str, typer.Option(callback=not_blank, help="Whose runs they are.")
    ] = DEFAULT_USER,
    overlap: Annotated[
        str, typer.Option(help="skip: no run while its last run is active; or allow.")
    ] = "skip",
    catch_up: Annotated[int | None, typer.Option(min=1, max=100, help=CATCH_UP_HELP)] = None,
    fact: Facts = [],  # noqa: B006
    pin_from_goal: PinFromGoal = False,
    plan: PlanFile = None,
    criterion: Criteria = [],  # noqa: B006
    replan_check: ReplanCheck = None,
    replans: Replans = None,
    tokens: Tokens = None,
    wall_time: WallTime = None,
    approvals: Approvals = None,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """Put a goal on a schedule: a run is submitted as the user at each due time of --cron (in
    --timezone) or every --every seconds, once per due time, under the user's quotas."""
    from models.front import schedules
    from ops.connection import connect

    connect()
    request = run_request(
        user=user,
        goal=goal,
        fact=fact,
        plan=plan,
        criterion=criterion,
        replan_check=replan_check,
        pin_from_goal=pin_from_goal,
        approvals=approvals,
        budgets=(replans, tokens, wall_time),
    )
    shown = schedules.create(
        request,
        name=name,
        cron=cron,
        timezone=timezone,
        every_s=every,
        overlap=overlap,
        catch_up=catch_up,
    )
    if as_json:
        _print_json(shown)
        return
    row = shown.schedule
    console.print(Text(f"schedule {row.id} ({row.name}) added; next due {utc(row.next_due_at)}"))


@schedule_app.command("list")
def list_(
    user: Annotated[str | None, typer.Option(help="Only this user's schedules.")] = None,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """Every schedule: its timing, overlap, next due time, and what became of its last due
    times (each run and its status now, or why none)."""
    from models.front import schedules
    from models.schedules.listing import fire_text, timing_text
    from ops.connection import connect

    connect()
    found = schedules.listed(user_id=user)
    if as_json:
        _print_json(found)
        return
    if not found:
        whose = f" of user {user!r}" if user else ""
        console.print(
            f'no schedules{whose}; add one with agentq schedule add NAME "GOAL" --cron ...'
        )
        return
    table = Table("id", "user", "name", "when", "overlap", "next due", "last runs")
    for shown in found:
        row = shown.schedule
        due = utc(shown.next_due_at) if shown.next_due_at else "paused"
        last = "; ".join(fire_text(f) for f in shown.fires[:3]) or "-"
        table.add_row(
            str(row.id),
            cell(row.user_id, 30),
            cell(row.name, 30),
            cell(timing_text(row), 40),
            row.overlap,
            due,
            cell(last, 80),
        )
    console.print(table)


@schedule_app.command("show")
def show(schedule_id: ScheduleId, as_json: Annotated[bool, JsonFlag] = False) -> None:
    """One schedule: its goal, timing, catch-up bound, next due time, and its last 20 due
    times with what became of each."""
    from models.front import schedules
    from models.schedules.listing import fire_text, timing_text
    from ops.connection import connect

    connect()
    shown = schedules.show(schedule_id)
    if as_json:
        _print_json(shown)
        return
    row = shown.schedule
    due = utc(shown.next_due_at) if shown.next_due_at else "paused"
    console.print(Text(f"schedule {row.id} ({row.name}) of {row.user_id}: {row.goal}"))
    console.print(Text(f"when: {timing_text(row)}; overlap {row.overlap}; catch-up {row.catch_up}"))
    console.print(Text(f"next due: {due}"))
    table = Table("due", "outcome", "run", "detail")
    for fire in shown.fires:
        run = str(fire.run_id) if fire.run_id else "-"
        table.add_row(utc(fire.due_at), fire.outcome, run, cell(fire_text(fire), 90))
    console.print(table)


@schedule_app.command("pause")
def pause(schedule_id: ScheduleId) -> None:
    """Pause a schedule: no due time fires until it is resumed."""
    from models.front import schedules
    from ops.connection import connect

    connect()
    row = schedules.pause(schedule_id).schedule
    console.print(Text(f"schedule {row.id} ({row.name}) paused"))


@schedule_app.command("resume")
def resume(schedule_id: ScheduleId) -> None:
    """Resume a paused schedule from its next due time after now (the due times it was paused
    for do not fire)."""
    from models.front import schedules
    from ops.connection import connect

    connect()
    row = schedules.resume(schedule_id).schedule
    console.print(Text(f"schedule {row.id} ({row.name}) resumed; next due {utc(row.next_due_at)}"))


@schedule_app.command("remove")
def remove(schedule_id: ScheduleId) -> None:
    """Remove a schedule and the record of its due times; the runs it submitted stay."""
    from models.front import schedules
    from ops.connection import connect

    connect()
    row = schedules.remove(schedule_id).schedule
    console.print(Text(f"schedule {row.id} ({row.name}) removed"))


def _print_json(found: object) -> None:
    """`found` (one `ScheduleShown` or a list) as the API answers it (`api.schedule_responses`)."""
    from api.schedule_responses import schedule_out
    from ops.json_output import print_json

    if isinstance(found, list):
        print_json([schedule_out(s) for s in found])
    else:
        print_json(schedule_out(found))  # type: ignore[arg-type]
