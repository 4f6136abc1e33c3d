"""The `agentq` command line: up, submit, runs, status, watch, review, demo, migrate.

It talks to Postgres and the broker directly: the URLs come from `DATABASE_URL`/`BROKER_URL`, or
from the `agentq up` running on the data directory (`AGENTQ_HOME`, default `~/.agentq`).
"""

from __future__ import annotations

import getpass
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from sqlmodel import col, select

from models import queue, reviews
from models.db import session_scope
from models.errors import AgentqError, ConfigurationError
from models.migrate import upgrade
from models.plans import PlanSpec, parse_plan
from models.queue import TASK_COORDINATE
from models.runs import FACT_KEY_PATTERN, get_run, submit_run
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Run
from ops import views
from ops.stack import read_stack_file

app = typer.Typer(help="agentq: a durable plan engine for AI agents.", no_args_is_help=True)
review_app = typer.Typer(help="Work the human-review queue.", no_args_is_help=True)
app.add_typer(review_app, name="review")
console = Console()
WATCH_INTERVAL_S = 0.5


def connect() -> None:
    """Point this process at the configured stack, or at the running `agentq up`."""
    settings = get_settings()
    if os.environ.get("AGENTQ_DATABASE_URL") or settings.database_url:
        return
    state = read_stack_file(settings.home)
    if state is None:
        raise ConfigurationError(
            f"no agentq stack is running on {settings.home}: start one with `agentq up` in "
            "another terminal, or set DATABASE_URL and BROKER_URL"
        )
    os.environ["AGENTQ_DATABASE_URL"] = state["database_url"]
    os.environ["AGENTQ_BROKER_URL"] = state["broker_url"]


def tool_names() -> list[str]:
    """Names of the tools the workers load (`AGENTQ_TOOL_MODULES`)."""
    from worker.tools import catalog, load_tool_modules

    load_tool_modules(get_settings().tool_modules)
    return [t["name"] for t in catalog()]


def tool_returns(name: str | None) -> tuple[str, ...]:
    """The result keys a tool declares; () for none or an unknown tool."""
    from worker.tools import catalog

    tool_names()
    return next((tuple(t["returns"]) for t in catalog() if t["name"] == name), ())


def parse_facts(pairs: list[str]) -> dict[str, str]:
    """`["currency=EUR", ...]` as a dict; raises `ConfigurationError` naming the bad entry."""
    facts: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.match(FACT_KEY_PATTERN, key) or not value:
            raise ConfigurationError(
                f"--fact {pair!r}: expected KEY=VALUE with KEY matching {FACT_KEY_PATTERN}"
            )
        facts[key] = value
    return facts


def read_plan(path: Path) -> PlanSpec:
    """A plan from a JSON file (`{"steps": [...]}`), validated against the registered tools."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"--plan {path}: {exc.strerror}") from exc
    return parse_plan(text, tools=tool_names())


@app.command()
def up(
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Worker processes (default AGENTQ_WORKER_CONCURRENCY)."),
    ] = None,
) -> None:
    """Start the embedded stack in the foreground: Postgres, Redis, worker, scheduler and beat."""
    from ops.local import start_engine

    home = get_settings().home
    console.print(f"starting agentq in [bold]{home}[/] …")
    stack = start_engine(home, worker_concurrency=workers or get_settings().worker_concurrency)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    console.print(
        f"[green]agentq is up[/]\n  database  {os.environ['AGENTQ_DATABASE_URL']}\n"
        f"  broker    {os.environ['AGENTQ_BROKER_URL']}\n  logs      {home / 'logs'}\n"
        f"  provider  {views.provider_label(get_settings().provider)}\n"
        'Submit from another terminal: agentq submit "your goal". Ctrl-C stops everything.'
    )
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("stopping …")
    finally:
        stack.stop()
        console.print("stopped.")


@app.command()
def migrate() -> None:
    """Apply the database migrations (an explicit step; workers never migrate)."""
    connect()
    upgrade()
    console.print("database is at the latest migration")


@app.command()
def submit(
    goal: Annotated[str, typer.Argument(help="What the agent should achieve.")],
    user: Annotated[str, typer.Option(help="Who the run belongs to.")] = "local",
    fact: Annotated[list[str], typer.Option(help="Pinned fact KEY=VALUE; repeatable.")] = [],  # noqa: B006
    plan: Annotated[Path | None, typer.Option(help="JSON file with an explicit plan.")] = None,
    replans: Annotated[int | None, typer.Option(min=0, help="Replan budget.")] = None,
    tokens: Annotated[int | None, typer.Option(min=0, help="Token budget.")] = None,
    wall_time: Annotated[float | None, typer.Option(min=1, help="Wall-time budget, s.")] = None,
    watch_run: Annotated[bool, typer.Option("--watch", help="Watch until it ends.")] = False,
) -> None:
    """Submit a goal; prints the run id."""
    connect()
    facts = parse_facts(fact)
    spec = read_plan(plan) if plan else None
    with session_scope() as session:
        run = submit_run(
            session,
            settings=get_settings(),
            user_id=user,
            goal=goal,
            facts=facts,
            plan=spec,
            replans=replans,
            tokens=tokens,
            wall_time_s=wall_time,
        )
        run_id = run.id or 0
    queue.send(TASK_COORDINATE, run_id)
    console.print(f"run [bold]{run_id}[/] submitted")
    if watch_run:
        raise typer.Exit(watch_until_settled(run_id))


@app.command()
def runs(
    status: Annotated[str | None, typer.Option(help="Only runs in this status.")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
) -> None:
    """List the newest runs."""
    connect()
    with session_scope() as session:
        stmt = select(Run).order_by(col(Run.id).desc()).limit(limit)
        if status:
            stmt = stmt.where(Run.status == status)
        if user:
            stmt = stmt.where(Run.user_id == user)
        console.print(views.runs_table(list(session.exec(stmt))))


@app.command()
def status(run_id: Annotated[int, typer.Argument(help="Run id.")]) -> None:
    """Show one run: budgets, pinned facts, plan and steps, escalation, answer."""
    connect()
    with session_scope() as session:
        console.print(views.run_panel(session, get_run(session, run_id)))


def watch_until_settled(run_id: int) -> int:
    """Show the run live until it ends or waits for review; exit code 0 if it succeeded or
    waits for review, 1 if it failed or was cancelled."""
    with Live(console=console, auto_refresh=False) as live:
        while True:
            with session_scope() as session:
                run = get_run(session, run_id)
                live.update(views.run_panel(session, run), refresh=True)
                settled = run.status in RUN_TERMINAL or run.status == "waiting_review"
                final_status = run.status
            if settled:
                break
            time.sleep(WATCH_INTERVAL_S)
    if final_status == "waiting_review":
        console.print("waiting for review: see `agentq review list`")
    return 1 if final_status in ("failed", "cancelled") else 0


@app.command()
def watch(run_id: Annotated[int, typer.Argument(help="Run id.")]) -> None:
    """A live table of the run's steps until it ends or waits for review."""
    connect()
    raise typer.Exit(watch_until_settled(run_id))


