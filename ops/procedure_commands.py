"""`agentq procedure ...`: add, list, show, edit and delete procedures, and save a succeeded
run's plan as one (`save --from-run N`).

A thin layer over `models.memory.procedure_admin`, which the HTTP API and the review console call
too. The CLI talks to Postgres directly and acts as an admin: it may write any scope. What it writes
is recorded as `cli:<name>` (`$AGENTQ_REVIEWER`, else the login name).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from models.errors import InvalidInput
from models.formats import utc
from models.memory import procedure_admin
from models.memory.procedures import SCOPES, Actor, Procedure, ProcedureVersion
from models.sql import PG_INT_MAX
from ops.connection import connect
from ops.inputs import reviewer_name
from ops.submit_command import DEFAULT_USER
from ops.views import cell, literal

procedure_app = typer.Typer(
    help="Procedural memory: how-tos and plan templates that planning and steps recall.",
    no_args_is_help=True,
)
console = Console()


def _scope(value: str | None) -> str | None:
    if value is not None and value not in SCOPES:
        raise typer.BadParameter(f"{value!r} is not a scope; use one of {', '.join(SCOPES)}")
    return value


ProcedureId = Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Procedure id.")]
Title = Annotated[str | None, typer.Option(help="What the procedure does, in a line.")]
When = Annotated[str | None, typer.Option("--when", help="When to use it (recalled by this).")]
Body = Annotated[str | None, typer.Option(help="The how-to text.")]
TemplateFile = Annotated[
    Path | None,
    typer.Option("--template", help='A plan template: a JSON file {"steps": [...]}; - is stdin.'),
]
ScopeOption = Annotated[
    str | None, typer.Option(callback=_scope, help=f"Who it is for: {', '.join(SCOPES)}.")
]
UserOption = Annotated[
    str | None, typer.Option("--user", help="The user of a user scope (add: local if not given).")
]
ToolOption = Annotated[str | None, typer.Option("--tool", help="The tool of a tool scope.")]


def _actor() -> Actor:
    connect()
    return Actor(f"cli:{reviewer_name()}", "admin")


def _template(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        text = typer.get_text_stream("stdin").read() if str(path) == "-" else path.read_text()
        loaded = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"--template {path}: not a readable JSON file ({exc})") from exc
    if not isinstance(loaded, dict):
        raise InvalidInput(f'--template {path}: must be a JSON object {{"steps": [...]}}')
    return loaded


@procedure_app.command("add")
def add(
    title: Title = None,
    when: When = None,
    body: Body = None,
    template: TemplateFile = None,
    scope: ScopeOption = "user",
    user: UserOption = None,
    tool: ToolOption = None,
) -> None:
    """Add a procedure: a title, when to use it, the how-to and/or a plan template."""
    actor = _actor()
    data: dict[str, Any] = {"title": title or "", "when_to_use": when or "", "body": body or ""}
    data["scope"] = scope
    if scope == "user" and user is None:
        user = DEFAULT_USER  # as `agentq run submit` without --user
    data |= {"plan_template": _template(template), "user_id": user, "tool": tool}
    shown(procedure_admin.add(actor, data), "added")


@procedure_app.command("list")
def listing(scope: ScopeOption = None, user: UserOption = None) -> None:
    """The procedures, newest first."""
    rows = procedure_admin.listing(_actor(), scope=scope, user_id=user)
    table = Table("id", "v", "scope", "by", "state", "title", "when to use", "template", "updated")
    for p in rows:
        table.add_row(
            str(p.id),
            str(p.version),
            cell(scope_text(p)),
            p.origin,
            state_text(p),
            cell(p.title),
            cell(p.when_to_use),
            f"{len((p.plan_template or {}).get('steps', []))} steps" if p.plan_template else "",
            utc(p.updated_at),
        )
    console.print(table)


@procedure_app.command("show")
def show(
    procedure_id: ProcedureId,
    version: Annotated[
        int | None, typer.Option(min=1, max=PG_INT_MAX, help="An older version.")
    ] = None,
) -> None:
    """One procedure in full, and its versions."""
    found = procedure_admin.show(_actor(), procedure_id)
    chosen: Procedure | ProcedureVersion = found.procedure
    if version is not None:
        older = [v for v in found.versions if v.version == version]
        if not older:
            known = ", ".join(str(v.version) for v in found.versions)
            raise InvalidInput(f"--version {version}: procedure {procedure_id} has {known}")
        chosen = older[0]
    console.print(panel(chosen, found.procedure))
    history = Table("version", "by", "as", "origin", "at")
    for v in found.versions:
        role = v.written_as or "unknown"  # unknown acts as a reviewer's (models.review.authorship)
        history.add_row(str(v.version), cell(v.written_by), role, v.origin, utc(v.written_at))
    console.print(history)
    if found.outcomes:
        adopted = Table("run", "version", "outcome", "what happened", "at", title="Adopted by")
        for o in found.outcomes:
            adopted.add_row(
                str(o.run_id), str(o.version), o.outcome, cell(o.detail), utc(o.created_at)
            )
        console.print(adopted)


@procedure_app.command("edit")
def edit(
    procedure_id: ProcedureId,
    title: Title = None,
    when: When = None,
    body: Body = None,
    template: TemplateFile = None,
    clear_template: Annotated[
        bool, typer.Option("--clear-template", help="Remove the plan template.")
    ] = False,
    scope: ScopeOption = None,
    user: UserOption = None,
    tool: ToolOption = None,
    expected_version: Annotated[
        int | None,
        typer.Option(min=1, max=PG_INT_MAX, help="Refuse unless it is still at this version."),
    ] = None,
) -> None:
    """Write a new version of a procedure with the fields given changed."""
    if clear_template and template is not None:
        raise InvalidInput("--template, --clear-template: give one of them, not both")
    given: dict[str, Any] = {"title": title, "when_to_use": when, "body": body, "scope": scope}
    given |= {"plan_template": _template(template), "user_id": user, "tool": tool}
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if clear_template:
        changes["plan_template"] = None
    if scope is not None and scope != "user":
        changes.setdefault("user_id", None)
    if scope is not None and scope != "tool":
        changes.setdefault("tool", None)
    actor = _actor()
    row = procedure_admin.edit(actor, procedure_id, changes, expected_version=expected_version)
    shown(row, f"edited: now version {row.version}")


@procedure_app.command("delete")
def delete(
    procedure_id: ProcedureId,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a procedure with all its versions (the runs that used it keep their record)."""
    actor = _actor()
    if not yes:
        typer.confirm(f"Delete procedure {procedure_id} and its versions?", abort=True)
    row = procedure_admin.remove(actor, procedure_id)
    console.print(literal(f"deleted procedure {row.id} ({row.title}), {row.version} versions"))


