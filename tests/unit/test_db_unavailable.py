"""A database that is away, told from a statement that failed (issue 11): only the first makes a
task send itself again (`models.engine.queue.OUTAGE_RETRIES`), and what a step's retry carries
survives the trip through the broker's JSON."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.exc import DBAPIError

from models.db import dispose_engines, session_scope, unavailable, wait_out_outage
from models.engine.queue import OUTAGE_RETRY_MAX_S, outage_countdown_s
from models.errors import DatabaseError, DatabaseUnavailable
from models.tables import Step
from tests.support.net import free_port
from worker.execution.attempts import Claimed, Outcome
from worker.execution.outages import carry, interrupted


def _translated(orig: Exception, *, invalidated: bool = False) -> DBAPIError:
    """`orig` as SQLAlchemy raises it from the driver (what `models.db.session_scope` sees)."""
    return DBAPIError.instance(
        "SELECT 1", {}, orig, psycopg.Error, connection_invalidated=invalidated
    )


@pytest.mark.parametrize(
    "orig",
    [
        psycopg.OperationalError("connection failed: Connection refused"),  # no SQLSTATE
        errors.ConnectionFailure("connection failure"),  # 08006
        errors.SqlclientUnableToEstablishSqlconnection("cannot connect"),  # 08001
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.CrashShutdown("terminating connection because of crash of another process"),
        errors.CannotConnectNow("the database system is shutting down"),
        errors.TooManyConnections("sorry, too many clients already"),
    ],
    ids=lambda orig: type(orig).__name__,
)
def test_a_database_that_is_away_is_unavailable(orig: Exception) -> None:
    assert unavailable(_translated(orig))


@pytest.mark.parametrize(
    "orig",
    [
        errors.UniqueViolation("duplicate key value violates unique constraint"),
        errors.DeadlockDetected("deadlock detected"),  # an OperationalError, but answered
        errors.QueryCanceled("canceling statement due to statement timeout"),
        errors.LockNotAvailable("could not obtain lock"),
        errors.UndefinedTable('relation "no_such_table" does not exist'),
        errors.DivisionByZero("division by zero"),
    ],
    ids=lambda orig: type(orig).__name__,
)
def test_a_statement_the_server_answered_is_not(orig: Exception) -> None:
    assert not unavailable(_translated(orig))


def test_a_dropped_connection_is_unavailable_whatever_the_driver_said() -> None:
    assert unavailable(_translated(psycopg.Error("consuming input failed"), invalidated=True))


def test_a_refused_connection_is_raised_as_unavailable_not_dropped() -> None:
    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/nothing"
    try:
        with (
            pytest.raises(DatabaseUnavailable, match="database error") as info,
            session_scope(url) as session,
        ):
            session.connection()
    finally:
        dispose_engines()
    assert not info.value.dropped  # nothing to run again at once: the task backs off instead


def test_the_backoff_doubles_to_its_cap() -> None:
    assert [outage_countdown_s(n) for n in range(6)] == [1, 2, 4, 4, 4, 4]
    assert outage_countdown_s(10_000) == OUTAGE_RETRY_MAX_S
    # a step's outcome waiting to be written polls every second: its lease is not renewed
    assert {outage_countdown_s(n, holds_outcome=True) for n in range(6)} == {1.0}


def _claimed(attempt: int) -> Claimed:
    step = Step(id=7, run_id=3, name="rate", kind="tool", tool="noop", attempt=attempt)
    return Claimed(step, {}, {}, 1, "ana")


def test_a_step_s_outcome_survives_the_retry_message() -> None:
    outcome = Outcome("succeeded", {"rate": 1.08, "pairs": ["EUR", "USD"]})
    exc = DatabaseUnavailable("database error: connection refused")
    held = json.loads(json.dumps(carry(_claimed(2), outcome, exc)))  # as the broker carries it
    assert held["attempt"] == 2 and Outcome(**held["outcome"]) == outcome


def test_an_attempt_cut_short_goes_back_to_the_queue_at_once() -> None:
    exc = DatabaseUnavailable("database error: the database system is shutting down")
    held = json.loads(json.dumps(carry(_claimed(1), None, exc)))
    assert Outcome(**held["outcome"]) == interrupted(exc)
    assert interrupted(exc).kind == "deferred" and interrupted(exc).retry_after_s == 0.0
    assert "shutting down" in interrupted(exc).error


def test_an_outage_is_waited_out_while_it_lasts_and_no_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`wait_out_outage` runs its unit again while the database is away, and gives up with the
    outage once its time is spent; a statement the server answered is raised at once."""
    slept: list[float] = []
    monkeypatch.setattr("models.db.time.sleep", slept.append)
    tries = iter([DatabaseUnavailable("away"), DatabaseUnavailable("away"), None])

    def settle_when_back() -> str:
        failure = next(tries)
        if failure is not None:
            raise failure
        return "settled"

    assert wait_out_outage(settle_when_back, within_s=10.0, what="test") == "settled"
    assert slept == [0.5, 1.0]

    def away() -> None:
        raise DatabaseUnavailable("still away")

    clock = iter(float(second) for second in range(100))
    monkeypatch.setattr("models.db.time.monotonic", lambda: next(clock))
    slept.clear()
    with pytest.raises(DatabaseUnavailable, match="still away"):
        wait_out_outage(away, within_s=6.0, what="test")
    assert 0 < sum(slept) <= 6.0

    def refused() -> None:
        raise DatabaseError("duplicate key")

    slept.clear()
    with pytest.raises(DatabaseError, match="duplicate key"):
        wait_out_outage(refused, within_s=6.0, what="test")
    assert slept == []
