"""The database engine and sessions, one engine per process.

Celery's prefork pool forks worker processes from a parent; a connection pool must never cross a
fork (SQLAlchemy docs, "Using Connection Pools with Multiprocessing or os.fork()"). The engine is
therefore created lazily and keyed by process id, so each forked child builds its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from models.errors import ConfigurationError, DatabaseError
from models.settings import get_settings

_engines: dict[tuple[int, str], Engine] = {}


def database_url() -> str:
    """The configured database URL, or `ConfigurationError` if none is set."""
    url = os.environ.get("AGENTQ_DATABASE_URL") or get_settings().database_url
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


def get_engine(url: str | None = None) -> Engine:
    """This process's engine for `url` (default: the configured one)."""
    url = url or database_url()
    key = (os.getpid(), url)
    if key not in _engines:
        _engines[key] = sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    return _engines[key]


def dispose_engines() -> None:
    """Forget engines inherited from a parent process, without closing its connections."""
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session that commits on success and rolls back on error.

    Driver errors become `DatabaseError` (its message is the server's, without the statement).
    """
    with Session(get_engine(url), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except DBAPIError as exc:  # translated once, here, at the database boundary
            session.rollback()
            raise DatabaseError(f"database error: {exc.orig or exc}") from exc
        except BaseException:
            session.rollback()
            raise
