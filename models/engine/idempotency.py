"""`Idempotency-Key` on submit: a client that sends a submit again (a retry after a timeout)
with the key it sent the first time gets the run the first one made, not a second run.

Keys belong to who submits (`scope`: an API token, `token:<id>`; the CLI, `user:<user>`), so
one caller's key never answers another's request. The first request with a key inserts the
key's row first thing in its submit transaction (`claim`); `(scope, key)` is the primary key, so
a concurrent request with the same key waits on that row until the first commits or rolls back,
then finds it: one run, never two (a unique constraint, not a check-then-insert). A key found:

- with the same request (`fingerprint`: the SHA-256 of its canonical JSON) within
  `AGENTQ_IDEMPOTENCY_WINDOW_S` of the first: the first's answer, its run and the response it
  was given (`Replay`);
- with another request: `IdempotencyKeyReused` (HTTP 409), nothing written;
- past the window: taken over by this request, a new run.

A refused submit (bad input, a quota) rolls back with its key: nothing is kept, and the same
request is judged again when retried. This is Stripe's model (https://docs.stripe.com/api/
idempotent_requests: keys of up to 255 characters, kept 24 hours, a result saved once the
endpoint ran, parameters compared); the IETF draft `draft-ietf-httpapi-idempotency-key-header`
names the header. Rows go with their run (`ON DELETE CASCADE`), so retention purges them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, Session, SQLModel

from models import sql
from models.bounds import IDEMPOTENCY_KEY_MAX_CHARS
from models.errors import IdempotencyKeyReused, InvalidInput
from models.patterns import IDEMPOTENCY_KEY_PATTERN
from models.tables import created_field

KEY_MAX_CHARS: Final = IDEMPOTENCY_KEY_MAX_CHARS


class IdempotencyKey(SQLModel, table=True):
    """A submit's `Idempotency-Key` (`models.engine.idempotency`), by who sent it (`scope`): the
    SHA-256 of the request it came with, the run it made, the response that run was answered
    with (`response`, without `notified`, which is written once the messages were sent), and
    when the key stops answering (`expires_at`). Migration 0031."""

    __tablename__ = "idempotency_keys"
    scope: str = Field(primary_key=True, max_length=210)  # token:<id> | user:<user id>
    key: str = Field(primary_key=True, max_length=KEY_MAX_CHARS)
    request_sha256: str = Field(max_length=64)
    run_id: int | None = Field(
        default=None, foreign_key="runs.id", index=True, ondelete="CASCADE", nullable=True
    )
    response: dict[str, Any] | None = Field(default=None, sa_type=JSONB, nullable=True)
    notified: bool | None = None
    created_at: datetime = created_field()
    expires_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)


@dataclass(frozen=True)
class Key:
    """An idempotency key as its caller gave it (`field` names where: the header, the CLI's
    option), and whose it is (`scope`). Raises `InvalidInput` naming `field` for a key that
    breaks `IDEMPOTENCY_KEY_PATTERN`."""

    scope: str
    key: str
    field: str = "Idempotency-Key"

    def __post_init__(self) -> None:
        if not re.fullmatch(IDEMPOTENCY_KEY_PATTERN, self.key):
            raise InvalidInput(
                f"{self.field}: 1 to {KEY_MAX_CHARS} visible ASCII characters (no spaces; a "
                f"UUID is a good key), got {len(self.key)} characters"
            )


@dataclass(frozen=True)
class Replay:
    """The first answer to a key: its run, the response stored with it, and whether its
    messages were sent (None: not known, the reconciler sends them), with when it was made."""

    run_id: int
    response: dict[str, Any]
    notified: bool | None
    created_at: datetime


# claim: insert the key for :scope, or take over one whose window ended; returns a row only
# when this request now holds the key (a concurrent insert of the same key waits for ours).
CLAIM: Final = """
INSERT INTO idempotency_keys (scope, key, request_sha256, created_at, expires_at)
VALUES (:scope, :key, :sha256, now(), now() + make_interval(secs => :window_s))
ON CONFLICT (scope, key) DO UPDATE SET request_sha256 = EXCLUDED.request_sha256,
    run_id = NULL, response = NULL, notified = NULL, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at
WHERE idempotency_keys.expires_at <= now()
RETURNING key"""
# held: the key as another request made it (committed: the claim waited for it).
HELD: Final = """
SELECT request_sha256, run_id, response, notified, created_at FROM idempotency_keys
WHERE scope = :scope AND key = :key"""
# answered: the run the key made and the response it was answered with.
ANSWERED: Final = """
UPDATE idempotency_keys SET run_id = :run_id, response = CAST(:response AS jsonb)
WHERE scope = :scope AND key = :key"""
# sent: whether the first answer's messages were sent (after its commit).
SENT: Final = "UPDATE idempotency_keys SET notified = :notified WHERE scope = :scope AND key = :key"


def fingerprint(request: dict[str, Any]) -> str:
    """The SHA-256 (hex) of `request`'s canonical JSON (keys sorted, no spaces): two requests
    that say the same in another order or spacing have the same one."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def claim(session: Session, key: Key, *, sha256: str, window_s: float) -> Replay | None:
    """Hold `key` for this request (SHA-256 `sha256`) in the caller's transaction; None when it
    does (go on, then `answered`), or the first answer (`Replay`) when the key was made by the
    same request within its window. Raises `IdempotencyKeyReused` when another request made it."""
    params = {"scope": key.scope, "key": key.key, "sha256": sha256, "window_s": window_s}
    if sql.one(session, CLAIM, params) is not None:
        return None
    held = sql.one(session, HELD, {"scope": key.scope, "key": key.key})
    if held.request_sha256 != sha256:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key.key!r} was used at {held.created_at:%Y-%m-%d %H:%M:%S %Z} "
            f"for run {held.run_id} with another request; send a new key with a new request "
            f"(a key answers the same request for {_hours(window_s)})"
        )
    return Replay(held.run_id, held.response or {}, held.notified, held.created_at)


def answered(session: Session, key: Key, *, run_id: int, response: dict[str, Any]) -> None:
    """Keep the run `key` made and the `response` it was answered with (JSON), in the
    transaction that made the run."""
    params = {"scope": key.scope, "key": key.key, "run_id": run_id}
    sql.execute(session, ANSWERED, params | {"response": json.dumps(response)})


def sent(session: Session, key: Key, *, notified: bool) -> None:
    """Record whether the first answer's messages were sent (after its commit)."""
    sql.execute(session, SENT, {"scope": key.scope, "key": key.key, "notified": notified})


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"
