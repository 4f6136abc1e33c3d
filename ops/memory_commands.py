"""`agentq memory ...`: look into a user's memory, delete one fact or episode, forget a user,
re-embed after a model change.

The same functions serve the HTTP API: everything here is a thin layer over
`models.memory.memory_admin`, `models.memory.facts` and `models.memory.episodes`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from api.responses import FactOut
from models.db import session_scope
from models.errors import ConfigurationError
from models.formats import utc
from models.front import commands, forgetting
from models.memory import memory_admin, reembedding
from models.memory.facts import facts_of
from models.memory.retrieval import Scored
from models.migrate import upgrade
from models.settings import get_settings, use_settings
from models.sql import PG_INT_MAX
from ops.connection import connect
from ops.json_output import JsonFlag, print_json
from ops.stack import LocalStack
from ops.stack_file import read_stack_file
from ops.views import cell

memory_app = typer.Typer(
    help="A user's long-term memory: facts and episodes.", no_args_is_help=True
)
console = Console()


def _user(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


User = Annotated[str, typer.Option("--user", help="Whose memory.", callback=_user)]


@memory_app.command("facts")
def facts(
    user: User,
    history: Annotated[bool, typer.Option(help="Include superseded and expired facts.")] = False,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """The user's facts, newest first."""
    connect()
    with session_scope() as session:
        rows = facts_of(session, user_id=user, include_history=history)
    if as_json:
        newest = sorted(rows, key=lambda f: f.valid_from, reverse=True)
        print_json([FactOut.model_validate(f) for f in newest])
        return
    table = Table(
        "id", "subject", "attribute", "category", "text", "source", "since", "until", "by"
    )
    for f in sorted(rows, key=lambda f: f.valid_from, reverse=True):
        table.add_row(
            str(f.id),
            cell(f.subject),
            cell(f.attribute or ""),
            cell(f.category),
            cell(f.text),
            cell(f.source),
            utc(f.valid_from),
            utc(f.valid_to) if f.valid_to else "current",
            str(f.superseded_by or ""),
        )
    console.print(table)


def _hit(
    hit: Scored[Any], kind: str, row_id: str, shown: Text, source: str | Text
) -> tuple[float, list[str | Text]]:
    """A search result's score and its row of `search`'s table."""
    match = "yes" if hit.text_match else ""
    similarity = f"{hit.similarity:.3f}"
    return hit.score, [f"{hit.score:.4f}", kind, row_id, shown, source, similarity, match]


@memory_app.command("search")
def search(
    text: Annotated[str, typer.Argument(help="What to look for.")],
    user: User,
) -> None:
    """Hybrid recall (vector + full text) over the user's facts and episodes, one table ordered
    by score, highest first (score = relevance x recency)."""
    if not text.strip():
        raise typer.BadParameter("must not be empty", param_hint="'TEXT'")
    connect()
    found = memory_admin.search(user_id=user, query=text)
    rows = [
        _hit(f, "fact", str(f.item.id), cell(f.item.text), cell(f.item.source)) for f in found.facts
    ]
    rows += [
        _hit(
            e, "episode", f"run {e.item.run_id}", cell(e.item.summary, 120), f"run:{e.item.run_id}"
        )
        for e in found.episodes
    ]
    table = Table("score", "kind", "id", "text", "source", "similarity", "text match")
    for _, cells in sorted(rows, key=lambda r: -r[0]):
        table.add_row(*cells)
    console.print(table)
    console.print(Text(f"embedding model: {memory_admin.embedder().model}", style="dim"))


Yes = Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")]


