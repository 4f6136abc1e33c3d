"""API tokens: create (the raw token is returned once), look up by hash, list, revoke.

Only the sha256 hex of a token is stored (see `models.tables.ApiToken` for why a fast hash is
right for 256-bit random tokens). A lookup hashes the presented token and finds the row by its
unique index: the comparison happens inside Postgres on hashes, so the time it takes says nothing
about how much of a guessed token was right. Functions take the session and never commit.

A token's name is who the audit trail says claimed and decided (`decided_by`), so two live
tokens never share one, in any mix of case (`rita` and `RITA` read as one person; migration
0010's partial unique index on `lower(name)` holds it against concurrent creates; a revoked
token's name is free again), and no token takes a name agentq records for its own decisions
(`models.review.escalations.RESERVED_REVIEWERS`); names follow
`models.review.escalations.REVIEWER_NAME_PATTERN`.

Revoking a token ends it everywhere at once, in one transaction: it authenticates nothing, its
review console sessions are deleted (`models.access.ui_sessions`) and the escalations it holds
claimed go back to the open queue, so no claim waits on a token no one can use (issue 9).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Literal, get_args

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.access import ui_sessions
from models.engine.runs import check_user_id
from models.engine.transitions import WITHDRAWN_BY
from models.errors import IllegalTransition, InvalidInput, NotFound
from models.review import reviews
from models.review.escalations import check_reviewer_name
from models.tables import ApiToken, Escalation, utcnow

TokenRole = Literal["submitter", "reviewer", "admin"]
TOKEN_PREFIX: Final = "aq_"
TOKEN_RANDOM_BYTES: Final = 32  # 256 bits from `secrets`: no one can guess or brute-force it
TOKEN_MAX_CHARS: Final = 200  # a longer presented token is refused before hashing
ROLES: Final = get_args(TokenRole)
LAST_USED_RESOLUTION_S: Final = 60  # `last_used_at` is written at most once a minute per token
LIVE_NAME_INDEX: Final = "ux_api_tokens_live_lower_name"  # lower(name) unique if live (0010)


def hash_token(raw: str) -> str:
    """sha256 hex of the token's UTF-8 bytes: what the `token_hash` column holds."""
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def create_token(
    session: Session, *, name: str, role: str, user_id: str | None = None
) -> tuple[ApiToken, str]:
    """Store a new token; returns its row and the raw token, which is never available again.

    A submitter token acts for exactly one agentq user (`user_id` required); reviewer and admin
    tokens act for none (`user_id` refused). `name` must not be a live token's already, nor
    reserved, and must fit `models.review.escalations.REVIEWER_NAME_PATTERN`; names are compared
    ignoring case. Raises `InvalidInput` naming the field.
    """
    _check(name=name, role=role, user_id=user_id)
    _check_name_free(session, name)
    raw = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_RANDOM_BYTES)
    row = ApiToken(name=name, role=role, user_id=user_id, token_hash=hash_token(raw))
    session.add(row)
    try:
        session.flush()
    except sa.exc.IntegrityError as exc:  # another create took the name since the check
        if LIVE_NAME_INDEX not in str(exc.orig):
            raise
        raise InvalidInput(_name_taken(name)) from exc
    return row, raw


def _check(*, name: str, role: str, user_id: str | None) -> None:
    check_reviewer_name(name, field="name")
    if role not in ROLES:
        raise InvalidInput(f"role: {role!r} is not a role; use one of {', '.join(ROLES)}")
    if role == "submitter" and (not user_id or not user_id.strip()):
        raise InvalidInput("user: a submitter token needs the agentq user it acts for")
    if role != "submitter" and user_id is not None:
        raise InvalidInput(f"user: only submitter tokens act for a user, not {role} tokens")
    if user_id is not None:
        check_user_id(user_id)


def _check_name_free(session: Session, name: str) -> None:
    taken = session.exec(
        select(ApiToken.id, ApiToken.name)
        .where(
            sa.func.lower(col(ApiToken.name)) == name.lower(), col(ApiToken.revoked_at).is_(None)
        )
        .limit(1)
    ).first()
    if taken is not None:
        raise InvalidInput(_name_taken(taken[1], taken[0]))


