"""The limits that protect a shared stack, as the stack's: one row each in `stack_limits`,
written by the process that owns the stack, read by every process that enforces them.

A limit read from each process's own environment is only that process's: a stack started with
`AGENTQ_USER_MAX_ACTIVE_RUNS=3` refused a fourth run over the API while `agentq run submit` from
another shell, whose environment said nothing (so 20), accepted it (issue 27, item 12;
DESIGN.md, invariant 13: limits that protect a shared stack are the stack's). So the owner
writes them (`publish`) and the others read them:

- the embedded stack: `agentq up` (`ops.local.start_engine`, after the migrations and before
  its processes start) writes every limit from its settings, replacing an earlier `up`'s;
- a deployment (docker-compose.yml, `agentq worker|scheduler|api` on several machines): its
  one explicit migration step, `agentq migrate` with `DATABASE_URL` set, writes the limits its
  environment sets, and the defaults of those not stored yet; the others keep their value.
  Set them where the migration runs (compose: `.env`) and run it again to change one.

Readers: every submit, whatever its front end (CLI, API, console) and environment
(`effective`, in `models.engine.runs.submit_run` and `models.engine.submissions`); the worker and
scheduler processes, before each task (`refresh`, at most every `REFRESH_S`), so the dispatch cap
and whatever else they read from `get_settings()` is the stack's; the API's spec (its budget
maxima). A limit with no row (a database no owner wrote) is the process's own setting. A
process whose environment sets a limit to another value is told so (`notice`; `agentq run submit`
prints it in one line).

Another limit joins by adding its `Settings` field name to `LIMITS`: no migration (a row per
name, the value as JSON, checked against the field's type and constraints when read). From then
on the owner writes it, and every process reading it from `get_settings()` (workers,
schedulers) or from the settings a submit is given gets the stack's value.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Final

import structlog
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, Session, SQLModel

from models import sql
from models.db import session_scope
from models.errors import AgentqError, ConfigurationError
from models.settings import BUDGET_CEILINGS, Settings, get_settings, setting_name, use_settings
from models.tables import created_field

LIMITS: Final[tuple[str, ...]] = (
    "user_max_active_runs",
    "user_submits_per_minute",
    "user_max_running_steps",
    "fair_slice_s",
    "step_data_max_bytes",
    "run_step_data_max_bytes",
    "user_step_data_max_bytes",
    *(field for _, default, ceiling in BUDGET_CEILINGS for field in (default, ceiling)),
)
"""The `Settings` fields that are the stack's (quotas, the dispatch cap, fair order's time slice,
the step-data caps per step, run and user, default budgets and their ceilings)."""
REFRESH_S: Final = 10.0  # how stale a worker's or scheduler's copy may be (`refresh`)
_SESSION_KEY: Final = "agentq.stack_limits"  # Session.info: the rows read in this transaction
log = structlog.get_logger("agentq.stack_limits")


class StackLimit(SQLModel, table=True):
    """One limit of the stack: `name` is its `Settings` field (`user_max_active_runs`), `value`
    its JSON value, `set_by` the owner that wrote it (`agentq up (pid 812)`, `agentq migrate`)
    and `set_at` when (migration 0031)."""

    __tablename__ = "stack_limits"
    name: str = Field(primary_key=True, max_length=100)
    value: Any = Field(sa_type=JSONB, nullable=False)  # a number, or any JSON a setting holds
    set_by: str = Field(max_length=200)
    set_at: datetime = created_field()


@dataclass(frozen=True)
class Stored:
    """A limit as the stack holds it: its value (checked against the field), who set it, when."""

    value: Any
    set_by: str
    set_at: datetime


# read: every limit the stack holds.
READ: Final = "SELECT name, value, set_by, set_at FROM stack_limits"
# write: set limit :name to :value (JSON text) as :set_by, replacing what was stored.
WRITE: Final = """
INSERT INTO stack_limits (name, value, set_by, set_at)
VALUES (:name, CAST(:value AS jsonb), :set_by, now())
ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, set_by = EXCLUDED.set_by,
    set_at = EXCLUDED.set_at"""
# seed: set limit :name to :value unless the stack holds it already.
SEED: Final = """
INSERT INTO stack_limits (name, value, set_by, set_at)
VALUES (:name, CAST(:value AS jsonb), :set_by, now())
ON CONFLICT (name) DO NOTHING"""
# forget: drop rows of names that are no longer limits (`LIMITS` changed).
FORGET: Final = "DELETE FROM stack_limits WHERE name <> ALL(:names)"


@cache
def _adapter(name: str) -> TypeAdapter[Any]:
    field = Settings.model_fields[name]
    kind: Any = Annotated[field.annotation, *field.metadata]  # the type with its constraints
    return TypeAdapter(kind)


def parsed(name: str, value: Any) -> Any:
    """`value` as setting `name` holds it (its type and constraints, `Settings`); raises
    `ConfigurationError` naming the row when it is not one (a row edited by hand)."""
    try:
        return _adapter(name).validate_python(value)
    except ValidationError as exc:
        raise ConfigurationError(
            f"stack_limits row {name!r} holds {value!r}, which {setting_name(name)} cannot "
            f"take: {exc.errors()[0]['msg']}; run `agentq migrate` (or restart `agentq up`) "
            "to write it again"
        ) from None


def read(session: Session) -> dict[str, Stored]:
    """The limits the stack holds, by field name (those of `LIMITS` only), read once per
    transaction (kept in `session.info`). Raises `ConfigurationError` for a value its setting
    cannot take."""
    if _SESSION_KEY not in session.info:
        rows = sql.execute(session, READ).fetchall()
        session.info[_SESSION_KEY] = {
            r.name: Stored(parsed(r.name, r.value), r.set_by, r.set_at)
            for r in rows
            if r.name in LIMITS
        }
    stored: dict[str, Stored] = session.info[_SESSION_KEY]
    return stored


def apply(settings: Settings, stored: dict[str, Stored]) -> Settings:
    """`settings` with the stack's values of its limits (pure); the same object when none
    differs. Names the stack does not hold keep `settings`' value."""
    changed = {
        name: row.value for name, row in stored.items() if getattr(settings, name) != row.value
    }
    return settings.model_copy(update=changed) if changed else settings


