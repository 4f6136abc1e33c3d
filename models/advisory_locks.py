"""Postgres advisory locks held for a process's lifetime: one beat per database.

Two schedulers with beat (two `celery -A scheduler.app worker -B`, or a beat left behind by a
killed one: issue 11) would both send every periodic task. A beat sends only while it holds
`BEAT_LOCK_KEY`, a session-level advisory lock (PostgreSQL docs, "Advisory Locks"), on a
connection of its own (`SessionLock`): the server releases it when that session ends, so when
the holder dies, its connection closes and a waiting beat takes the lock at its next due task.
The connection is in autocommit: holding the lock is never an open transaction, which
`idle_in_transaction_session_timeout` would end and which would hold back vacuum.
"""

from __future__ import annotations

import contextlib
from typing import Final

import sqlalchemy as sa
import structlog
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from models.db import database_url

BEAT_LOCK_KEY: Final = 0x6167656E74712062  # "agentq b" in ASCII: the beat's lock, one per database
# try_lock: take the lock :key for this session if no other session holds it; never waits.
TRY_LOCK: Final = "SELECT pg_try_advisory_lock(:key)"
# still_connected: the session, and so a lock it took, still lives.
STILL_CONNECTED: Final = "SELECT 1"
log = structlog.get_logger("agentq.db")


class SessionLock:
    """The advisory lock `key` (a bigint) on a connection of its own to the configured database,
    taken with `held()` and kept until `release()` or the end of the process."""

    def __init__(self, key: int) -> None:
        self.key = key
        self._engine: sa.Engine | None = None
        self._connection: sa.Connection | None = None
        self._holding = False

    def held(self) -> bool:
        """Whether this process holds the lock now: one round trip on the lock's connection,
        which proves the lock still held, or else tries to take it (never waiting). A database
        error means not held: the connection is closed, and the next call starts again (a
        dropped session lost the lock, which another process may have taken since)."""
        try:
            if self._connection is None:
                self._connection = self._connect()
            if self._holding:
                self._connection.execute(sa.text(STILL_CONNECTED))
            else:
                taken = self._connection.execute(sa.text(TRY_LOCK), {"key": self.key})
                self._holding = bool(taken.scalar_one())
        except DBAPIError as exc:
            log.warning("advisory_lock.unavailable", key=self.key, error=str(exc.orig or exc))
            self.release()
        return self._holding

    def release(self) -> None:
        """Close the lock's connection, which releases the lock; idempotent."""
        connection, self._connection, self._holding = self._connection, None, False
        if connection is not None:
            with contextlib.suppress(DBAPIError):
                connection.close()

    def _connect(self) -> sa.Connection:
        if self._engine is None:  # no pool: the lock is this one connection's
            self._engine = sa.create_engine(
                database_url(), poolclass=NullPool, isolation_level="AUTOCOMMIT"
            )
        return self._engine.connect()