@memory_app.command("forget")
def forget(
    user: User,
    cancel_runs: Annotated[
        bool,
        typer.Option(
            "--cancel-runs",
            help="Also cancel the user's active runs (a waiting escalation is withdrawn).",
        ),
    ] = False,
    runs: Annotated[
        bool,
        typer.Option(
            "--runs",
            help="Also erase the content of the user's runs (goals, pinned facts, step arguments "
            "and results, event details, escalation details, comments and answers), keeping ids, "
            "statuses, timings and spend; refused while the user has active runs, unless "
            "--cancel-runs.",
        ),
    ] = False,
    yes: Yes = False,
) -> None:
    """Delete all of the user's memory: facts (with history), episodes, turns and summaries.

    It is final: memory writes of the user's runs created before it are dropped.
    """
    connect()
    if not yes:
        what = "all memory" + (" and the run contents" if runs else "")
        typer.confirm(f"Delete {what} of {user!r}? This cannot be undone", abort=True)
    done = forgetting.forget(user, cancel_runs=cancel_runs, runs=runs)
    parts = ", ".join(f"{n} {kind}" for kind, n in done.deleted.items())
    console.print(Text(f"forgot {user}: {parts}"))
    if done.cancelled_runs:
        ids = ", ".join(str(i) for i in done.cancelled_runs)
        console.print(Text(f"cancelled runs (ids): {ids}"))
    if runs:
        parts = ", ".join(f"{n} {table}" for table, n in done.erased_runs.items())
        console.print(Text(f"erased the content of the ended runs: {parts}"))
    point = utc(done.erased_at)
    console.print(Text(f"erasure point {point}: runs created before it write no memory"))


@memory_app.command("delete")
def delete(
    fact: Annotated[
        int | None,
        typer.Option("--fact", min=1, max=PG_INT_MAX, help="Delete this fact, with its history."),
    ] = None,
    episode: Annotated[
        int | None, typer.Option("--episode", min=1, max=PG_INT_MAX, help="Delete this episode.")
    ] = None,
    yes: Yes = False,
) -> None:
    """Delete one fact (with the older versions it superseded) or one episode, and take it out
    of the run events that quoted it."""
    if (fact is None) == (episode is None):
        raise typer.BadParameter("give exactly one of --fact ID and --episode ID")
    kind, row_id = ("fact", fact) if fact is not None else ("episode", episode)
    connect()
    if not yes:
        typer.confirm(f"Delete {kind} {row_id}? This cannot be undone", abort=True)
    done = commands.forget_fact(fact) if fact is not None else commands.forget_episode(episode or 0)
    parts = ", ".join(f"{n} {what}" for what, n in done.counts.items())
    console.print(Text(f"deleted {kind} {row_id} of {done.user_id}: {parts}"))


@memory_app.command("reembed")
def reembed() -> None:
    """Re-embed every stored fact, episode and procedure with the configured embedding model and
    dimension, then build its HNSW indexes.

    Run it with the workers stopped (they embed with the model they started with). It works in
    batches, each committed, with a progress bar: stopped midway, run it again to finish. On the
    embedded default it refuses while `agentq up` runs, and starts the database itself otherwise.
    """
    model = memory_admin.embedder()
    with _database_only(), _progress_bars() as progress:
        counts = reembedding.reembed(model, progress=progress)
    console.print(
        Text(
            f"re-embedded {counts['facts']} facts, {counts['episodes']} episodes and "
            f"{counts['procedures']} procedures with {model.model} ({model.dim} dimensions); "
            "start agentq with this model now"
        )
    )


@contextmanager
def _progress_bars() -> Iterator[reembedding.Progress]:
    """A `reembedding.Progress` drawing one bar per step (on a terminal; elsewhere rich prints
    the bars once, at the end)."""
    columns = (*Progress.get_default_columns(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bars:
        tasks: dict[str, TaskID] = {}

        def update(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = bars.add_task(step, total=total)
            bars.update(tasks[step], completed=done, total=total)

        yield update


@contextmanager
def _database_only() -> Iterator[None]:
    settings = get_settings()
    if settings.database_url:
        yield
        return
    if read_stack_file(settings.home) is not None:
        raise ConfigurationError(
            "stop `agentq up` first: its workers embed with the model they started with; "
            "`agentq memory reembed` starts the database by itself"
        )
    stack = LocalStack(settings.home)
    database_url, _ = stack.start_services()
    use_settings(database_url=database_url)
    try:
        upgrade(database_url)
        yield
    finally:
        stack.stop()