def effective(session: Session, settings: Settings) -> Settings:
    """`settings` with the stack's limits over its own (`read`, then `apply`): what a submit
    enforces, whoever submits."""
    return apply(settings, read(session))


def publish(
    session: Session, settings: Settings, *, by: str, only_set: bool = False
) -> list[tuple[str, Any, Any]]:
    """Write `settings`' value of every limit as the stack's, set by `by`; with `only_set`
    (a deployment's migration) only those its environment sets (`model_fields_set`), the
    others only where the stack holds none yet. Rows of names no longer in `LIMITS` are
    dropped. Returns `(variable, old, new)` for each value that changed (old None: new)."""
    before = read(session)
    changes: list[tuple[str, Any, Any]] = []
    for name in LIMITS:
        value = getattr(settings, name)
        replace = not only_set or name in settings.model_fields_set
        params = {"name": name, "value": json.dumps(value), "set_by": by}
        sql.execute(session, WRITE if replace else SEED, params)
        old = before[name].value if name in before else None
        if (replace or old is None) and old != value:
            changes.append((setting_name(name), old, value))
    sql.execute(session, FORGET, {"names": list(LIMITS)})
    session.info.pop(_SESSION_KEY, None)
    return changes


def disagreements(settings: Settings, stored: dict[str, Stored]) -> list[str]:
    """Each limit this process's environment (or `.env`) sets to another value than the
    stack's, as `AGENTQ_NAME=own (the stack's: value, set by ... at ...)`."""
    return [
        f"{setting_name(name)}={_plain(getattr(settings, name))} (the stack's: "
        f"{_plain(row.value)}, set by {row.set_by} at {row.set_at.astimezone(UTC):%Y-%m-%d %H:%M} "
        "UTC)"
        for name, row in stored.items()
        if name in settings.model_fields_set and getattr(settings, name) != row.value
    ]


def notice(session: Session, settings: Settings) -> str | None:
    """One line saying which limits this process's environment sets otherwise than the stack,
    and that the stack's apply; None when none does."""
    differ = disagreements(settings, read(session))
    if not differ:
        return None
    return (
        "note: this environment sets " + "; ".join(differ) + ". The stack's limits apply to "
        "every submit: change them where the stack is started (agentq up) or migrated"
    )


def _plain(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


_refreshed_at = -REFRESH_S  # time.monotonic() of this process's last `refresh`


def refresh() -> None:
    """Make this process's settings carry the stack's limits (`models.settings.use_settings`),
    read at most every `REFRESH_S` s; the worker and scheduler processes call it before each
    task. A database that cannot be read leaves them as they were (the task meets the outage
    itself), logged."""
    global _refreshed_at
    if time.monotonic() - _refreshed_at < REFRESH_S:
        return
    try:
        with session_scope() as session:
            stored = read(session)
    except AgentqError as exc:
        log.warning("stack_limits.unread", error=str(exc))
        return
    _refreshed_at = time.monotonic()
    current = get_settings()
    values = {name: row.value for name, row in stored.items()}
    if any(getattr(current, name) != value for name, value in values.items()):
        use_settings(**values)
