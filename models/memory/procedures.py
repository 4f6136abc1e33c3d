"""Procedural memory: how-tos and plan templates that planning and model steps recall (issue 12).

A procedure has a title, when to use it, a how-to text (`body`) and/or a plan template (a plan as
`models.plans.plans.PlanSpec` takes it), and a scope: `everyone`, one `user` (`user_id`), or one
`tool` (`tool`: offered to any run whose catalogue or plan has that tool). `procedures` holds one
row per procedure, its current version, embedded for recall (`models.memory.procedure_recall`);
every version, the current one included, is also a row of `procedure_versions`, so an edit (version
+ 1, a guarded `UPDATE ... WHERE version = :expected`) never loses what a plan used before it. A
delete is a hard delete of the procedure with its versions: a procedure is an instruction, not a
record; the `procedures.recalled` events of the runs that used it keep its id, version and title.

Who may do what (`Actor`): an admin anything; a submitter reads everyone's and tool procedures
and its own user's, and writes only its own user's; a reviewer reads and writes everyone's and
tool procedures, and nobody's user-scoped ones (as reviewers read nobody's memory, issue 9), and
its shared plan templates hold tool steps only (`template_refused`). Each version records its
writer's role (`written_as`): the steps a plan adopts from it act with that role's rights
(`models.review.authorship`).
Another user's user-scoped procedure is "not found", as one that does not exist. Forgetting a
user deletes their user-scoped procedures and those saved from their runs (`forget_procedures`;
DESIGN.md, invariant 7).
Functions take the session and never commit; `models.memory.procedure_admin` embeds and commits.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import sqlalchemy as sa
from pgvector.sqlalchemy import VECTOR
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR
from sqlalchemy.ext.mutable import MutableDict
from sqlmodel import Field as Column
from sqlmodel import Session, SQLModel, col, select

from models.errors import Conflict, InvalidInput, InvalidPlan, NotAllowed, NotFound
from models.patterns import error_message
from models.plans.plans import parse_plan
from models.plans.tools import argument_problems
from models.tables import Run, created_field, timestamp_field

Scope = Literal["everyone", "user", "tool"]
Role = Literal["submitter", "reviewer", "admin"]
Origin = Literal["person", "learned"]  # who wrote a version: a person, or agentq from a run
SCOPES: Final = ("everyone", "user", "tool")
TITLE_MAX_CHARS: Final = 200
WHEN_MAX_CHARS: Final = 2_000
BODY_MAX_CHARS: Final = 20_000
EMBEDDED_BODY_CHARS: Final = 1_000  # the head of the how-to is embedded with title and when
PROCEDURE_TSV: Final = "to_tsvector('english', title || ' ' || when_to_use || ' ' || body)"
# procedures_scope: a user-scoped row names its user, a tool-scoped one its tool, nothing else.
SCOPE_CHECK: Final = (
    "(scope = 'everyone' AND user_id IS NULL AND tool IS NULL) OR "
    "(scope = 'user' AND user_id IS NOT NULL AND tool IS NULL) OR "
    "(scope = 'tool' AND tool IS NOT NULL AND user_id IS NULL)"
)
CONTENT: Final = ("scope", "user_id", "tool", "title", "when_to_use", "body", "plan_template")


def _template_column() -> Any:
    return Column(default=None, sa_type=MutableDict.as_mutable(JSONB), nullable=True)


def _origin_column() -> Any:
    return Column(default="person", max_length=10, sa_column_kwargs={"server_default": "person"})


class Procedure(SQLModel, table=True):
    """The current version of one procedure, with its embedding (of `embedded_text`)."""

    __tablename__ = "procedures"
    __table_args__ = (
        sa.CheckConstraint(SCOPE_CHECK, name="procedures_scope"),
        sa.Index("procedures_user", "user_id", postgresql_where=sa.text("user_id IS NOT NULL")),
        sa.Index("procedures_tsv", "tsv", postgresql_using="gin"),
    )
    id: int | None = Column(default=None, primary_key=True)
    scope: str = Column(max_length=10)
    user_id: str | None = Column(default=None, max_length=200)
    tool: str | None = Column(default=None, max_length=100)
    title: str = Column(max_length=TITLE_MAX_CHARS)
    when_to_use: str
    body: str
    plan_template: dict[str, Any] | None = _template_column()
    version: int = 1
    embedding: list[float] = Column(sa_column=sa.Column(VECTOR(), nullable=False))
    embedding_model: str = Column(max_length=200)
    embedding_dim: int
    source_run_id: int | None = None  # the run it was saved from (`agentq procedure save`)
    created_by: str = Column(max_length=200)
    updated_by: str = Column(max_length=200)
    written_as: str | None = Column(default=None, max_length=10)  # the current version's
    origin: str = _origin_column()  # the current version's: `Origin`
    # Runs in a row whose adopted template (this version) needed a replan, and when that retired
    # it (`models.memory.procedure_outcomes`); a new version starts again from 0, not retired.
    failures: int = Column(default=0, sa_column_kwargs={"server_default": "0"})
    retired_at: datetime | None = timestamp_field()
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
    tsv: str | None = Column(
        default=None, sa_column=sa.Column(TSVECTOR(), sa.Computed(PROCEDURE_TSV, persisted=True))
    )


class ProcedureVersion(SQLModel, table=True):
    """One version of a procedure as it was written (`written_by`, `written_at`)."""

    __tablename__ = "procedure_versions"
    __table_args__ = (sa.UniqueConstraint("procedure_id", "version"),)
    id: int | None = Column(default=None, primary_key=True)
    procedure_id: int = Column(foreign_key="procedures.id", index=True, ondelete="CASCADE")
    version: int
    scope: str = Column(max_length=10)
    user_id: str | None = Column(default=None, max_length=200)
    tool: str | None = Column(default=None, max_length=100)
    title: str = Column(max_length=TITLE_MAX_CHARS)
    when_to_use: str
    body: str
    plan_template: dict[str, Any] | None = _template_column()
    written_by: str = Column(max_length=200)
    written_as: str | None = Column(default=None, max_length=10)  # `Role`; None: unknown
    origin: str = _origin_column()
    written_at: datetime = created_field()


class ProcedureSpec(BaseModel):
    """A procedure as a person writes it. `body` or `plan_template` (or both) must be given."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    title: str = Field(min_length=1, max_length=TITLE_MAX_CHARS)
    when_to_use: str = Field(min_length=1, max_length=WHEN_MAX_CHARS)
    body: str = Field(default="", max_length=BODY_MAX_CHARS)
    plan_template: dict[str, Any] | None = None
    scope: Scope = "user"
    user_id: str | None = Field(default=None, min_length=1, max_length=200)
    tool: str | None = Field(default=None, min_length=1, max_length=100)

    @field_validator("title", "when_to_use", "body")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    def embedded_text(self) -> str:
        """What is embedded and recalled by (`embedded_text`)."""
        return embedded_text(self.title, self.when_to_use, self.body)


