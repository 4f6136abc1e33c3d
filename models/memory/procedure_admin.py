"""The procedure commands: add, list, show, edit, delete, and save a succeeded run's plan.

One implementation behind `agentq procedure ...` (`ops/procedure_commands.py`), the HTTP API
(`api/procedures.py`) and the review console's "save as procedure" button. Each command checks
what `actor` may do (`models.memory.procedures.Actor`), validates the input (`InvalidInput` naming
the field), embeds the procedure's text with the configured embedder between transactions
(DESIGN.md, invariant 11: a remote embedder is a network call) and commits. An edit is refused
(`Conflict`) when another edit made a new version between its read and its write.

`save_from_run` turns a `succeeded` run into a procedure: title and when-to-use from the goal,
the plan template from the run's final plan version (its steps that did not fail, each with what
it waited for, by name; a reviewer's `human` answer steps are left out), and a body saying where
it came from. `offers_procedure` says whether a run should offer that: it succeeded after a
reviewer's `edit` decision, so its final plan is one a person fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session, col, select

from models.db import session_scope
from models.errors import Conflict, InvalidInput, NotAllowed, NotFound
from models.memory import procedures as book
from models.memory.memory_admin import embedder
from models.memory.procedure_outcomes import ProcedureOutcome, outcomes_of
from models.memory.procedures import Actor, Embedded, Procedure, ProcedureSpec, ProcedureVersion
from models.plans.plans import current_steps, dependencies
from models.plans.step_specs import spec_of
from models.plans.tools import configured_tool_names
from models.tables import Escalation, PlanVersion, Run, Step

SAVE_HINT: Final = "agentq procedure save --from-run {run_id}"


def embedded(spec: ProcedureSpec) -> Embedded:
    """`spec`'s text embedded by the configured embedder (outside any transaction)."""
    model = embedder()
    return Embedded(model.embed([spec.embedded_text()])[0], model.model)


def add(actor: Actor, data: dict[str, Any]) -> Procedure:
    """Add a procedure (version 1) from `data` (`ProcedureSpec`'s fields); a submitter's
    `user_id` defaults to its own user. Raises `InvalidInput` for bad fields, `NotAllowed` for
    a scope `actor` may not write."""
    if data.get("scope", "user") == "user" and data.get("user_id") is None and actor.user_id:
        data = {**data, "user_id": actor.user_id}
    spec = book.checked(data, tools=configured_tool_names())
    check_writer(actor, spec)
    vector = embedded(spec)
    with session_scope() as session:
        return book.insert(session, spec, vector, by=actor)


def check_writer(actor: Actor, spec: ProcedureSpec) -> None:
    """Raise `NotAllowed` unless `actor` may write `spec`: its scope (`Actor.may_write`) and,
    in a shared procedure, its template's model steps
    (`models.memory.procedures.template_refused`)."""
    if not actor.may_write(spec.scope, spec.user_id):
        raise book.refused(actor, spec.scope, spec.user_id)
    refused = book.template_refused(actor, spec)
    if refused is not None:
        raise refused


def listing(
    actor: Actor, *, scope: str | None = None, user_id: str | None = None
) -> list[Procedure]:
    """The procedures `actor` may read, newest first; `InvalidInput` for an unknown scope."""
    if scope is not None and scope not in book.SCOPES:
        raise InvalidInput(f"scope: {scope!r} is not a scope; use one of {', '.join(book.SCOPES)}")
    with session_scope() as session:
        return book.listed(session, actor, scope=scope, user_id=user_id)


@dataclass(frozen=True)
class Shown:
    """One procedure, every version of it and the outcomes of the runs that adopted it
    (`models.memory.procedure_outcomes`), oldest first."""

    procedure: Procedure
    versions: list[ProcedureVersion]
    outcomes: Sequence[ProcedureOutcome]


def show(actor: Actor, procedure_id: int) -> Shown:
    """Procedure `procedure_id` with its versions and outcomes; `NotFound` when `actor` may not
    read it."""
    with session_scope() as session:
        row = book.readable(session, procedure_id, actor)
        versions = book.versions_of(session, procedure_id)
        return Shown(row, versions, outcomes_of(session, procedure_id))


def edit(
    actor: Actor,
    procedure_id: int,
    changes: dict[str, Any],
    *,
    expected_version: int | None = None,
) -> Procedure:
    """Make a new version of the procedure: its current content with `changes` (fields of
    `ProcedureSpec`; `None` for `plan_template`, `user_id` or `tool` clears it); `actor` must be
    allowed to write both the old and the new scope. Raises `NotFound`, `InvalidInput` (nothing
    or an unknown field to change), `NotAllowed` (a scope it may not write), `Conflict` (the
    procedure with the changes is not a valid one, e.g. a scope without what it needs;
    `expected_version` is not the current one; another edit came first)."""
    unknown = sorted(set(changes) - set(book.CONTENT))
    if unknown or not changes:
        allowed = ", ".join(book.CONTENT)
        raise InvalidInput(f"changes: {', '.join(unknown) or 'none'}; change any of {allowed}")
    with session_scope() as session:
        row = book.readable(session, procedure_id, actor)
        if not actor.may_write(row.scope, row.user_id):
            raise book.refused(actor, row.scope, row.user_id)
        current = book.spec_of(row).model_dump()
        version = row.version
    if expected_version is not None and expected_version != version:
        raise Conflict(f"procedure {procedure_id} is at version {version}, not {expected_version}")
    try:
        spec = book.checked({**current, **changes}, tools=configured_tool_names())
    except InvalidInput as exc:  # the stored content and the changes together
        raise Conflict(f"procedure {procedure_id} with these changes: {exc}") from exc
    check_writer(actor, spec)
    vector = embedded(spec)
    with session_scope() as session:
        return book.update(
            session, procedure_id, expected=version, spec=spec, embedded=vector, by=actor
        )


