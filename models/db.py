"""The database engine and sessions, one engine per process.

Celery's prefork pool forks worker processes from a parent; a connection pool must never cross a
fork (SQLAlchemy docs, "Using Connection Pools with Multiprocessing or os.fork()"). The engine is
therefore created lazily and keyed by process id, so each forked child builds its own.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, ParamSpec, TypeVar
from urllib.parse import unquote, urlsplit

import psycopg
import sqlalchemy as sa
import structlog
from sqlalchemy import event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from models.errors import ConfigurationError, DatabaseError, DatabaseUnavailable
from models.settings import get_settings

_engines: dict[tuple[int, str], Engine] = {}
log = structlog.get_logger("agentq.db")
P = ParamSpec("P")
T = TypeVar("T")

# A pooled connection idle for longer than this is pinged before it is used again (a server
# restart or a proxy's idle timeout drops such connections); busy connections are not, as a
# ping per checkout was one round trip in five on the engine's hot path (issue 10). Connections
# are also replaced after POOL_RECYCLE_S whatever their use.
IDLE_PING_S: Final = 10.0
POOL_RECYCLE_S: Final = 1800
# SQLSTATEs with which the server refuses every statement for now, whatever it is (PostgreSQL
# docs, Appendix A, "PostgreSQL Error Codes"): besides class 08 (connection exception),
# admin_shutdown, crash_shutdown, cannot_connect_now (starting up, shutting down, recovering)
# and too_many_connections.
UNAVAILABLE_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03", "53300"})


def database_url() -> str:
    """The configured database URL, or `ConfigurationError` if none is set."""
    url = get_settings().database_url
    if not url:
        raise ConfigurationError(
            "no database: set DATABASE_URL, or run `agentq up` to start the embedded stack"
        )
    return normalize_url(url)


def normalize_url(url: str) -> str:
    """Use the psycopg 3 driver for plain `postgresql://` URLs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


REACH_TIMEOUT_S: Final = 10  # `check_reachable`'s connect_timeout (libpq's, whole seconds)
DRIVER_PREFIXES: Final = ("connection failed: ", "connection is bad: ", "FATAL: ")


