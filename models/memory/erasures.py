"""Erasure points: a forget is final, and `forget --runs` empties the user's runs.

Forgetting a user deletes their memory, but runs of that user still in flight would write it
again: deciding a waiting escalation wrote the user's facts and episodes back (issue 9, finding
4). So a forget records an erasure point, one row of `memory_erasures` per user (the newest
forget's time), and every memory write of a run (a fact, an episode, a turn, a rolling summary,
a `memory.recalled` event quoting memory: everything a forget deletes) passes `may_write`
first. A run created at or before its user's erasure point writes no memory; the drop is
recorded as the run event `memory.dropped`.

A write racing a forget cannot slip through. The forget takes the user's erasure lock
exclusively before it records the point and deletes, and holds it until it commits (`erase`);
each write takes the same lock shared, then reads the erasure point in a new statement (under
READ COMMITTED, Postgres' default, each statement sees what committed before it started), and
holds the lock until it commits. Either the write commits first, and the forget, waiting for the
lock, deletes what it wrote; or the forget commits first, and the write sees the new point.

`agentq memory forget --runs` also erases the content of the user's ended runs: that is the
engine's SQL on its own rows, `models.engine.erased_runs.erase_runs`.
"""

from __future__ import annotations

import json
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel

from models.engine import events
from models.tables import created_field

# erasure_lock: the user's erasure lock, exclusive (a forget), until the transaction ends.
ERASURE_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"
# erasure_lock_shared: the same lock shared (a memory write), until the transaction ends.
ERASURE_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(hashtextextended(:key, 0))"
# record_erasure: move the user's erasure point to now (never back); returns the point.
RECORD_ERASURE = (
    "INSERT INTO memory_erasures (user_id, erased_at) VALUES (:user_id, now()) "
    "ON CONFLICT (user_id) DO UPDATE "
    "SET erased_at = greatest(memory_erasures.erased_at, excluded.erased_at) "
    "RETURNING erased_at"
)
# erased_before: the user's erasure point, if run :run_id was created at or before it.
ERASED_BEFORE = (
    "SELECT e.erased_at FROM memory_erasures AS e, runs AS r "
    "WHERE e.user_id = :user_id AND r.id = :run_id AND r.created_at <= e.erased_at"
)


class MemoryErasure(SQLModel, table=True):
    """When `user_id`'s memory was last forgotten: runs created until then write no memory."""

    __tablename__ = "memory_erasures"
    user_id: str = Field(primary_key=True, max_length=200)
    erased_at: datetime = created_field()


def lock_key(user_id: str) -> str:
    """The key of `user_id`'s erasure lock (an advisory lock, `hashtextextended` of it)."""
    return json.dumps(["memory", user_id])


def erase(session: Session, *, user_id: str) -> datetime:
    """Take `user_id`'s erasure lock exclusively and move their erasure point to now; returns
    it. Call it before deleting the user's memory, in the same transaction (see the module
    docstring)."""
    session.execute(sa.text(ERASURE_LOCK), {"key": lock_key(user_id)})
    point: datetime = session.execute(sa.text(RECORD_ERASURE), {"user_id": user_id}).scalar_one()
    return point


def erased_at(session: Session, *, run_id: int, user_id: str) -> datetime | None:
    """`user_id`'s erasure point if run `run_id` was created at or before it, else None (no
    lock: a hint, for skipping work that `may_write` would drop anyway)."""
    found: datetime | None = session.execute(
        sa.text(ERASED_BEFORE), {"user_id": user_id, "run_id": run_id}
    ).scalar_one_or_none()
    return found


def hold_shared(session: Session, *, user_id: str) -> None:
    """Take `user_id`'s erasure lock shared until the transaction ends: a memory write that
    reads the erasure point itself, in a later statement (see the module docstring)."""
    session.execute(sa.text(ERASURE_LOCK_SHARED), {"key": lock_key(user_id)})


def may_write(session: Session, *, run_id: int, user_id: str, what: str) -> bool:
    """Whether run `run_id` may write `what` (a fact, episode, turn, summary) to `user_id`'s
    memory: False when the user was forgotten after the run was created, and then the event
    `memory.dropped` (`{"what", "erased_at"}`) is recorded. Holds the user's erasure lock
    shared until the transaction ends, so a forget waits for the write to commit."""
    hold_shared(session, user_id=user_id)
    point = erased_at(session, run_id=run_id, user_id=user_id)
    if point is None:
        return True
    events.record_event(session, run_id, "memory.dropped", what=what, erased_at=point.isoformat())
    return False
