"""A run's conversation turns and rolling summaries: the raw material of working memory.

Every turn (the goal, each step's result, each model answer, each reviewer's words) is a row with
its token count, computed once when the row is written, so assembling a context sums stored
counts and never re-encodes the history. A summary row covers the turns up to
`covers_through_id`; it is rewritten as the conversation grows and never replaces pinned facts or
the ledger of done steps, which are rebuilt from their own rows on every call. Turns and summaries
are the user's memory too: a run whose user was forgotten after it was created writes neither
(`models.memory.erasures.may_write`).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col

from models import sql
from models.memory.erasures import may_write
from models.memory.tokens import count_tokens
from models.settings import get_settings
from models.tables import created_field

ROLES = ("user", "assistant", "tool")
TURNS = "SELECT * FROM messages WHERE run_id = :run_id ORDER BY id"
LATEST_SUMMARY = "SELECT * FROM run_summaries WHERE run_id = :run_id ORDER BY id DESC LIMIT 1"


class Message(SQLModel, table=True):
    """One turn of a run's conversation."""

    __tablename__ = "messages"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    user_id: str = Field(index=True, max_length=200)
    step_id: int | None = None
    role: str = Field(max_length=10)
    content: str
    token_count: int
    created_at: datetime = created_field()


class RunSummary(SQLModel, table=True):
    """The rolling summary of a run's older turns (one row per rewrite; the newest is current)."""

    __tablename__ = "run_summaries"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    user_id: str = Field(index=True, max_length=200)
    covers_through_id: int
    content: str
    token_count: int
    created_at: datetime = created_field()


def add_message(
    session: Session,
    *,
    run_id: int,
    user_id: str,
    role: str,
    content: str,
    step_id: int | None = None,
) -> Message | None:
    """Append one turn, counting its tokens once (tiktoken, the configured model's encoding);
    None, writing nothing, when `user_id` was forgotten after the run was created.

    Raises ValueError for a role other than user, assistant or tool.
    """
    if role not in ROLES:
        raise ValueError(f"message role {role!r}: allowed {', '.join(ROLES)}")
    if not may_write(session, run_id=run_id, user_id=user_id, what="turn"):
        return None
    message = Message(
        run_id=run_id,
        user_id=user_id,
        step_id=step_id,
        role=role,
        content=content,
        token_count=count_tokens(content, get_settings().model),
    )
    session.add(message)
    session.flush()
    return message


def turns(session: Session, run_id: int) -> list[Message]:
    """The run's turns, oldest first (read for every model call's context: named SQL)."""
    return sql.rows_of(session, Message, TURNS, {"run_id": run_id})


def latest_summary(session: Session, run_id: int) -> RunSummary | None:
    """The run's current rolling summary, if one was written."""
    found = sql.rows_of(session, RunSummary, LATEST_SUMMARY, {"run_id": run_id})
    return found[0] if found else None


def save_summary(
    session: Session,
    *,
    run_id: int,
    user_id: str,
    covers_through_id: int,
    content: str,
    token_count: int,
) -> RunSummary | None:
    """Write a new current summary covering the turns up to `covers_through_id`; None, writing
    nothing, when `user_id` was forgotten after the run was created."""
    if not may_write(session, run_id=run_id, user_id=user_id, what="summary"):
        return None
    summary = RunSummary(
        run_id=run_id,
        user_id=user_id,
        covers_through_id=covers_through_id,
        content=content,
        token_count=token_count,
    )
    session.add(summary)
    session.flush()
    return summary


def forget_messages(session: Session, *, user_id: str) -> dict[str, int]:
    """Delete every turn and summary of `user_id`; returns `{"messages": n, "summaries": n}`."""
    summaries = session.execute(sa.delete(RunSummary).where(col(RunSummary.user_id) == user_id))
    messages = session.execute(sa.delete(Message).where(col(Message.user_id) == user_id))
    return {
        "messages": int(getattr(messages, "rowcount", 0)),
        "summaries": int(getattr(summaries, "rowcount", 0)),
    }
