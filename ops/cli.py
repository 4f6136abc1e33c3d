"""The `agentq` command line: up, submit, runs, status, watch, review, demo, migrate.

It talks to Postgres and the broker directly: the URLs come from `DATABASE_URL`/`BROKER_URL`, or
from the `agentq up` running on the data directory (`AGENTQ_HOME`, default `~/.agentq`).
"""

from __future__ import annotations

import getpass
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from kombu.utils.url import maybe_sanitize_url
from rich.console import Console
from rich.live import Live
from rich.text import Text
from sqlmodel import col, select

from models import answers, drafts, queue, reviews, submissions, transitions
from models.db import session_scope
from models.errors import AgentqError, ConfigurationError
from models.migrate import upgrade
from models.plan_checks import REPLAN_CHECKS
from models.queue import TASK_COORDINATE
from models.runs import get_run
from models.settings import get_settings
from models.sql import PG_INT_MAX
from models.states import RUN_STATUSES, RUN_TERMINAL
from models.submissions import RunRequest
from models.tables import Run
from models.tools import (
    argument_problems,
    configured_tool_names,
    declared_returns,
    describe_parameters,
)
from ops import views
from ops.demo_local import MODEL_HELP
from ops.inputs import (
    not_blank,
    parse_facts,
    read_plan,
    read_plan_text,
    replan_check_value,
    run_status,
)
from ops.memory_commands import memory_app
from ops.procedure_commands import procedure_app
from ops.stack import LocalStack
from ops.stack_file import read_stack_file
from ops.token_commands import token_app

REVIEWER_HELP = "Decisions and claims are recorded as $AGENTQ_REVIEWER, else your login name."
app = typer.Typer(help="agentq: a durable plan engine for AI agents.", no_args_is_help=True)
review_app = typer.Typer(help=f"Work the human-review queue. {REVIEWER_HELP}", no_args_is_help=True)
app.add_typer(review_app, name="review")
app.add_typer(memory_app, name="memory")
app.add_typer(procedure_app, name="procedure")
app.add_typer(token_app, name="token")
console = Console()
WATCH_INTERVAL_S = 0.5
SUPERVISE_INTERVAL_S = 1.0
WALL_TIME_MAX_S = 30 * 86_400  # 30 days: longer is a typo, and overflows a timedelta soon after
PIN_FROM_GOAL_HELP = (
    "Also pin the amounts, currencies, ISO dates and identifiers (CC-4410) the goal states; "
    "a --fact of the same key wins. Off by default: a pin binds every step and the goal check."
)
WALL_TIME_HELP = "Wall-time budget, s (at most AGENTQ_MAX_WALL_TIME_BUDGET_S: 7 days by default)."


RunId = Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Run id.")]
EscalationId = Annotated[
    int, typer.Argument(min=1, max=PG_INT_MAX, help="Escalation id (see `agentq review list`).")
]
Comment = Annotated[
    str | None, typer.Option(callback=not_blank, help="Why; shown with the decision.")
]


def connect() -> None:
    """Point this process at the configured stack, or at the running `agentq up`.

    Raises `ConfigurationError` when a database URL is set but no broker URL (checked before
    anything is written), or when neither is set and no `agentq up` runs.
    """
    settings = get_settings()
    if os.environ.get("AGENTQ_DATABASE_URL") or settings.database_url:
        queue.broker_url(settings)
        return
    state = read_stack_file(settings.home)
    if state is None:
        raise ConfigurationError(
            f"no agentq stack is running on {settings.home}: start one with `agentq up` in "
            "another terminal, or set DATABASE_URL and BROKER_URL"
        )
    os.environ["AGENTQ_DATABASE_URL"] = state["database_url"]
    os.environ["AGENTQ_BROKER_URL"] = state["broker_url"]


def announce(run_id: int, done: str) -> None:
    """Send `agentq.coordinate` for the run, after the commit, and say so (`said`)."""
    said(queue.try_send(TASK_COORDINATE, run_id), done)


