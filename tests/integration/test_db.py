"""The database boundary on real Postgres: a pooled connection that was dropped is not pinged on
every checkout, so the unit of work that meets it runs again on a new one (issue 10); a dropped
connection is the database being away, a failed statement is not (issue 11)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from models import sql
from models.db import database_url, dispose_engines, retry_dropped, session_scope
from models.errors import DatabaseError, DatabaseUnavailable
from ops.stack import LocalStack

pytestmark = pytest.mark.integration


def _terminate(pid: int) -> None:
    """End backend `pid` from a connection outside the pool, as a server restart would."""
    other = sa.create_engine(database_url(), poolclass=NullPool)
    with other.connect() as connection:
        ended = connection.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        assert ended.scalar()
    other.dispose()


def test_a_dropped_connection_is_met_once_and_the_unit_runs_again(engine: LocalStack) -> None:
    dispose_engines()  # a pool of this test's own: one connection, the one ended below
    calls: list[int] = []

    @retry_dropped
    def backend_pid() -> int:
        calls.append(1)
        with session_scope() as session:
            return int(session.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())

    first = backend_pid()
    _terminate(first)
    second = backend_pid()
    assert second != first
    assert len(calls) == 3  # the first run, the one that met the dropped connection, the retry


def test_other_database_errors_are_not_run_again(engine: LocalStack) -> None:
    calls: list[int] = []

    @retry_dropped
    def broken() -> None:
        calls.append(1)
        with session_scope() as session:
            session.execute(sa.text("SELECT * FROM no_such_table"))

    with pytest.raises(DatabaseError, match="no_such_table") as info:
        broken()
    assert not info.value.dropped and len(calls) == 1
    assert not isinstance(info.value, DatabaseUnavailable)  # a task fails, it does not wait


def test_a_dropped_connection_is_raised_as_the_database_unavailable(engine: LocalStack) -> None:
    dispose_engines()
    with session_scope() as session:
        pid = int(session.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
    _terminate(pid)
    with pytest.raises(DatabaseUnavailable) as info, session_scope() as session:
        session.execute(sa.text("SELECT 1"))
    assert info.value.dropped


def test_a_connection_dropped_under_named_sql_is_retried_the_same_way(engine: LocalStack) -> None:
    """`models.sql` runs the hot statements on the driver, past SQLAlchemy: a dropped connection
    must still be invalidated and reported as `dropped`, so `retry_dropped` takes a new one."""
    dispose_engines()
    calls: list[int] = []

    @retry_dropped
    def backend_pid() -> int:
        calls.append(1)
        with session_scope() as session:
            return int(sql.scalar(session, "SELECT pg_backend_pid() WHERE :yes", {"yes": True}))

    first = backend_pid()
    _terminate(first)
    second = backend_pid()
    assert second != first
    assert len(calls) == 3


def test_named_sql_errors_name_the_server_s_message_and_change_nothing(engine: LocalStack) -> None:
    with pytest.raises(DatabaseError, match="no_such_table") as info, session_scope() as session:
        sql.execute(session, "SELECT * FROM no_such_table WHERE id = :id", {"id": 1})
    assert not info.value.dropped
    with session_scope() as session:  # the pool's connection is still good after the rollback
        assert sql.scalar(session, "SELECT :n::int + 1", {"n": 1}) == 2


def test_a_replanned_statement_is_never_prepared_on_the_server(engine: LocalStack) -> None:
    """psycopg prepares a statement after its fifth run on a connection, and Postgres may then
    keep one generic plan for good; a `sql.Replanned` statement must be planned at every run."""
    replanned = sql.Replanned("SELECT count(*) FROM runs WHERE user_id = :user_id")
    plain = "SELECT count(*) FROM steps WHERE run_id = :run_id"
    with session_scope() as session:
        for _ in range(8):
            sql.scalar(session, replanned, {"user_id": "nobody"})
            sql.scalar(session, plain, {"run_id": 0})
        prepared = [
            row.statement
            for row in sql.execute(session, "SELECT statement FROM pg_prepared_statements")
        ]
    assert any("FROM steps WHERE run_id" in text for text in prepared)  # the check can fail
    assert not any("FROM runs WHERE user_id" in text for text in prepared)