@procedure_app.command("save")
def save(
    from_run: Annotated[
        int, typer.Option("--from-run", min=1, max=PG_INT_MAX, help="A succeeded run's id.")
    ],
    title: Title = None,
    scope: ScopeOption = None,
    tool: ToolOption = None,
) -> None:
    """Save a succeeded run's final plan as a procedure (the run's user's unless --scope)."""
    row = procedure_admin.save_from_run(_actor(), from_run, title=title, scope=scope, tool=tool)
    shown(row, f"saved from run {from_run}")


def scope_text(p: Procedure | ProcedureVersion) -> str:
    """`everyone`, `user <id>` or `tool <name>`."""
    return {"user": f"user {p.user_id}", "tool": f"tool {p.tool}"}.get(p.scope, p.scope)


def state_text(p: Procedure) -> str:
    """`active`, `demoted (N failures in a row)` or `retired <when>`
    (`models.memory.procedure_outcomes`)."""
    if p.retired_at is not None:
        return f"retired {utc(p.retired_at)}"
    if p.failures:
        return f"demoted ({p.failures} failures in a row)"
    return "active"


def panel(p: Procedure | ProcedureVersion, current: Procedure) -> Panel:
    """One version of a procedure in full."""
    grid = Table.grid(padding=(0, 2))
    grid.add_row("scope", literal(scope_text(p)))
    grid.add_row(
        "written", literal("learned by agentq" if p.origin == "learned" else "by a person")
    )
    grid.add_row("state", literal(state_text(current)))
    grid.add_row("when to use", literal(p.when_to_use))
    grid.add_row("how to", literal(p.body or "-"))
    if current.source_run_id:
        came = "learned from" if current.origin == "learned" else "saved from"
        grid.add_row(came, Text(f"run {current.source_run_id}"))
    parts: list[Any] = [grid]
    if p.plan_template:
        parts.append(literal(json.dumps(p.plan_template, indent=1, ensure_ascii=False)))
    title = literal(
        f"procedure {current.id} · version {p.version} of {current.version} · {p.title}"
    )
    return Panel(Group(*parts), title=title, title_align="left")


def shown(row: Procedure, done: str) -> None:
    """Say what was done to `row`, and show it."""
    console.print(literal(f"procedure {row.id} {done}"))
    console.print(panel(row, row))