def remove(actor: Actor, procedure_id: int) -> Procedure:
    """Delete the procedure with its versions; returns it as it was. `NotFound` when `actor`
    may not read it, `NotAllowed` when it may read but not write it."""
    with session_scope() as session:
        row = book.readable(session, procedure_id, actor)
        if not actor.may_write(row.scope, row.user_id):
            raise book.refused(actor, row.scope, row.user_id)
        if not book.delete(session, procedure_id):
            raise NotFound(f"procedure {procedure_id} does not exist")
        return row


def save_from_run(
    actor: Actor,
    run_id: int,
    *,
    title: str | None = None,
    scope: str | None = None,
    tool: str | None = None,
) -> Procedure:
    """Save succeeded run `run_id`'s final plan as a procedure of `scope` (default, whoever
    saves it: the run's user's own, since the plan holds that user's values; everyone's only
    when asked for), titled `title` (default: the goal). A reviewer may not save a run as its
    user's own: that is the user's memory, which a reviewer can neither read nor delete
    (issue 27); it saves `everyone` or `tool` ones (tool steps only, `check_writer`). Raises
    `NotFound` (no such run, or another user's for a submitter), `Conflict` (the run has not
    succeeded, or has no plan that makes a valid procedure), `NotAllowed` (a scope or a
    template `actor` may not write)."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        if run is None or (actor.role == "submitter" and run.user_id != actor.user_id):
            raise NotFound(f"run {run_id} does not exist")
        if run.status != "succeeded":
            raise Conflict(
                f"run: run {run_id} is {run.status}; only a succeeded run is saved as a procedure"
            )
        data = draft(session, run, edited=offers_procedure(session, run))
    scope = scope or "user"
    data |= {"scope": scope, "user_id": data["user_id"] if scope == "user" else None}
    data |= {"tool": tool, "title": title if title is not None else data["title"]}
    try:
        spec = book.checked(data, tools=configured_tool_names())
    except InvalidInput as exc:  # the run's goal and plan, and the scope asked for
        raise Conflict(f"run {run_id} does not make a valid procedure: {exc}") from exc
    if actor.role == "reviewer" and spec.scope == "user":
        raise NotAllowed(
            f"scope: a reviewer does not save run {run_id} as its user's own procedure: that is "
            "the user's memory, which a reviewer can neither read nor delete; save it with scope "
            "everyone or tool (tool steps only), or ask the user or an admin"
        )
    check_writer(actor, spec)
    vector = embedded(spec)
    with session_scope() as session:
        return book.insert(session, spec, vector, by=actor, source_run_id=run_id)


def draft(session: Session, run: Run, *, edited: bool) -> dict[str, Any]:
    """The procedure a run's final plan makes (`ProcedureSpec`'s fields, user-scoped)."""
    how = "after a reviewer's edit" if edited else "as planned"
    return {
        "title": run.goal[: book.TITLE_MAX_CHARS],
        "when_to_use": run.goal[: book.WHEN_MAX_CHARS],
        "body": f"The plan of run {run.id}, which succeeded {how}.",
        "plan_template": template_of(session, run),
        "scope": "user",
        "user_id": run.user_id,
    }


def template_of(session: Session, run: Run) -> dict[str, Any]:
    """The run's final plan version as a plan (`{"steps": [...]}`; see `template_from`)."""
    version = session.exec(
        select(PlanVersion).where(
            PlanVersion.run_id == run.id, PlanVersion.version == run.plan_version
        )
    ).one_or_none()
    if version is None:
        raise Conflict(f"run: run {run.id} has no plan to save")
    return template_from(current_steps(session, run), dependencies(version))


def template_from(steps: Sequence[Step], after: dict[int, tuple[int, ...]]) -> dict[str, Any]:
    """A plan of the `steps` (in order) that did not fail and are not a reviewer's `human`
    answers, each waiting for the kept steps it waited for (`after`: step id -> ids), by name."""
    kept = [s for s in steps if s.status != "failed" and s.kind in ("tool", "model")]
    names = {s.id: s.name for s in kept}
    return {
        "steps": [
            spec_of(s, [names[d] for d in after.get(s.id or 0, ()) if d in names]) for s in kept
        ]
    }


def offers_procedure(session: Session, run: Run) -> bool:
    """Whether `run` succeeded after a reviewer's `edit` decision: then its final plan is
    offered as a procedure (the console's button, the CLI's hint, `SAVE_HINT`)."""
    if run.status != "succeeded":
        return False
    stmt = select(col(Escalation.id)).where(
        Escalation.run_id == run.id, Escalation.decision == "edit"
    )
    return session.exec(stmt.limit(1)).first() is not None