def embedded_text(title: str, when_to_use: str, body: str) -> str:
    """A procedure's embedded text: title, when to use it, the how-to's head, one per line."""
    return f"{title}\n{when_to_use}\n{body[:EMBEDDED_BODY_CHARS]}"


def checked(data: dict[str, Any], *, tools: Collection[str]) -> ProcedureSpec:
    """`data` as a valid `ProcedureSpec`: fields in range, a scope with what it needs (`user`
    with `user_id`, `tool` with a registered `tool`, `everyone` with neither), a body or a
    plan template, and a template that validates as a plan of the registered `tools`, with
    arguments each tool takes (`models.plans.plans.parse_plan`; stored normalised). Raises
    `InvalidInput` naming the field."""
    try:
        spec = ProcedureSpec.model_validate(data)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {error_message(e)}" for e in exc.errors()]
        raise InvalidInput("; ".join(parts[:10])) from exc
    problem = _scope_problem(spec, tools)
    if problem:
        raise InvalidInput(problem)
    if not spec.body and spec.plan_template is None:
        raise InvalidInput("body, plan_template: give the how-to text, a plan template, or both")
    if spec.plan_template is not None:
        try:
            plan = parse_plan(spec.plan_template, tools=tools, check_args=argument_problems)
        except InvalidPlan as exc:  # its message names the step and field
            raise InvalidInput(f"plan_template: {exc}") from exc
        template = plan.model_dump(mode="json", exclude_defaults=True)
        spec = spec.model_copy(update={"plan_template": template})
    return spec