def reviewer_name() -> str:
    """Who is reviewing: `$AGENTQ_REVIEWER`, else the login name."""
    return os.environ.get("AGENTQ_REVIEWER") or getpass.getuser()


@review_app.command("list")
def review_list(
    all_: Annotated[bool, typer.Option("--all", help="Include decided ones.")] = False,
) -> None:
    """The review queue, oldest first."""
    connect()
    with session_scope() as session:
        console.print(views.escalations_table(views.review_queue(session, all_)))


@review_app.command("show")
def review_show(escalation_id: int) -> None:
    """Why a run escalated: the failing step, its error, the budget used, the pinned facts."""
    connect()
    with session_scope() as session:
        console.print(
            views.escalation_panel(session, reviews.get_escalation(session, escalation_id))
        )


@review_app.command("claim")
def review_claim() -> None:
    """Claim the oldest open escalation for yourself."""
    connect()
    with session_scope() as session:
        esc = reviews.claim_next(session, reviewer=reviewer_name())
        if esc is None:
            console.print("the review queue is empty")
            return
        console.print(views.escalation_panel(session, esc))


def _decided(run_id: int, what: str) -> None:
    queue.send(TASK_COORDINATE, run_id)
    console.print(f"escalation decided: {what}; run {run_id} resumes")


@review_app.command("approve")
def review_approve(escalation_id: int, comment: str | None = None) -> None:
    """Approve: retry the failed step once more (or re-plan, or carry on)."""
    connect()
    with session_scope() as session:
        run = reviews.approve(
            session,
            escalation_id,
            reviewer=reviewer_name(),
            comment=comment,
            max_attempts=get_settings().step_max_attempts,
        )
    _decided(run.id or 0, "approved")


@review_app.command("reject")
def review_reject(
    escalation_id: int, comment: Annotated[str, typer.Option(help="Why (required).")]
) -> None:
    """Reject: the run fails with your comment."""
    connect()
    with session_scope() as session:
        run = reviews.reject(session, escalation_id, reviewer=reviewer_name(), comment=comment)
    console.print(f"escalation decided: rejected; run {run.id} failed")


@review_app.command("respond")
def review_respond(
    escalation_id: int,
    answer: Annotated[str, typer.Option(help="The answer: JSON, or a plain value.")],
    comment: str | None = None,
) -> None:
    """Answer what the run could not find; it becomes the failed step's result."""
    connect()
    with session_scope() as session:
        esc = reviews.get_escalation(session, escalation_id)
        returns = tool_returns(esc.detail.get("tool"))
        run = reviews.respond(
            session,
            escalation_id,
            reviewer=reviewer_name(),
            comment=comment,
            answer=reviews.answer_from_text(answer, returns=returns),
        )
    _decided(run.id or 0, "answered")


@review_app.command("edit")
def review_edit(
    escalation_id: int,
    plan: Annotated[Path, typer.Option(help="JSON file: the steps that replace those not run.")],
    comment: str | None = None,
) -> None:
    """Edit the plan: your steps replace every step that has not run yet."""
    connect()
    spec = read_plan(plan)
    with session_scope() as session:
        run = reviews.edit(
            session,
            escalation_id,
            reviewer=reviewer_name(),
            plan=spec,
            comment=comment,
            max_attempts=get_settings().step_max_attempts,
        )
    _decided(run.id or 0, "plan edited")


@app.command()
def demo() -> None:
    """The expense-report demo, both scenarios, on the embedded stack (or the configured one)."""
    from ops.demo import run_demo

    raise typer.Exit(run_demo(console))


def main() -> None:
    """Entry point: agentq errors become one red line and exit code 2."""
    try:
        app()
    except AgentqError as exc:
        console.print(f"[red]error:[/] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