def check_reachable(url: str, *, named: str) -> None:
    """Open one connection to the database at `url` and close it, within `REACH_TIMEOUT_S`.

    Raises `DatabaseUnavailable` ("cannot reach the database at AGENTQ_DATABASE_URL (connection
    refused)") when nothing answers there, `DatabaseError` when the server refuses the
    connection (a password, a role or a database that does not exist), `ConfigurationError`
    when the URL cannot be read. Each names the setting `named`, never the URL: it may hold a
    password (`driver_reason` masks it in the driver's words too)."""
    try:
        password = urlsplit(url).password
        urlsplit(url).port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError as exc:  # its words name the part, not the URL
        raise ConfigurationError(f"{named}: not a URL the driver can read ({exc})") from exc
    plain = normalize_url(url).replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        psycopg.connect(plain, connect_timeout=REACH_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        reason = driver_reason(exc, password)
        if "FATAL:" in str(exc):  # the server answered, and said no
            raise DatabaseError(
                f"the database at {named} refused the connection ({reason})"
            ) from exc
        raise DatabaseUnavailable(f"cannot reach the database at {named} ({reason})") from exc
    except psycopg.Error as exc:
        reason = driver_reason(exc, password)
        raise ConfigurationError(f"{named}: not a URL the driver can read ({reason})") from exc


def driver_reason(exc: psycopg.Error, password: str | None) -> str:
    """The reason psycopg (libpq) gives for `exc` in a few words: the end of its first line
    (`connection failed: connection to server at "h", port 1 failed: Connection refused` ->
    `connection refused`), with `password` (the URL's, as written or decoded) masked."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    reason = first.rsplit(" failed: ", 1)[-1]
    for prefix in DRIVER_PREFIXES:
        reason = reason.removeprefix(prefix).strip()
    for secret in {password, unquote(password)} if password else ():
        reason = reason.replace(secret, "***")
    return reason[:1].lower() + reason[1:]


def get_engine(url: str | None = None) -> Engine:
    """This process's engine for `url` (default: the configured one)."""
    url = url or database_url()
    key = (os.getpid(), url)
    if key not in _engines:
        engine = sa.create_engine(
            url,
            pool_recycle=POOL_RECYCLE_S,
            pool_size=5,
            max_overflow=5,
            connect_args=driver_options(),
        )
        event.listen(engine, "checkin", _note_checkin)
        event.listen(engine, "checkout", _ping_if_idle)
        _engines[key] = engine
    return _engines[key]


def driver_options() -> dict[str, Any]:
    """psycopg's connection options (SQLAlchemy's `connect_args`) for `AGENTQ_DATABASE_POOLER`:
    through a transaction pooler, `prepare_threshold=None`, so psycopg prepares no statement on
    the server (by default it prepares one run five times on a connection). A prepared statement
    belongs to one server connection, and a transaction pooler hands each transaction any of
    them: the next client's `_pg3_0` then already exists there, or its own is missing (psycopg
    docs, "Server-side binding", on PgBouncer; PgBouncer docs, "Features": its own prepared
    statement support needs `max_prepared_statements`, 1.21 or newer). Every engine agentq makes
    passes these (this module's, the migrations')."""
    if get_settings().database_pooler == "transaction":
        return {"prepare_threshold": None}
    return {}


def _note_checkin(dbapi_connection: Any, record: Any) -> None:
    record.info["checked_in_at"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """Ping a connection that sat idle in the pool for over `IDLE_PING_S`; a dead one raises
    `DisconnectionError`, on which the pool discards it and checks out another (SQLAlchemy,
    "Disconnect Handling - Pessimistic, custom")."""
    idle_since = record.info.get("checked_in_at")
    if idle_since is None or time.monotonic() - idle_since < IDLE_PING_S:
        return
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        dbapi_connection.rollback()
    except Exception as error:  # any driver error: the connection is unusable
        raise exc.DisconnectionError() from error


def dispose_engines() -> None:
    """Forget engines inherited from a parent process, without closing its connections."""
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()


@contextmanager
def session_scope(url: str | None = None, *, autocommit: bool = False) -> Iterator[Session]:
    """A session that commits on success and rolls back on error; with `autocommit`, one whose
    every statement commits by itself, for what may not run inside a transaction block
    (`CREATE INDEX CONCURRENTLY`; SQLAlchemy docs, "Setting Isolation for Individual Sessions").

    Driver errors become `DatabaseError` (its message is the server's, without the statement),
    or its subclass `DatabaseUnavailable` when the database itself is away (`unavailable`).
    """
    engine = get_engine(url)
    bind = engine.execution_options(isolation_level="AUTOCOMMIT") if autocommit else engine
    with Session(bind, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except DBAPIError as exc:  # translated once, here, at the database boundary
            session.rollback()
            message = f"database error: {exc.orig or exc}"
            error = DatabaseUnavailable if unavailable(exc) else DatabaseError
            raise error(message, dropped=exc.connection_invalidated) from exc
        except BaseException:
            session.rollback()
            raise


def unavailable(exc: DBAPIError) -> bool:
    """Whether `exc` says the database is away rather than that a statement failed: the
    connection was dropped (`connection_invalidated`), could not be made (a psycopg
    `OperationalError` with no SQLSTATE: refused, no socket, timed out), or the server refused
    it with a connection-exception or shutdown SQLSTATE (`UNAVAILABLE_SQLSTATES`). A constraint
    violation, a deadlock, a statement timeout or a bad statement is not: the server is there,
    and it answered this statement."""
    if exc.connection_invalidated:
        return True
    if not isinstance(exc.orig, psycopg.OperationalError):
        return False
    state = exc.orig.sqlstate
    return state is None or state.startswith("08") or state in UNAVAILABLE_SQLSTATES


def retry_dropped(unit: Callable[P, T]) -> Callable[P, T]:
    """`unit` (a function whose database work is whole transactions, its messages sent after
    their commits) run once more when its connection turned out to be dropped
    (`DatabaseError.dropped`): its transaction rolled back, and SQLAlchemy has invalidated the
    pool's other connections of the same age, so the second run checks out a new one. Pooled
    connections are not pinged on every checkout (`IDLE_PING_S`), so this is where a server
    restart is absorbed; any other error, or a second drop, is raised (a database still away
    raises `DatabaseUnavailable`: a task then sends itself again,
    `models.engine.queue.OUTAGE_RETRIES`)."""

    @functools.wraps(unit)
    def again(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return unit(*args, **kwargs)
        except DatabaseError as exc:
            if not exc.dropped:
                raise
            log.warning("db.connection_dropped", unit=unit.__qualname__, error=str(exc)[:200])
            return unit(*args, **kwargs)

    return again


OUTAGE_WAIT_FIRST_S: Final = 0.5  # the first wait of `wait_out_outage`; doubles up to the next
OUTAGE_WAIT_MAX_S: Final = 2.0


def wait_out_outage(unit: Callable[[], T], *, within_s: float, what: str) -> T:
    """`unit()` (whole transactions) run again while it raises `DatabaseUnavailable`, waiting
    0.5 s, 1 s, 2 s, 2 s ... between tries, until `within_s` seconds have passed; then its last
    `DatabaseUnavailable` is raised. For work that holds something only this process has and
    a retry of its task would pay for again (a model call's answer, issue 11: settled once
    Postgres is back rather than asked again); `what` names it in the `db.outage_waited` log."""
    deadline = time.monotonic() + within_s
    wait = OUTAGE_WAIT_FIRST_S
    while True:
        try:
            return unit()
        except DatabaseUnavailable as exc:
            if time.monotonic() + wait > deadline:
                raise
            log.warning("db.outage_waited", what=what, retry_in_s=wait, error=str(exc)[:200])
            time.sleep(wait)
            wait = min(wait * 2, OUTAGE_WAIT_MAX_S)
