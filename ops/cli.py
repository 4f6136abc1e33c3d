"""The `agentq` command line: up, submit, runs, status, watch, review, webhook, demo, migrate.

It talks to Postgres and the broker directly: the URLs come from `DATABASE_URL`/`BROKER_URL`, or
from the `agentq up` running on the data directory (`AGENTQ_HOME`, default `~/.agentq`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from kombu.utils.url import maybe_sanitize_url
from rich.console import Console
from rich.table import Table
from rich.text import Text

from models import commands
from models.db import session_scope
from models.errors import AgentqError
from models.formats import provider_label
from models.migrate import upgrade
from models.plan_checks import REPLAN_CHECKS
from models.runs import get_run
from models.settings import get_settings
from models.sql import PG_INT_MAX
from models.submissions import RunRequest
from models.tools import catalog, configured_tool_names, describe_parameters
from ops import deployment_commands, views
from ops.connection import connect
from ops.demo import run_demo
from ops.demo_local import MODEL_HELP
from ops.inputs import (
    not_blank,
    parse_facts,
    read_plan,
    replan_check_value,
)
from ops.json_output import JsonFlag, print_json
from ops.listen import DEFAULT_POSTGRES_PORT, DEFAULT_REDIS_PORT, Listen
from ops.memory_commands import memory_app
from ops.procedure_commands import procedure_app
from ops.processes import interrupt_on_sigterm
from ops.review_commands import review_app
from ops.run_commands import runs_app
from ops.stack import LocalStack
from ops.token_commands import token_app
from ops.watch import watch_until_settled
from ops.webhook_commands import webhook_app

app = typer.Typer(help="agentq: a durable plan engine for AI agents.", no_args_is_help=True)
app.add_typer(review_app, name="review")
app.add_typer(memory_app, name="memory")
app.add_typer(procedure_app, name="procedure")
app.add_typer(token_app, name="token")
app.add_typer(webhook_app, name="webhook")
app.add_typer(runs_app, name="runs")
console = Console()
SUPERVISE_INTERVAL_S = 1.0
WALL_TIME_MAX_S = 30 * 86_400  # 30 days: longer is a typo, and overflows a timedelta soon after
PIN_FROM_GOAL_HELP = (
    "Also pin the amounts, currencies, ISO dates and identifiers (CC-4410) the goal states; "
    "a --fact of the same key wins. Off by default: a pin binds every step and the goal check."
)
WALL_TIME_HELP = "Wall-time budget, s (at most AGENTQ_MAX_WALL_TIME_BUDGET_S: 7 days by default)."


LISTEN_HELP = (
    "Let other machines reach the embedded Postgres and Redis on this address (0.0.0.0: all), "
    "with passwords; prints the URLs their `agentq worker` needs."
)


RunId = Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Run id.")]


@app.command()
def up(
    workers: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Worker processes (default AGENTQ_WORKER_CONCURRENCY)."),
    ] = None,
    coordinators: Annotated[
        int,
        typer.Option(min=1, max=16, help="Coordinator processes on the coordinator queue."),
    ] = 1,
    listen: Annotated[str | None, typer.Option(metavar="HOST", help=LISTEN_HELP)] = None,
    postgres_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Postgres's TCP port, with --listen.")
    ] = DEFAULT_POSTGRES_PORT,
    redis_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Redis's TCP port, with --listen.")
    ] = DEFAULT_REDIS_PORT,
) -> None:
    """Start the embedded stack in the foreground: Postgres, Redis, worker, scheduler and beat.

    A process that dies is started again (with a warning). Ctrl-C stops everything, letting
    running steps finish first; Ctrl-C again stops at once.
    """
    from ops.local import ignored_broker_variables, start_api, start_engine

    settings = get_settings()
    home = settings.home
    console.print(Text.assemble("starting agentq in ", (str(home), "bold"), " …"))
    opened = None if listen is None else Listen(listen, postgres_port, redis_port)
    stack = start_engine(
        home,
        worker_concurrency=workers or settings.worker_concurrency,
        coordinators=coordinators,
        listen=opened,
    )
    try:
        api_url = start_api(stack, host=settings.api_host, port=settings.api_port)
    except BaseException:
        stack.stop()
        raise
    interrupt_on_sigterm()
    # `agentq up &` from a script starts with SIGINT ignored; kill -INT must still stop it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ignored = ", ".join(ignored_broker_variables(os.environ))
    running = get_settings()  # with the stack's URLs (`start_engine`)
    every = f" (every process; {ignored} ignored)" if ignored else " (every process)"
    console.print(Text("agentq is up", style="green"))
    console.print(
        Text(
            f"  database  {running.database_url}\n"
            f"  broker    {maybe_sanitize_url(running.broker_url or '')}{every}\n"
            f"  logs      {home / 'logs'}\n"
            f"  provider  {provider_label(running.provider)}\n"
            f"  api       {api_url}/api/v1 (spec {api_url}/openapi.json, web UI {api_url}/ui)\n"
            'Submit from another terminal: agentq submit "your goal". Ctrl-C stops everything.'
        )
    )
    if stack.remote_urls:
        lines = "".join(f"\n  {name}={url}" for name, url in stack.remote_urls.items())
        console.print(
            Text(f"Other machines: agentq worker (or scheduler, api) with{lines}"), soft_wrap=True
        )
    try:
        supervise(stack)
    except KeyboardInterrupt:
        console.print("stopping: waiting for running steps to finish (Ctrl-C again to force) …")
    finally:
        try:
            stack.stop()
        except KeyboardInterrupt:
            console.print("forced: running steps were killed; the reconciler retries them")
        console.print("stopped.")


def supervise(stack: LocalStack) -> None:
    """Every second, start again each process of `stack` that exited, with a warning naming it,
    its exit code and its log. Returns only by an exception (KeyboardInterrupt, StackError)."""
    while True:
        time.sleep(SUPERVISE_INTERVAL_S)
        for name in stack.restart_dead():
            code = stack.last_exit_code(name)
            console.print(
                Text(
                    f"warning: {name} exited with code {code} and was started again; "
                    f"see {stack.log_path(name)}",
                    style="yellow",
                )
            )


@app.command()
def migrate() -> None:
    """Apply the database migrations (an explicit step; workers never migrate)."""
    connect()
    upgrade()
    console.print("database is at the latest migration")


@app.command()
def submit(
    goal: Annotated[str, typer.Argument(callback=not_blank, help="What the agent should achieve.")],
    user: Annotated[
        str, typer.Option(callback=not_blank, help="Who the run belongs to.")
    ] = "local",
    fact: Annotated[list[str], typer.Option(help="Pinned fact KEY=VALUE; repeatable.")] = [],  # noqa: B006
    pin_from_goal: Annotated[bool, typer.Option(help=PIN_FROM_GOAL_HELP)] = False,
    plan: Annotated[Path | None, typer.Option(help="JSON file with an explicit plan.")] = None,
    criterion: Annotated[
        list[str],
        typer.Option(help="What must hold once it is done (${facts.KEY} allowed); repeatable."),
    ] = [],  # noqa: B006
    replan_check: Annotated[
        str | None,
        typer.Option(
            callback=replan_check_value,
            help=f"{' or '.join(REPLAN_CHECKS)}: ask after each step whether the rest of the "
            "plan still makes sense (default AGENTQ_REPLAN_CHECK).",
        ),
    ] = None,
    replans: Annotated[
        int | None, typer.Option(min=0, max=PG_INT_MAX, help="Replan budget.")
    ] = None,
    tokens: Annotated[int | None, typer.Option(min=1, max=PG_INT_MAX, help="Token budget.")] = None,
    wall_time: Annotated[
        float | None,
        typer.Option(min=1, max=WALL_TIME_MAX_S, help=WALL_TIME_HELP),
    ] = None,
    watch_run: Annotated[bool, typer.Option("--watch", help="Watch until it ends.")] = False,
) -> None:
    """Submit a goal; prints the run id."""
    connect()
    facts = parse_facts(fact)
    spec = read_plan(plan, facts) if plan else None
    request = RunRequest(
        user_id=user,
        goal=goal,
        facts=facts,
        plan=spec,
        replans=replans,
        tokens=tokens,
        wall_time_s=wall_time,
        success_criteria=criterion,
        replan_check=replan_check,
        pin_from_goal=pin_from_goal,
    )
    submitted = commands.submit(request)
    run_id = submitted.run_id
    console.print(views.said(submitted.notified, f"run {run_id} submitted"))
    if found := views.goal_values_text(submitted.from_goal, asked=pin_from_goal):
        console.print(found)
    if watch_run:
        raise typer.Exit(watch_until_settled(console, run_id))


@app.command()
def status(run_id: RunId, as_json: Annotated[bool, JsonFlag] = False) -> None:
    """Show one run: budgets and deadline, pinned facts, plan and steps, escalation, answer."""
    connect()
    with session_scope() as session:
        run = get_run(session, run_id)
        if as_json:
            from api.runs import run_detail  # FastAPI's models: loaded only for --json

            print_json(run_detail(session, run))
        else:
            console.print(views.run_panel(session, run))


@app.command()
def watch(run_id: RunId) -> None:
    """A live table of the run's steps until it ends or waits for review."""
    connect()
    raise typer.Exit(watch_until_settled(console, run_id))


