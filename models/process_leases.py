"""Leases on a role only one process of a database may have at a time: the beat (issue 29).

Two schedulers with beat (two `celery -A scheduler.app worker -B`, or a beat left behind by a
killed one: issue 11) would both send every periodic task, so a beat sends only while it holds
the lease named `BEAT_LEASE`: a row of `process_leases` naming its holder and when the lease
expires. The holder renews it (`ProcessLease.held`) well within its length; another process
takes it once it has expired, or at once when the holder let it go (`release`, on a clean stop).
Expiry is decided by the database's clock alone (`now()`), so machines' clocks never matter.

A row, not a session-level advisory lock (issue 11's first design): a session lock lives on one
server connection, and a transaction pooler (PgBouncer, `pool_mode=transaction`) hands each
transaction any of them. Behind one, the lock stayed on a pooled server connection after a
clean stop, and no later beat ever sent (issue 29). Each statement here is one autocommitted
transaction, so it works the same with or without a pooler, and holds nothing between them.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime
from typing import Final

import sqlalchemy as sa
import structlog
from sqlmodel import Field, SQLModel

from models import sql
from models.db import session_scope
from models.errors import DatabaseError

BEAT_LEASE: Final = "beat"  # the scheduler's beat: one sends per database
log = structlog.get_logger("agentq.db")

# take_or_renew: the lease :name for :holder until :lease_s seconds from now, if it is free,
# expired or already :holder's; returns the holder's row, or none when another holds it.
TAKE_OR_RENEW: Final = """
INSERT INTO process_leases AS l (name, holder, expires_at, taken_at)
VALUES (:name, :holder, now() + make_interval(secs => :lease_s), now())
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    expires_at = excluded.expires_at,
    taken_at = CASE WHEN l.holder = excluded.holder THEN l.taken_at ELSE excluded.taken_at END
WHERE l.holder = excluded.holder OR l.expires_at <= now()
RETURNING l.holder"""
# let_go: end :holder's lease :name now, so another process takes it at its next try.
LET_GO: Final = "DELETE FROM process_leases WHERE name = :name AND holder = :holder"


class ProcessLeaseRow(SQLModel, table=True):
    """The lease `name` (`beat`): held by `holder` (`<host>:<pid>:<random>`) until
    `expires_at`, since `taken_at` (migration 0034)."""

    __tablename__ = "process_leases"
    name: str = Field(primary_key=True, max_length=100)
    holder: str = Field(max_length=200)
    expires_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)
    taken_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)


def holder_name() -> str:
    """A name no other process has, and that says where it runs: `<host>:<pid>:<8 hex>`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ProcessLease:
    """The lease `name` for this process, `length_s` seconds long from each renewal."""

    def __init__(self, name: str, *, length_s: float) -> None:
        self.name = name
        self.length_s = length_s
        self.holder = holder_name()

    def held(self) -> bool:
        """Whether this process holds the lease now, for `length_s` more seconds: one round
        trip, which renews it, or takes it if free or expired (never waiting). A database
        error means not held (logged as `process_lease.unavailable`): the lease then runs out
        unless a later call renews it first."""
        params = {"name": self.name, "holder": self.holder, "lease_s": self.length_s}
        try:
            with session_scope() as session:
                return sql.one(session, TAKE_OR_RENEW, params) is not None
        except DatabaseError as exc:
            log.warning("process_lease.unavailable", lease=self.name, error=str(exc)[:200])
            return False

    def release(self) -> None:
        """Let the lease go now if this process holds it; a database error is logged and the
        lease then expires by itself."""
        try:
            with session_scope() as session:
                sql.execute(session, LET_GO, {"name": self.name, "holder": self.holder})
        except DatabaseError as exc:
            log.warning("process_lease.unreleased", lease=self.name, error=str(exc)[:200])