def _scope_problem(spec: ProcedureSpec, tools: Collection[str]) -> str | None:
    if spec.scope == "user" and (spec.user_id is None or spec.tool is not None):
        return "user_id: a user-scoped procedure names its user (and no tool)"
    if spec.scope == "tool":
        if spec.tool is None or spec.user_id is not None:
            return "tool: a tool-scoped procedure names its tool (and no user_id)"
        if spec.tool not in tools:
            return f"tool: unknown tool {spec.tool!r}; known: {', '.join(sorted(tools))}"
    if spec.scope == "everyone" and (spec.user_id is not None or spec.tool is not None):
        return "scope: an everyone-scoped procedure names no user_id and no tool"
    return None


@dataclass(frozen=True)
class Actor:
    """Who reads or writes procedures: `name` is recorded as the writer; `user_id` is the user a
    submitter acts for. The CLI acts as an admin (it talks to Postgres directly)."""

    name: str
    role: Role
    user_id: str | None = None

    def may_read(self, scope: str, user_id: str | None) -> bool:
        """Everyone's and tool procedures: anyone; a user's: that user's submitter, an admin."""
        if scope != "user":
            return True
        return self.role == "admin" or (self.role == "submitter" and self.user_id == user_id)

    def may_write(self, scope: str, user_id: str | None) -> bool:
        """A user's procedure: that user's submitter or an admin; everyone's and tool ones:
        reviewers and admins."""
        if self.role == "admin":
            return True
        if scope == "user":
            return self.role == "submitter" and self.user_id == user_id
        return self.role == "reviewer"


def refused(actor: Actor, scope: str, user_id: str | None) -> NotAllowed:
    """The error for a write `actor` may not make, naming what it may write."""
    may = "its own user's" if actor.role == "submitter" else "everyone's and tool"
    return NotAllowed(
        f"scope: a {actor.role} writes only {may} procedures, not a {scope}-scoped one"
        + (f" of {user_id!r}" if user_id else "")
    )


def template_refused(actor: Actor, spec: ProcedureSpec) -> NotAllowed | None:
    """The error for a shared (`everyone` or `tool`) plan template with a model step written by
    anyone but an admin; None when `actor` may write `spec`'s template. Any user's planner may
    adopt a shared template, and a model step is the one that could be told to repeat the user's
    memory in a result its writer reads: so only admins, who may read every user's memory, write
    them; a reviewer's shared template holds tool steps (issue 27)."""
    if actor.role == "admin" or spec.scope == "user" or spec.plan_template is None:
        return None
    steps = spec.plan_template.get("steps") or []
    model = [str(s.get("name")) for s in steps if s.get("kind") == "model"]
    if not model:
        return None
    return NotAllowed(
        f"plan_template: step {model[0]!r} is a model step; in an {spec.scope}-scoped procedure "
        f"only an admin writes model steps (a {actor.role}'s shared template holds tool steps)"
    )


def readable(session: Session, procedure_id: int, actor: Actor) -> Procedure:
    """Procedure `procedure_id` if `actor` may read it; `NotFound` otherwise (alike)."""
    row = session.get(Procedure, procedure_id)
    if row is None or not actor.may_read(row.scope, row.user_id):
        raise NotFound(f"procedure {procedure_id} does not exist")
    return row


def listed(
    session: Session, actor: Actor, *, scope: str | None = None, user_id: str | None = None
) -> list[Procedure]:
    """The procedures `actor` may read (of `scope`, of `user_id`), newest first."""
    stmt = select(Procedure).order_by(col(Procedure.id).desc())
    if scope is not None:
        stmt = stmt.where(Procedure.scope == scope)
    if user_id is not None:
        stmt = stmt.where(Procedure.user_id == user_id)
    return [p for p in session.exec(stmt) if actor.may_read(p.scope, p.user_id)]


def versions_of(session: Session, procedure_id: int) -> list[ProcedureVersion]:
    """Every version of the procedure, oldest first."""
    stmt = select(ProcedureVersion).where(ProcedureVersion.procedure_id == procedure_id)
    return list(session.exec(stmt.order_by(col(ProcedureVersion.version))))


