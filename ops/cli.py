"""The `agentq` command line: up, run (submit, list, show, watch, cancel, purge), review, memory,
procedure, token, webhook, schedule, tools, demo, migrate, mcp, and the processes of a deployment.

It talks to Postgres and the broker directly: the URLs come from `DATABASE_URL`/`BROKER_URL`, or
from the `agentq up` running on the data directory (`AGENTQ_HOME`, default `~/.agentq`). `agentq
mcp` alone acts through the HTTP API, with an API token (`ops.mcp_server`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from models.errors import AgentqError
from ops import deployment_commands, run_commands
from ops.deployment import DEFAULT_POSTGRES_PORT, DEFAULT_REDIS_PORT
from ops.lazy_group import LazyApp, lazy_group
from ops.local_model import MODEL_HELP
from ops.option_values import http_url, loopback_address

if TYPE_CHECKING:
    from ops.stack import LocalStack

# What runs a command is imported when it runs, not at start (issue 15, part 10: `agentq --help`
# took 2.7-15 s importing SQLAlchemy, Celery and FastAPI); tests/acceptance/test_first_run.py
# checks `import ops.cli` loads none of them.


def _review() -> typer.Typer:
    from ops.review_commands import review_app

    return review_app


def _memory() -> typer.Typer:
    from ops.memory_commands import memory_app

    return memory_app


def _procedure() -> typer.Typer:
    from ops.procedure_commands import procedure_app

    return procedure_app


def _token() -> typer.Typer:
    from ops.token_commands import token_app

    return token_app


def _webhook() -> typer.Typer:
    from ops.webhook_commands import webhook_app

    return webhook_app


def _schedule() -> typer.Typer:
    from ops.schedule_commands import schedule_app

    return schedule_app


# Each help is the sub-app's own (tests/acceptance/test_first_run.py compares them).
SUBCOMMANDS = {
    "review": LazyApp(
        "Work the human-review queue. Decisions and claims are recorded as $AGENTQ_REVIEWER, "
        "else your login name.",
        _review,
    ),
    "memory": LazyApp("A user's long-term memory: facts and episodes.", _memory),
    "procedure": LazyApp(
        "Procedural memory: how-tos and plan templates that planning and steps recall.",
        _procedure,
    ),
    "token": LazyApp("Bearer tokens of the HTTP API (roles: submitter, reviewer, admin).", _token),
    "webhook": LazyApp(
        "Webhooks told of escalation.opened, escalation.deadline_passed, run.finished (signed, "
        "retried, logged).",
        _webhook,
    ),
    "schedule": LazyApp(
        "Goals on a schedule: a cron expression in a time zone, or an interval.", _schedule
    ),
}
app = typer.Typer(
    cls=lazy_group(SUBCOMMANDS),
    help="agentq: a durable plan engine for AI agents.",
    no_args_is_help=True,
)
console = Console()
errors = Console(stderr=True)
SUPERVISE_INTERVAL_S = 1.0
LISTEN_HELP = (
    "Let other machines reach the embedded Postgres and Redis on this address (0.0.0.0: all), "
    "with passwords; writes the URLs their `agentq worker` needs to AGENTQ_HOME/remote.env."
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
    listen: Annotated[str | None, typer.Option(metavar="HOST", help=LISTEN_HELP)] = None,
    postgres_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Postgres's TCP port, with --listen.")
    ] = DEFAULT_POSTGRES_PORT,
    redis_port: Annotated[
        int, typer.Option(min=1, max=65535, help="Redis's TCP port, with --listen.")
    ] = DEFAULT_REDIS_PORT,
) -> None:
    """Start the embedded stack in the foreground: Postgres, Redis, worker, scheduler and beat,
    webhook sender, API.

    A process that dies is started again (with a warning). Ctrl-C stops everything, letting
    running steps finish first; Ctrl-C again stops at once.

    Where agentq up runs already (on AGENTQ_HOME), it starts nothing and is refused in one
    line naming that one's pid, API address and data directory (exit status 2).
    """
    from models.settings import get_settings
    from ops import preflight

    settings = get_settings()
    home = settings.home
    # Each in one line, before anything starts and before the heavy imports below.
    preflight.check_not_running(home)
    preflight.check_data_dir(home)
    preflight.check_port_free(settings.api_host, settings.api_port)
    if listen is not None:
        from ops.embedded_postgres import running as postgres_runs

        preflight.check_listen_ports(
            listen, postgres_port, redis_port, postgres_running=postgres_runs(home / "pgdata")
        )
    notice = preflight.check_embedder(settings)
    from kombu.utils.url import maybe_sanitize_url

    from models.formats import provider_label
    from ops.listen import Listen, other_machines_text
    from ops.local import check_memory_model, ignored_broker_variables, start_api, start_engine
    from ops.processes import interrupt_on_sigterm
    from ops.stack_file import record_api_url

    console.print(Text.assemble("starting agentq in ", (str(home), "bold"), " …"))
    if notice:
        console.print(Text(notice, style="yellow"), soft_wrap=True)
    opened = None if listen is None else Listen(listen, postgres_port, redis_port)
    stack = start_engine(
        home,
        worker_concurrency=workers or settings.worker_concurrency,
        coordinators=coordinators,
        say=lambda line: console.print(Text(line)),
        prepare=check_memory_model,
        listen=opened,
    )
    try:
        api_url = start_api(stack, host=settings.api_host, port=settings.api_port)
        record_api_url(stack.data_dir, api_url)
    except BaseException:
        stack.stop()
        raise
    interrupt_on_sigterm()
    # `agentq up &` from a script starts with SIGINT ignored; kill -INT must still stop it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ignored = ", ".join(ignored_broker_variables(os.environ))
    running = get_settings()  # with the stack's URLs (`start_engine`)
    every = f" (every process; {ignored} ignored)" if ignored else " (every process)"
    redis = f"  redis     {stack.redis_server.describe()}\n" if stack.redis_server else ""
    console.print(Text("agentq is up", style="green"))
    console.print(
        Text(
            f"  database  {running.database_url}\n"
            f"  broker    {maybe_sanitize_url(running.broker_url or '')}{every}\n{redis}"
            f"  logs      {home / 'logs'}\n"
            f"  provider  {provider_label(running.provider)}\n"
            f"  api       {api_url}/api/v1 (spec {api_url}/openapi.json, web UI {api_url}/ui)\n"
            'Submit from another terminal: agentq run submit "your goal". Ctrl-C stops everything.'
        )
    )
    if opened is not None:
        console.print(Text(other_machines_text(opened, stack.data_dir)), soft_wrap=True)
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
    """Apply the database migrations (an explicit step; workers never migrate). With
    DATABASE_URL set (a deployment), also write the stack's limits this environment sets
    (quotas, dispatch cap, default budgets, ceilings); an `agentq up` stack's are its own."""
    from models.db import check_reachable
    from models.front import commands
    from models.migrate import upgrade
    from models.settings import read_settings
    from ops.connection import connect

    url = read_settings().database_url
    deployment = bool(url)  # else `connect` finds the `agentq up`
    connect()
    if url:  # one line, not Alembic's traceback, for a database it cannot connect to
        check_reachable(url, named="AGENTQ_DATABASE_URL")
    upgrade()
    console.print("database is at the latest migration")
    for variable, old, new in commands.publish_limits(by="agentq migrate") if deployment else []:
        console.print(f"stack limit {variable}: {'unset' if old is None else old} -> {new}")


