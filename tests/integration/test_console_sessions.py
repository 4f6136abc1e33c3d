"""Console sessions on real Postgres (`models.access.ui_sessions`): a row per session, ended by
sign-out, by revoking its token, by idling and by age (issue 9, finding 8)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlmodel import col, select

from models.access import api_tokens, ui_sessions
from models.db import session_scope
from models.tables import ConsoleSession, utcnow
from ops.stack import LocalStack

pytestmark = pytest.mark.integration
LIFETIME = ui_sessions.Lifetime(idle_s=60, max_age_s=3600)


def _token(engine: LocalStack) -> int:
    with session_scope() as session:
        row, _ = api_tokens.create_token(
            session, name=f"sess-{uuid.uuid4().hex[:8]}", role="reviewer"
        )
        return row.id or 0


def _start(token_id: int) -> tuple[int, str]:
    with session_scope() as session:
        row, raw = ui_sessions.start(session, token_id=token_id, lifetime=LIFETIME)
        return row.id or 0, raw


def _load(raw: str, *, after_s: float = 0, touch: bool = True) -> int | None:
    with session_scope() as session:
        found = ui_sessions.load(
            session,
            raw,
            lifetime=LIFETIME,
            touch=touch,
            now=utcnow() + timedelta(seconds=after_s),
        )
        return None if found is None else found[1].id


def _rows(token_id: int) -> int:
    with session_scope() as session:
        stmt = select(ConsoleSession.id).where(col(ConsoleSession.token_id) == token_id)
        return len(session.exec(stmt).all())


def test_only_the_hash_of_the_id_is_stored_and_sign_out_deletes_the_row(
    engine: LocalStack,
) -> None:
    token_id = _token(engine)
    session_id, raw = _start(token_id)
    with session_scope() as session:
        row = session.get(ConsoleSession, session_id)
        assert row is not None and row.session_hash == ui_sessions.hash_session_id(raw)
        assert raw not in (row.session_hash, row.csrf_token)
    assert _load(raw) == token_id
    assert _load(raw + "x") is None
    with session_scope() as session:
        assert ui_sessions.end(session, raw)
    assert _load(raw) is None and _rows(token_id) == 0


def test_an_idle_session_is_refused_and_deleted_and_a_refresh_is_no_activity(
    engine: LocalStack,
) -> None:
    token_id = _token(engine)
    _, raw = _start(token_id)
    assert _load(raw, after_s=50) == token_id  # activity at +50 s
    assert _load(raw, after_s=100) == token_id  # 50 s after it: still inside the 60 s
    assert _load(raw, after_s=150, touch=False) == token_id  # a live page's refresh
    assert _load(raw, after_s=161) is None  # 61 s after the last activity
    assert _rows(token_id) == 0


def test_a_session_ends_at_its_maximum_age_however_busy(engine: LocalStack) -> None:
    token_id = _token(engine)
    _, raw = _start(token_id)
    with session_scope() as session:  # as if it had been used a second ago, an hour on
        session.execute(
            ConsoleSession.__table__.update()  # type: ignore[attr-defined]
            .where(ConsoleSession.__table__.c.token_id == token_id)  # type: ignore[attr-defined]
            .values(created_at=utcnow() - timedelta(seconds=3601))
        )
    assert _load(raw) is None


def test_signing_in_purges_expired_sessions(engine: LocalStack) -> None:
    token_id = _token(engine)
    _start(token_id)
    with session_scope() as session:
        gone = ui_sessions.purge_expired(
            session, lifetime=LIFETIME, now=utcnow() + timedelta(seconds=61)
        )
    assert gone >= 1 and _rows(token_id) == 0


def test_revoking_the_token_deletes_its_sessions(engine: LocalStack) -> None:
    token_id = _token(engine)
    _, first = _start(token_id)
    _, second = _start(token_id)
    with session_scope() as session:
        done = api_tokens.revoke_token(session, token_id)
    assert done.sessions_ended == 2 and _rows(token_id) == 0
    assert _load(first) is None and _load(second) is None


def test_flashes_are_shown_once(engine: LocalStack) -> None:
    session_id, _ = _start(_token(engine))
    with session_scope() as session:
        ui_sessions.add_flash(session, session_id, "one")
        ui_sessions.add_flash(session, session_id, "two", "bad")
    with session_scope() as session:
        shown = ui_sessions.pop_flashes(session, session_id)
    assert shown == [{"message": "one", "tone": "ok"}, {"message": "two", "tone": "bad"}]
    with session_scope() as session:
        assert ui_sessions.pop_flashes(session, session_id) == []
