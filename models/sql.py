"""Named SQL on a session's own connection, without SQLAlchemy's per-statement machinery.

The engine's hot statements (`models.engine.leases`, `models.engine.decisions`,
`models.engine.dispatch`, `models.engine.budgets`, the hot transitions) run once or more per step.
Through `Session.execute` each pays for a `TextClause`, its cache key, the compiled-cache lookup and
the result proxy (issue 10; `ops/bench/phases.py` shows each phase's client CPU per run). So these
run on the session's psycopg connection, inside the session's transaction: `execute` first flushes
what the session holds (so a row added through the ORM is visible to the statement, as
autoflush would), and translates a driver error into SQLAlchemy's `DBAPIError` as
`Session.execute` would: a dropped connection is invalidated, and `models.db.session_scope`
raises `DatabaseError(dropped=True)` for `retry_dropped`. psycopg prepares a statement on the
server once it ran five times on a connection (psycopg's `prepare_threshold`), except a
`Replanned` statement.

Statements are written as for `sa.text`: `:name` parameters (`::type` casts are left alone),
converted once per statement to psycopg's `%(name)s`; lists bind as arrays, dicts are not
adapted (pass JSON text with `CAST(:x AS jsonb)`). Rows are named tuples (`row.id`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb
from sqlalchemy.orm import instrumentation
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key
from sqlmodel import Session, SQLModel

from models.bounds import PG_INT_MAX as PG_INT_MAX

_PARAM: Final = re.compile(r"(?<![:\w]):(\w+)")
M = TypeVar("M", bound=SQLModel)
_DRIVER: Final = "agentq.sql.driver"  # Session.info key: (transaction, connection, driver)


class Replanned(str):
    """A statement Postgres plans afresh at each execution, for its parameters and the rows
    there are now: it is never prepared on the server. For a statement whose best plan depends
    on how many rows of a kind there are (a user's backlog, steps by status): a prepared one
    keeps the generic plan Postgres made while the tables were small until the next ANALYZE.
    Measured (issue 10): in a new database, the dispatch's in-flight count kept a plan that took
    20-40 ms once 600 runs were in it, against 0.2 ms planned afresh; forcing a fresh plan on
    every statement instead cost the step's hot statements 0.2-0.3 ms each. (PostgreSQL docs,
    PREPARE, "plan_cache_mode"; psycopg docs, "Prepared statements".)"""


@functools.lru_cache(maxsize=256)
def driver_sql(sql: str) -> str:
    """`sql` with `:name` parameters in psycopg's `%(name)s` style (and `%` doubled)."""
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


def execute(session: Session, sql: str, params: Mapping[str, Any] | None = None) -> Any:
    """Run `sql` with `params` in the session's transaction; returns the psycopg cursor (rows as
    named tuples: `.fetchone()`, `.fetchall()`, iteration). Raises `sqlalchemy.exc.DBAPIError`
    (with `connection_invalidated` for a dropped connection) on a driver error."""
    if session.new or session.dirty or session.deleted:
        session.flush()
    connection, driver = _connections(session)
    cursor = driver.cursor(row_factory=namedtuple_row)
    try:
        prepare = False if isinstance(sql, Replanned) else None
        return cursor.execute(driver_sql(sql), params or {}, prepare=prepare)
    except psycopg.Error as error:
        raise _translated(connection, driver, error, sql, params) from error


def _translated(
    connection: sa.Connection,
    driver: Any,
    error: psycopg.Error,
    sql: str,
    params: Mapping[str, Any] | None,
) -> sa.exc.StatementError:
    """A driver error as SQLAlchemy's `DBAPIError` (`connection_invalidated` for a dropped
    connection, which is invalidated, and its engine's other pooled connections with it)."""
    dropped = connection.dialect.is_disconnect(error, driver, None)  # type: ignore[arg-type]
    if dropped:
        connection.invalidate(error)
        connection.engine.dispose(close=False)  # its other pooled connections are as old
    return sa.exc.DBAPIError.instance(
        sql, params, error, psycopg.Error, connection_invalidated=dropped
    )