@app.command()
def tools() -> None:
    """The tools plans can call (`AGENTQ_TOOL_MODULES`): name, what it does, its arguments and
    the keys of its result."""
    from rich.table import Table

    from models.plans.tool_arguments import describe_parameters
    from models.plans.tools import catalog, configured_tool_names

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
def demo(
    model: Annotated[str | None, typer.Option(help=MODEL_HELP)] = None,
    scenarios: Annotated[int, typer.Option(min=1, max=2, help="How many scenarios to run.")] = 2,
) -> None:
    """The expense-report demo on the embedded stack (or the configured one)."""
    from ops.demo import run_demo

    raise typer.Exit(run_demo(console, model=model, scenarios=scenarios))


MCP_URL_HELP = (
    "agentq's HTTP API (what `agentq up` prints); default AGENTQ_API_URL, else the agentq up "
    "running on AGENTQ_HOME, else http://AGENTQ_API_HOST:AGENTQ_API_PORT."
)
MCP_TOKEN_HELP = (
    "The API token to act as (`agentq token create`); default AGENTQ_API_TOKEN, which is better: "
    "a command line is visible to the machine's other users."
)
MCP_HTTP_HELP = (
    "Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio. HOST is 127.0.0.1, "
    "localhost or ::1: whoever connects acts with the token."
)


@app.command("mcp")
def mcp_server(
    url: Annotated[str | None, typer.Option(callback=http_url, help=MCP_URL_HELP)] = None,
    token: Annotated[str | None, typer.Option(help=MCP_TOKEN_HELP)] = None,
    http: Annotated[
        str | None,
        typer.Option(metavar="HOST:PORT", callback=loopback_address, help=MCP_HTTP_HELP),
    ] = None,
) -> None:
    """Serve agentq to an MCP client (Claude Desktop, an IDE) over stdio, acting through the
    HTTP API with an API token: its role decides what the client may do (a submitter submits
    and follows its runs, a reviewer works the review queue, an admin both).

    Tools: whoami, submit_goal, run_status, list_runs, cancel_run, list_reviews, show_review,
    claim_review, release_review, approve, reject, respond, edit_arguments, edit_plan.
    """
    from ops.mcp_server import run_server

    run_server(url=url, token=token, http=http)


app.add_typer(run_commands.run_app, name="run")
# The names before `agentq run ...` (issue 28): they work as they did, unlisted.
app.add_typer(run_commands.runs_app, name="runs", hidden=True)
for old, command in run_commands.ALIASES.items():
    app.command(old, hidden=True)(command)
app.command()(deployment_commands.worker)
app.command()(deployment_commands.scheduler)
app.command()(deployment_commands.sender)
app.command()(deployment_commands.api)


def main() -> None:
    """Entry point. Every refusal is one line on stderr, `error: ...`, exit status 2: agentq's
    errors (`AgentqError`) and the usage errors of click, which Typer would draw as a boxed panel
    cut at 80 columns in a pipe. Ctrl-C at a prompt is `Aborted.`, exit status 1."""
    try:
        code = app(standalone_mode=False)  # click's errors raised here, not printed
    except AgentqError as exc:
        fail(str(exc), 2)
    except typer.Abort:
        errors.print("Aborted.")
        sys.exit(1)
    except typer.TyperException as exc:  # click's ClickException and its usage errors
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed already
            sys.exit(exc.exit_code)
        fail(usage_line(exc), exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def usage_line(exc: typer.TyperException) -> str:
    """Click's message for `exc`, with the command's `--help` to try when it has a context:
    `No such option: --bogus (try 'agentq run list --help')`."""
    ctx = getattr(exc, "ctx", None)
    message = exc.format_message().rstrip(".")
    return f"{message} (try '{ctx.command_path} --help')" if ctx is not None else message


def fail(message: str, code: int) -> NoReturn:
    """Print `error: message` to stderr in one line, however narrow the terminal (Text, not
    markup: messages quote user input and patterns such as `^[a-z]{0,99}$`), and exit."""
    errors.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