@app.command()
def tools() -> None:
    """The tools plans can call (`AGENTQ_TOOL_MODULES`): name, what it does, its arguments and
    the keys of its result."""
    configured_tool_names()
    table = Table("tool", "description", "arguments", "returns")
    for entry in catalog():
        table.add_row(
            Text(entry["name"]),
            Text(entry["description"]),
            Text(describe_parameters(entry["parameters"])),
            Text(", ".join(entry["returns"]) or "-"),
        )
    console.print(table)


@app.command()
def cancel(run_id: RunId) -> None:
    """Cancel an active run: steps not yet running are cancelled, a running step finishes and
    nothing follows it, and an escalation waiting for review is withdrawn."""
    connect()
    commands.cancel(run_id)  # its follow-up writes the cancelled run's episode
    console.print(f"run {run_id} cancelled")


@app.command()
def demo(
    model: Annotated[str | None, typer.Option(help=MODEL_HELP)] = None,
    scenarios: Annotated[int, typer.Option(min=1, max=2, help="How many scenarios to run.")] = 2,
) -> None:
    """The expense-report demo on the embedded stack (or the configured one)."""
    raise typer.Exit(run_demo(console, model=model, scenarios=scenarios))


app.command()(deployment_commands.worker)
app.command()(deployment_commands.scheduler)
app.command()(deployment_commands.api)


def main() -> None:
    """Entry point: agentq errors become one red line and exit code 2."""
    try:
        app()
    except AgentqError as exc:
        # Text, not markup: messages quote user input and patterns such as `^[a-z]{0,99}$`.
        console.print(Text.assemble(("error:", "red"), " ", str(exc)))
        sys.exit(2)


if __name__ == "__main__":
    main()