@dataclass(frozen=True)
class Embedded:
    """A spec's embedding, computed before the transaction (DESIGN.md, invariant 11)."""

    vector: Sequence[float]
    model: str

    def columns(self) -> dict[str, Any]:
        """The embedding columns of a procedure row."""
        vector = list(self.vector)
        return {"embedding": vector, "embedding_model": self.model, "embedding_dim": len(vector)}


def insert(
    session: Session,
    spec: ProcedureSpec,
    embedded: Embedded,
    *,
    by: Actor,
    source_run_id: int | None = None,
    origin: Origin = "person",
) -> Procedure:
    """Write a new procedure (version 1) and its first version row, written by `by` (its name
    and role), a person's or `learned`; returns it with its id."""
    row = Procedure(
        **_content(spec),
        **embedded.columns(),
        version=1,
        source_run_id=source_run_id,
        created_by=by.name,
        updated_by=by.name,
        written_as=by.role,
        origin=origin,
    )
    session.add(row)
    session.flush()
    _add_version(session, row, by)
    return row


def update(
    session: Session,
    procedure_id: int,
    *,
    expected: int,
    spec: ProcedureSpec,
    embedded: Embedded,
    by: Actor,
    origin: Origin = "person",
) -> Procedure:
    """Make `spec` version `expected + 1` of the procedure, if it is still at `expected` (a
    guarded UPDATE), a person's or `learned`; a new version starts with no failures and is not
    retired. `Conflict` when another edit got there first, `NotFound` when it is gone."""
    stmt = (
        sa.update(Procedure)
        .where(col(Procedure.id) == procedure_id, col(Procedure.version) == expected)
        .values(
            **_content(spec),
            **embedded.columns(),
            version=Procedure.version + 1,
            updated_by=by.name,
            written_as=by.role,
            origin=origin,
            failures=0,
            retired_at=None,
            updated_at=sa.func.now(),
        )
        .returning(col(Procedure.id))
    )
    if session.scalar(stmt) is None:
        now = session.scalar(
            sa.select(col(Procedure.version)).where(col(Procedure.id) == procedure_id)
        )
        if now is None:
            raise NotFound(f"procedure {procedure_id} does not exist")
        raise Conflict(
            f"procedure {procedure_id} was edited meanwhile (now version {now}, not {expected}); "
            "show it and edit again"
        )
    row = session.get(Procedure, procedure_id, populate_existing=True)
    assert row is not None
    _add_version(session, row, by)
    return row


def delete(session: Session, procedure_id: int) -> bool:
    """Delete the procedure and its versions; False when there was none."""
    deleted = session.scalar(
        sa.delete(Procedure).where(col(Procedure.id) == procedure_id).returning(col(Procedure.id))
    )
    return deleted is not None


def forget_procedures(session: Session, *, user_id: str) -> int:
    """Delete every user-scoped procedure of `user_id`, and every procedure saved from one of
    their runs whatever its scope (it holds their goal and values), with their versions; the
    count."""
    from_runs = sa.select(col(Run.id)).where(col(Run.user_id) == user_id)
    stmt = sa.delete(Procedure).where(
        sa.or_(col(Procedure.user_id) == user_id, col(Procedure.source_run_id).in_(from_runs))
    )
    return len(list(session.scalars(stmt.returning(col(Procedure.id)))))


def spec_of(row: Procedure | ProcedureVersion) -> ProcedureSpec:
    """The stored content of a procedure or version, as a spec (to edit or show)."""
    return ProcedureSpec.model_validate({k: getattr(row, k) for k in CONTENT})


def _content(spec: ProcedureSpec) -> dict[str, Any]:
    return spec.model_dump(include=set(CONTENT))


def _add_version(session: Session, row: Procedure, by: Actor) -> None:
    values = {k: getattr(row, k) for k in CONTENT}
    version = ProcedureVersion(
        procedure_id=row.id or 0,
        version=row.version,
        written_by=by.name,
        written_as=by.role,
        origin=row.origin,
        **values,
    )
    session.add(version)
    session.flush()
