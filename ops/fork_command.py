"""`agentq run fork N --from STEP`: a new run of run N's user whose steps before STEP keep run N's
results and whose STEP and every step waiting for it run anew (`models.front.forks.fork`, the
command behind the API's `POST /api/v1/runs/{id}/fork` and the console's "Fork from here").
Heavy modules are imported when it runs, not when `agentq --help` builds the command tree."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from models.bounds import PG_INT_MAX
from models.errors import InvalidInput

FORK_JSON_HELP = (
    "Print one JSON document, as POST /api/v1/runs/{id}/fork answers: the new run, `notified`."
)
console = Console()


def fork(
    run_id: Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="The run to fork.")],
    from_step: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="STEP",
            help="The step (by name) that runs anew, with every step waiting for it; the steps "
            "before it keep their results.",
        ),
    ],
    plan: Annotated[
        Path | None,
        typer.Option(
            help='JSON file {"steps": [...]} that replaces STEP and what waits for it; its steps '
            "may wait for the kept steps by name. - reads it from stdin.",
        ),
    ] = None,
    fact: Annotated[
        list[str], typer.Option(help="Pinned fact KEY=VALUE over the run's own; repeatable.")
    ] = [],  # noqa: B006
    watch_run: Annotated[bool, typer.Option("--watch", help="Watch until it ends.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=FORK_JSON_HELP)] = False,
) -> None:
    """Fork a run from a step; prints the new run's id and what it copied."""
    from models.engine import lineage
    from models.engine.forks import ForkRequest
    from models.front.forks import fork as fork_run
    from ops import views
    from ops.connection import connect
    from ops.inputs import parse_facts, read_plan_text
    from ops.submit_command import print_submitted
    from ops.watch import run_goes_on, watch_until_settled

    if as_json and watch_run:
        raise InvalidInput("--json and --watch cannot be used together; choose one")
    connect()
    text = read_plan_text(plan) if plan is not None else None
    request = ForkRequest(run_id, from_step, text, parse_facts(fact))
    if as_json:
        print_submitted(fork_run(request))
        return
    forked = fork_run(request, describe=lambda s, run: lineage.read(s, run.id or 0).copied_steps())
    copied = len(forked.seen)
    said = f"run {forked.run_id} forked from run {run_id} at step {from_step!r} ({copied} copied)"
    with run_goes_on(console, forked.run_id) if watch_run else nullcontext():
        console.print(views.said(forked.notified, said))
        if watch_run:
            raise typer.Exit(watch_until_settled(console, forked.run_id))