def said(notified: bool, done: str) -> None:
    """Print `done`; when its messages were not `notified` the broker is down, the rows are safe
    in Postgres and the reconciler sends them once the broker is back: said, not an error."""
    if notified:
        console.print(done)
        return
    console.print(
        Text(
            f"{done}; the broker could not be reached — the reconciler will send it when it "
            "is back",
            style="yellow",
        )
    )


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
) -> None:
    """Start the embedded stack in the foreground: Postgres, Redis, worker, scheduler and beat.

    A process that dies is started again (with a warning). Ctrl-C stops everything, letting
    running steps finish first; Ctrl-C again stops at once.
    """
    from ops.local import ignored_broker_variables, start_api, start_engine

    settings = get_settings()
    home = settings.home
    console.print(Text.assemble("starting agentq in ", (str(home), "bold"), " …"))
    stack = start_engine(
        home, worker_concurrency=workers or settings.worker_concurrency, coordinators=coordinators
    )
    try:
        api_url = start_api(stack, host=settings.api_host, port=settings.api_port)
    except BaseException:
        stack.stop()
        raise
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # `agentq up &` from a script starts with SIGINT ignored; kill -INT must still stop it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ignored = ", ".join(ignored_broker_variables(os.environ))
    every = f" (every process; {ignored} ignored)" if ignored else " (every process)"
    console.print(Text("agentq is up", style="green"))
    console.print(
        Text(
            f"  database  {os.environ['AGENTQ_DATABASE_URL']}\n"
            f"  broker    {maybe_sanitize_url(os.environ['AGENTQ_BROKER_URL'])}{every}\n"
            f"  logs      {home / 'logs'}\n"
            f"  provider  {views.provider_label(get_settings().provider)}\n"
            f"  api       {api_url}/api/v1 (spec {api_url}/openapi.json, web UI {api_url}/ui)\n"
            'Submit from another terminal: agentq submit "your goal". Ctrl-C stops everything.'
        )
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
    submitted = submissions.submit(request, settings=get_settings())
    run_id = submitted.run_id
    said(submitted.notified, f"run {run_id} submitted")
    if found := views.goal_values_text(submitted.from_goal, asked=pin_from_goal):
        console.print(found)
    if watch_run:
        raise typer.Exit(watch_until_settled(run_id))


@app.command()
def runs(
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
def status(run_id: RunId) -> None:
    """Show one run: budgets and deadline, pinned facts, plan and steps, escalation, answer."""
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
    if not console.is_terminal:  # Live ends a terminal render with a newline, but not a pipe's
        console.line()
    if final_status == "waiting_review":
        console.print("waiting for review: see `agentq review list`")
    return 1 if final_status in ("failed", "cancelled") else 0


@app.command()
def watch(run_id: RunId) -> None:
    """A live table of the run's steps until it ends or waits for review."""
    connect()
    raise typer.Exit(watch_until_settled(run_id))


@app.command()
def tools() -> None:
    """The tools plans can call (`AGENTQ_TOOL_MODULES`): name, what it does, its arguments and
    the keys of its result."""
    from rich.table import Table

    from models.tools import catalog

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
    with session_scope() as session:
        get_run(session, run_id)  # NotFound first
        transitions.lock_run(session, run_id)
        run = transitions.cancel_run(session, run_id)
    queue.follow_up(run_id, run.status)  # the cancelled run's episode is written
    console.print(f"run {run_id} cancelled")


def reviewer_name() -> str:
    """Who is reviewing: `$AGENTQ_REVIEWER`, else the login name; raises `InvalidInput` for a
    name that breaks `models.reviews.REVIEWER_NAME_PATTERN` or is reserved."""
    name = os.environ.get("AGENTQ_REVIEWER") or getpass.getuser()
    reviews.check_reviewer_name(name, field="AGENTQ_REVIEWER")
    return name


@review_app.command("list")
def review_list(
    all_: Annotated[bool, typer.Option("--all", help="Include decided ones.")] = False,
) -> None:
    """The review queue, oldest first."""
    connect()
    with session_scope() as session:
        console.print(views.escalations_table(views.review_queue(session, all_)))


@review_app.command("show")
def review_show(escalation_id: EscalationId) -> None:
    """Why a run escalated: the failing step and its error, the budget used, the pinned facts,
    and the decision once there is one."""
    connect()
    with session_scope() as session:
        console.print(
            views.escalation_panel(session, reviews.get_escalation(session, escalation_id))
        )


@review_app.command("plan")
def review_plan(escalation_id: EscalationId) -> None:
    """Print the plan an edit starts from, as the JSON `review edit --plan` takes: the failed
    step and every step not yet run, each with the steps it waits for (`after`), or the
    planner's output when there is no plan. Changes nothing; what it is goes to stderr, so
    `agentq review plan 3 > plan.json` holds the JSON alone."""
    connect()
    with session_scope() as session:
        start = drafts.draft(session, reviews.get_escalation(session, escalation_id))
    typer.echo(start.text)  # not Rich: no wrapping or markup in a file that is parsed back
    Console(stderr=True).print(Text(start.note, style="dim"))


@review_app.command("claim")
def review_claim() -> None:
    """Claim the oldest open escalation for yourself ($AGENTQ_REVIEWER, else your login name)."""
    connect()
    with session_scope() as session:
        esc = reviews.claim_next(session, reviewer=reviewer_name())
        if esc is None:
            console.print(views.nothing_to_claim(reviews.claims_by_reviewer(session)))
            return
        console.print(views.escalation_panel(session, esc))


@review_app.command("release")
def review_release(
    escalation_id: EscalationId,
    force: Annotated[
        bool, typer.Option("--force", help="Release another reviewer's claim (they are gone).")
    ] = False,
) -> None:
    """Give a claimed escalation back to the queue: your own claim, or anyone's with --force.
    Recorded as $AGENTQ_REVIEWER, else your login name."""
    connect()
    with session_scope() as session:
        esc = reviews.release(session, escalation_id, reviewer=reviewer_name(), force=force)
    console.print(f"escalation {esc.id} released: open for any reviewer to claim")


@review_app.command("approve")
def review_approve(escalation_id: EscalationId, comment: Comment = None) -> None:
    """Approve: retry the failed step once more (or re-plan, or carry on). Recorded as
    $AGENTQ_REVIEWER, else your login name."""
    connect()
    with session_scope() as session:
        reviews.get_escalation(session, escalation_id)
        run = reviews.approve(
            session,
            escalation_id,
            reviewer=reviewer_name(),
            comment=comment,
            max_attempts=get_settings().step_max_attempts,
        )
    announce(run.id or 0, f"escalation decided: approved; run {run.id} resumes")


@review_app.command("reject")
def review_reject(
    escalation_id: EscalationId,
    comment: Annotated[
        str, typer.Option(callback=not_blank, help="Why (required; the run fails with it).")
    ],
) -> None:
    """Reject: the run fails with your comment. Recorded as $AGENTQ_REVIEWER, else your login
    name."""
    connect()
    with session_scope() as session:
        reviews.get_escalation(session, escalation_id)
        run = reviews.reject(session, escalation_id, reviewer=reviewer_name(), comment=comment)
    queue.follow_up(run.id or 0, run.status)  # the failed run's episode is written
    console.print(f"escalation decided: rejected; run {run.id} failed")


@review_app.command("respond")
def review_respond(
    escalation_id: EscalationId,
    answer: Annotated[
        str, typer.Option(callback=not_blank, help="The answer: JSON, or a plain value.")
    ],
    comment: Comment = None,
    remember: Annotated[
        bool,
        typer.Option(
            "--remember",
            help="Also remember the answer as a fact of the run's user, from you (source "
            "reviewer:<name>); otherwise it is this run's state only.",
        ),
    ] = False,
) -> None:
    """Answer what the run could not find; it becomes the failed step's result. Recorded as
    $AGENTQ_REVIEWER, else your login name."""
    connect()
    with session_scope() as session:
        esc = reviews.get_escalation(session, escalation_id)
        returns = declared_returns(esc.detail.get("tool"))
        run = reviews.respond(
            session,
            escalation_id,
            reviewer=reviewer_name(),
            comment=comment,
            answer=answers.answer_from_text(answer, returns=returns),
            remember=remember,
        )
    announce(run.id or 0, f"escalation decided: answered; run {run.id} resumes")


@review_app.command("edit")
def review_edit(
    escalation_id: EscalationId,
    plan: Annotated[
        Path,
        typer.Option(
            help="JSON file: the steps that replace those not run (start from `review plan`)."
        ),
    ],
    comment: Comment = None,
) -> None:
    """Edit the plan: your steps replace every step that has not run yet; a step's `after`
    names the steps it waits for, which may be steps that ran or still run. Recorded as
    $AGENTQ_REVIEWER, else your login name."""
    connect()
    with session_scope() as session:
        reviews.get_escalation(session, escalation_id)
        run = reviews.edit(
            session,
            escalation_id,
            reviewer=reviewer_name(),
            plan=read_plan_text(plan),
            tools=configured_tool_names(),
            check_args=argument_problems,
            comment=comment,
            max_attempts=get_settings().step_max_attempts,
        )
    announce(run.id or 0, f"escalation decided: plan edited; run {run.id} resumes")


@app.command()
def demo(
    model: Annotated[str | None, typer.Option(help=MODEL_HELP)] = None,
    scenarios: Annotated[int, typer.Option(min=1, max=2, help="How many scenarios to run.")] = 2,
) -> None:
    """The expense-report demo on the embedded stack (or the configured one)."""
    from ops.demo import run_demo

    raise typer.Exit(run_demo(console, model=model, scenarios=scenarios))


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
