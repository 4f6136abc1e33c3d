"""The guarded move every transition makes, in one place (DESIGN.md, invariant 1).

A transition is `UPDATE ... SET status = :to WHERE id = :id AND status IN (:expected) RETURNING *`.
When the row is in another state nothing changes and `IllegalTransition` says which row, the state
it found and the state it expected; callers that may see a message twice catch it and move on. The
caller owns the transaction (nothing here commits). The transitions themselves are grouped by what
moves them: `models.engine.run_transitions` (the engine moving a run through its phases),
`models.engine.step_transitions` (a step's lifecycle), `models.engine.transitions` (what reviewers
and commands do to runs, steps and escalations); a step's claim and the end of an attempt are
hand-written SQL in `models.engine.leases`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlmodel import Session

from models import sql
from models.engine import notifications
from models.engine.events import record_event
from models.errors import IllegalTransition
from models.states import MOVES, RUN_ACTIVE, RUN_TERMINAL
from models.tables import Escalation, Run, Step, utcnow

T = TypeVar("T", Run, Step, Escalation)


def guarded(
    session: Session,
    model: type[T],
    row_id: int,
    *,
    to: str,
    expected: Iterable[str],
    where: Iterable[Any] = (),
    why: str = "",
    **values: Any,
) -> T:
    """Move row `row_id` of `model` to status `to` from one of `expected`, setting `values`
    (plain values or SQL expressions) when `where` holds too; the row as updated.

    Raises `ValueError` when a move from `expected` to `to` is not in `models.states.MOVES`
    (nothing is sent to the database), and `IllegalTransition` (naming the status found, and
    `why` the extra condition) when no row matched; either way nothing changes.
    """
    table = str(model.__tablename__)
    expected = tuple(expected)
    for found in expected:
        if (found, to) not in MOVES[table]:
            raise ValueError(f"{table}: {found} -> {to} is not a legal move")
    table_model: Any = model
    where = tuple(where)
    row: T | None = None
    if not where and not any(isinstance(v, sa.ClauseElement) for v in values.values()):
        # the common case: named SQL on the driver (models.sql, a third of the ORM's CPU)
        row = sql.update_status(session, model, row_id, to=to, expected=expected, values=values)
    else:
        stmt = sa.update(model).where(table_model.id == row_id, table_model.status.in_(expected))
        stmt = stmt.where(*where).values(status=to, **values).returning(model)
        options = {"populate_existing": True, "synchronize_session": False}
        row = session.scalars(stmt.execution_options(**options)).one_or_none()
    if row is None:
        found_status = session.scalar(sa.select(table_model.status).where(table_model.id == row_id))
        listed = " or ".join(repr(s) for s in expected)
        wanted = ("active" if set(expected) == RUN_ACTIVE else listed) + (f" {why}" if why else "")
        raise IllegalTransition(table, row_id, found_status, wanted)
    return row


def move_run(
    session: Session, run_id: int, *, to: str, expected: Iterable[str], **values: Any
) -> Run:
    """A run's move to another status; the phase it was in ends with it, so whatever attempt held
    that phase holds nothing now (`models.engine.phases`). A move to an end (`RUN_TERMINAL`)
    notifies the webhooks of `run.finished` (`models.engine.notifications`), whichever transition
    made it."""
    values = {"updated_at": utcnow(), "phase_lease_expires_at": None, **values}
    run = guarded(session, Run, run_id, to=to, expected=expected, **values)
    record_event(session, run_id, f"run.{to}", **{k: v for k, v in values.items() if k == "error"})
    if to in RUN_TERMINAL:
        notifications.enqueue(session, "run.finished", run)
    return run