def first_rows(session: Session, *statements: tuple[str, Mapping[str, Any]]) -> list[Any]:
    """The first row (or None) of each of `statements` (`(sql, params)`), run in order in the
    session's transaction and sent together, in one round trip (psycopg's pipeline mode): the
    server runs each after the one before has finished, each with its own snapshot (READ
    COMMITTED), so a statement after a lock sees what committed while the lock was awaited.
    Raises as `execute`; then none of them is taken to have run."""
    if session.new or session.dirty or session.deleted:
        session.flush()
    connection, driver = _connections(session)
    cursors = []
    try:
        with driver.pipeline():
            for sql, params in statements:
                cursor = driver.cursor(row_factory=namedtuple_row)
                prepare = False if isinstance(sql, Replanned) else None
                cursor.execute(driver_sql(sql), params, prepare=prepare)
                cursors.append(cursor)
        return [cursor.fetchone() for cursor in cursors]
    except psycopg.Error as error:
        raise _translated(connection, driver, error, statements[0][0], statements[0][1]) from error


def _connections(session: Session) -> tuple[sa.Connection, Any]:
    """The session's connection in its current transaction and the psycopg connection under it,
    looked up once per transaction (`Session.connection` was a third of `execute`'s CPU)."""
    transaction = session.get_transaction()
    known = session.info.get(_DRIVER)
    if transaction is None or known is None or known[0] is not transaction:
        connection = session.connection()
        known = (session.get_transaction(), connection, connection.connection.driver_connection)
        session.info[_DRIVER] = known
    return known[1], known[2]


def one(session: Session, sql: str, params: Mapping[str, Any] | None = None) -> Any:
    """The one row `sql` returns, or None when it returns none."""
    return execute(session, sql, params).fetchone()


def scalar(session: Session, sql: str, params: Mapping[str, Any] | None = None) -> Any:
    """The first column of the first row `sql` returns, or None when it returns none."""
    row = execute(session, sql, params).fetchone()
    return None if row is None else row[0]


def update_status(
    session: Session,
    model: type[M],
    row_id: int,
    *,
    to: str,
    expected: tuple[str, ...],
    values: Mapping[str, Any],
) -> M | None:
    """`UPDATE <table> SET status = :to, <values> WHERE id = :row_id AND status = ANY(:expected)
    RETURNING *` for plain `values` (no SQL expressions; JSON columns take dicts and lists):
    the row as `model`, None when no row was in an `expected` state. When the session already
    holds that row, the held instance is given the new values and returned (as the ORM's
    `populate_existing` would); else a new instance, not added to the session."""
    params = {f"v_{key}": _bindable(model, key, value) for key, value in values.items()}
    statement = _update_sql(str(model.__tablename__), tuple(values))
    params |= {"to": to, "row_id": row_id, "expected": list(expected)}
    row = one(session, statement, params)
    return None if row is None else loaded(session, model, row._asdict())


def rows_of(
    session: Session, model: type[M], sql: str, params: Mapping[str, Any] | None = None
) -> list[M]:
    """The rows `sql` returns (every column of `model`'s table), as instances (`loaded`)."""
    return [loaded(session, model, row._asdict()) for row in execute(session, sql, params)]


def built(model: type[M], found: Mapping[str, Any]) -> M:
    """A detached instance of `model` holding the row `found` (column -> value; other keys are
    ignored), built as SQLAlchemy builds a row it loads: the columns put in place, no `__init__`,
    whose attribute by attribute ORM events cost 0.1 to 0.25 ms a row (issue 29's profile of
    chained steps). `model(**found)` when `found` lacks a column (its default is the model's)."""
    fields = model.model_fields
    if not fields.keys() <= found.keys():
        return model(**{name: found[name] for name in fields if name in found})
    instance: M = instrumentation.manager_of_class(model).new_instance()
    instance.__dict__.update({name: found[name] for name in fields})
    return instance


def loaded(session: Session, model: type[M], found: dict[str, Any]) -> M:
    """The instance of `model` for the row `found` (column -> value): the session's own, updated
    to `found`, when it holds one; else a new instance, not added to the session (`built`)."""
    held = session.identity_map.get(identity_key(model, found["id"]))
    if held is None:
        return built(model, found)
    for key, value in found.items():
        set_committed_value(held, key, value)
    return held


@functools.lru_cache(maxsize=64)
def _update_sql(table: str, keys: tuple[str, ...]) -> str:
    sets = "".join(f", {key} = :v_{key}" for key in keys)
    return (
        f"UPDATE {table} SET status = :to{sets} "
        "WHERE id = :row_id AND status = ANY(:expected) RETURNING *"
    )


def _bindable(model: type[Any], key: str, value: Any) -> Any:
    if isinstance(value, dict | list) and isinstance(model.__table__.c[key].type, sa.JSON):
        return Jsonb(value)
    return value
