"""Review console sessions: one row each, so signing out, revoking the token or idling ends them.

The browser's cookie holds only a random session id (32 bytes from `secrets`, 256 bits); the row
keeps its sha256, as `api_tokens` keeps a token's, so a copy of the table signs no one in. A
session is live while its row exists, its token is not revoked, it has seen a request in the
last `idle_s` (`AGENTQ_UI_SESSION_IDLE_S`) and it is younger than `max_age_s`
(`AGENTQ_UI_SESSION_MAX_AGE_S`). A cookie replayed after sign-out finds no row (issue 9,
finding 8); the OWASP Session Management Cheat Sheet ("Session Expiration", "Manual Session
Expiration") is the source of the rules. Expired rows are deleted when they are presented and
whenever someone signs in (`purge_expired`), so no beat task is needed. Functions take the
session and never commit.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Session, col, select

from models.tables import ApiToken, ConsoleSession, utcnow

SESSION_RANDOM_BYTES: Final = 32  # 256 bits: the cookie cannot be guessed
CSRF_RANDOM_BYTES: Final = 32
SESSION_ID_MAX_CHARS: Final = 100  # a longer cookie is no session, refused before hashing


@dataclass(frozen=True)
class Lifetime:
    """How long a session lasts: `idle_s` without a request, `max_age_s` in all (seconds)."""

    idle_s: float
    max_age_s: float

    def expired(self, row: ConsoleSession, now: datetime) -> bool:
        """Whether `row` has idled out or outlived its maximum age at `now`."""
        idle = now - row.last_seen_at > timedelta(seconds=self.idle_s)
        return idle or now - row.created_at > timedelta(seconds=self.max_age_s)


def hash_session_id(raw: str) -> str:
    """sha256 hex of the session id's UTF-8 bytes: what `session_hash` holds."""
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def start(
    session: Session, *, token_id: int, lifetime: Lifetime, now: datetime | None = None
) -> tuple[ConsoleSession, str]:
    """A new session for the token `token_id`, with a fresh CSRF token; returns the row and the
    raw session id (for the cookie; never stored). Deletes every expired session first."""
    now = now or utcnow()
    purge_expired(session, lifetime=lifetime, now=now)
    raw = secrets.token_urlsafe(SESSION_RANDOM_BYTES)
    row = ConsoleSession(
        session_hash=hash_session_id(raw),
        token_id=token_id,
        csrf_token=secrets.token_urlsafe(CSRF_RANDOM_BYTES),
        created_at=now,
        last_seen_at=now,
    )
    session.add(row)
    session.flush()
    return row, raw


def load(
    session: Session,
    raw: str,
    *,
    lifetime: Lifetime,
    touch: bool = True,
    now: datetime | None = None,
) -> tuple[ConsoleSession, ApiToken] | None:
    """The live session whose id is `raw`, with its token; None when there is none, its token
    is revoked or it has expired (an expired or orphaned row is deleted). With `touch` the
    request counts as activity (`last_seen_at = now`)."""
    if not raw or len(raw) > SESSION_ID_MAX_CHARS:
        return None
    now = now or utcnow()
    found = session.exec(
        select(ConsoleSession, ApiToken)
        .join(ApiToken, col(ApiToken.id) == col(ConsoleSession.token_id))
        .where(col(ConsoleSession.session_hash) == hash_session_id(raw))
    ).one_or_none()
    if found is None:
        return None
    row, token = found
    if token.revoked_at is not None or lifetime.expired(row, now):
        session.execute(sa.delete(ConsoleSession).where(col(ConsoleSession.id) == row.id))
        return None
    if touch:
        row.last_seen_at = now
        session.add(row)
    return row, token


def live_session_ids(
    session: Session, session_ids: Collection[int], *, lifetime: Lifetime, now: datetime
) -> set[int]:
    """Which of the sessions `session_ids` are live at `now`: the row exists, its token is not
    revoked, and it has neither idled out nor outlived its maximum age (`Lifetime.expired`).
    What the console's open streams check again (`api.stream_hub`); it touches nothing and
    deletes nothing (the next request presenting an expired session deletes it)."""
    if not session_ids:
        return set()
    stmt = (
        select(ConsoleSession.id)
        .join(ApiToken, col(ApiToken.id) == col(ConsoleSession.token_id))
        .where(
            col(ConsoleSession.id).in_(sorted(session_ids)),
            col(ApiToken.revoked_at).is_(None),
            col(ConsoleSession.last_seen_at) >= now - timedelta(seconds=lifetime.idle_s),
            col(ConsoleSession.created_at) >= now - timedelta(seconds=lifetime.max_age_s),
        )
    )
    return {session_id for session_id in session.exec(stmt) if session_id is not None}


def end(session: Session, raw: str) -> bool:
    """Delete the session whose id is `raw` (sign-out); whether there was one."""
    gone = session.execute(
        sa.delete(ConsoleSession)
        .where(col(ConsoleSession.session_hash) == hash_session_id(raw))
        .returning(col(ConsoleSession.id))
    )
    return gone.first() is not None


def end_for_token(session: Session, token_id: int) -> int:
    """Delete every session of the token `token_id` (it was revoked); how many there were."""
    gone = session.execute(
        sa.delete(ConsoleSession)
        .where(col(ConsoleSession.token_id) == token_id)
        .returning(col(ConsoleSession.id))
    )
    return len(gone.all())


def purge_expired(session: Session, *, lifetime: Lifetime, now: datetime | None = None) -> int:
    """Delete every session that has idled out or outlived its maximum age; how many."""
    now = now or utcnow()
    gone = session.execute(
        sa.delete(ConsoleSession)
        .where(
            sa.or_(
                col(ConsoleSession.last_seen_at) < now - timedelta(seconds=lifetime.idle_s),
                col(ConsoleSession.created_at) < now - timedelta(seconds=lifetime.max_age_s),
            )
        )
        .returning(col(ConsoleSession.id))
    )
    return len(gone.all())


def add_flash(session: Session, session_id: int, message: str, tone: str = "ok") -> None:
    """Queue `message` (`tone`: ok, bad, ...) for the next page the session `session_id`
    renders."""
    queued = sa.cast([{"message": message, "tone": tone}], JSONB)
    session.execute(
        sa.update(ConsoleSession)
        .where(col(ConsoleSession.id) == session_id)
        .values(flashes=col(ConsoleSession.flashes).op("||")(queued))
    )


def pop_flashes(session: Session, session_id: int) -> list[dict[str, Any]]:
    """The messages queued for the session `session_id`, oldest first, removed from it (each
    is shown once)."""
    queued = session.scalar(
        select(col(ConsoleSession.flashes))
        .where(col(ConsoleSession.id) == session_id)
        .with_for_update()
    )
    if queued:
        session.execute(
            sa.update(ConsoleSession).where(col(ConsoleSession.id) == session_id).values(flashes=[])
        )
    return list(queued or [])