def _name_taken(name: str, token_id: int | None = None) -> str:
    which = f"token {token_id}" if token_id is not None else "a live token"
    return (
        f"name: {which} is named {name!r} already (names are compared ignoring case); pick "
        "another name, or revoke that token first (`agentq token revoke`)"
    )


def lookup(session: Session, raw: str) -> ApiToken | None:
    """The live (not revoked) token row whose hash matches `raw`, or None.

    Marks it used (`last_used_at`, at most once a minute so reads do not all write).
    """
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > TOKEN_MAX_CHARS:
        return None
    row = session.exec(
        select(ApiToken).where(
            ApiToken.token_hash == hash_token(raw), col(ApiToken.revoked_at).is_(None)
        )
    ).one_or_none()
    if row is not None:
        _touch(session, row)
    return row


def live_token_ids(session: Session, token_ids: Collection[int]) -> set[int]:
    """Which of `token_ids` are live (exist, not revoked): what an open event stream checks
    again every `AGENTQ_STREAM_RECHECK_S` (`api.stream_hub`). One statement for every stream of
    a process, on the primary key."""
    if not token_ids:
        return set()
    stmt = select(ApiToken.id).where(
        col(ApiToken.id).in_(sorted(token_ids)), col(ApiToken.revoked_at).is_(None)
    )
    return {token_id for token_id in session.exec(stmt) if token_id is not None}


def _touch(session: Session, row: ApiToken) -> None:
    now = utcnow()
    last = row.last_used_at
    if last is None or (now - last).total_seconds() >= LAST_USED_RESOLUTION_S:
        session.execute(
            sa.update(ApiToken).where(col(ApiToken.id) == row.id).values(last_used_at=now)
        )


def list_tokens(session: Session, *, include_revoked: bool = True) -> list[ApiToken]:
    """Every token (no hashes are secret, but none is shown either), oldest first."""
    stmt = select(ApiToken).order_by(col(ApiToken.id))
    if not include_revoked:
        stmt = stmt.where(col(ApiToken.revoked_at).is_(None))
    return list(session.exec(stmt))


@dataclass(frozen=True)
class Revocation:
    """What revoking a token ended: the token's row, how many console sessions were deleted,
    and the ids of the escalations whose claims went back to the open queue."""

    token: ApiToken
    sessions_ended: int
    claims_released: list[int]


def revoke_token(session: Session, token_id: int) -> Revocation:
    """Revoke the token `token_id`: it authenticates nothing from the commit on, its console
    sessions are deleted and its claims released (recorded as released by `agentq`).

    Raises `NotFound`, or `IllegalTransition` when it is revoked already (nothing changes).
    """
    row = session.scalars(
        sa.update(ApiToken)
        .where(col(ApiToken.id) == token_id, col(ApiToken.revoked_at).is_(None))
        .values(revoked_at=utcnow())
        .returning(ApiToken)
        .execution_options(populate_existing=True, synchronize_session=False)
    ).one_or_none()
    if row is None:
        if session.get(ApiToken, token_id) is None:
            raise NotFound(f"token {token_id} does not exist")
        raise IllegalTransition("api_tokens", token_id, "revoked", "live")
    ended = ui_sessions.end_for_token(session, token_id)
    return Revocation(row, ended, _release_claims(session, token_id))


def _release_claims(session: Session, token_id: int) -> list[int]:
    held = session.exec(
        select(Escalation.id).where(
            col(Escalation.status) == "claimed", col(Escalation.claimed_by_token_id) == token_id
        )
    ).all()
    released = []
    for escalation_id in held:
        try:
            reviews.release(
                session,
                escalation_id or 0,
                reviewer=WITHDRAWN_BY,
                force=True,
                reason=f"token {token_id} was revoked",
            )
        except IllegalTransition:  # decided (or released) since: nothing left to give back
            continue
        released.append(escalation_id or 0)
    return released
