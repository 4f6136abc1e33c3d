"""Claims belong to the token that made them, not to its name; token names are unique in any
case; revoking a token gives its claims back (issue 9, finding 9)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from alembic import command
from sqlmodel import col

from models.access import api_tokens
from models.db import get_engine, session_scope
from models.engine import run_transitions, transitions
from models.errors import ClaimedByAnother, DatabaseError, InvalidInput
from models.migrate import alembic_config
from models.review import reviews
from models.tables import Escalation, RunEvent
from ops.stack import LocalStack
from tests.api.test_tokens import scratch_database

pytestmark = pytest.mark.integration
NOOP = {"name": "a", "kind": "tool", "tool": "noop"}
__all__ = ["scratch_database"]


def _escalation(make_run: Callable[..., int]) -> int:
    run_id = make_run([NOOP], start=False)
    with session_scope() as session:
        esc = run_transitions.escalate(session, run_id, expected="running", reason="r")
        assert esc is not None
        return esc.id or 0


def _esc(escalation_id: int) -> Escalation:
    with session_scope() as session:
        esc = session.get(Escalation, escalation_id)
        assert esc is not None
        return esc


def _tokens_named(name: str, count: int) -> list[int]:
    """`count` reviewer tokens that all were named `name`: each but the last revoked (by SQL,
    leaving their claims in place, as if revoked before claims were released)."""
    ids = []
    for n in range(count):
        with session_scope() as session:
            row, _ = api_tokens.create_token(session, name=name, role="reviewer")
            ids.append(row.id or 0)
            if n < count - 1:
                session.execute(
                    sa.text("UPDATE api_tokens SET revoked_at = now() WHERE id = :id"),
                    {"id": row.id},
                )
    return ids


def test_a_new_token_with_the_claimers_name_cannot_decide_or_release_the_claim(
    make_run: Callable[..., int],
) -> None:
    name = f"claimer-{uuid.uuid4().hex[:6]}"
    old, new = _tokens_named(name, 2)
    esc_id = _escalation(make_run)
    with session_scope() as session:
        transitions.claim_escalation(session, esc_id, reviewer=name, token_id=old)
    refused = rf"claimed by {name} through API token {old}; only that token can decide it"
    with pytest.raises(ClaimedByAnother, match=refused), session_scope() as session:
        reviews.reject(session, esc_id, reviewer=name, comment="mine now", token_id=new)
    with pytest.raises(ClaimedByAnother, match="only that token"), session_scope() as session:
        reviews.release(session, esc_id, reviewer=name, token_id=new)
    with pytest.raises(ClaimedByAnother, match="only that token"), session_scope() as session:
        reviews.reject(session, esc_id, reviewer=name, comment="cli")  # the CLI, same name
    esc = _esc(esc_id)
    assert (esc.status, esc.claimed_by_token_id, esc.decision) == ("claimed", old, None)
    with session_scope() as session:
        reviews.reject(session, esc_id, reviewer=name, comment="mine", token_id=old)
    esc = _esc(esc_id)
    assert (esc.status, esc.decided_by, esc.decided_by_token_id) == ("decided", name, old)


def test_the_cli_keeps_its_own_claims_and_no_token_takes_them(
    make_run: Callable[..., int],
) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    (token,) = _tokens_named(name, 1)
    esc_id = _escalation(make_run)
    with session_scope() as session:
        transitions.claim_escalation(session, esc_id, reviewer=name)  # the CLI: no token
    with pytest.raises(ClaimedByAnother, match="through the CLI"), session_scope() as session:
        reviews.release(session, esc_id, reviewer=name, token_id=token)
    with session_scope() as session:
        reviews.release(session, esc_id, reviewer=name)
    assert _esc(esc_id).status == "open"


def test_revoking_a_token_releases_its_claims_and_says_why(
    make_run: Callable[..., int],
) -> None:
    (token,) = _tokens_named(f"leaver-{uuid.uuid4().hex[:6]}", 1)
    esc_id = _escalation(make_run)
    with session_scope() as session:
        transitions.claim_escalation(session, esc_id, reviewer="leaver", token_id=token)
    with session_scope() as session:
        done = api_tokens.revoke_token(session, token)
    assert done.claims_released == [esc_id]
    esc = _esc(esc_id)
    assert (esc.status, esc.claimed_by, esc.claimed_by_token_id) == ("open", None, None)
    with session_scope() as session:
        event = session.scalars(
            sa.select(RunEvent)
            .where(col(RunEvent.run_id) == esc.run_id, col(RunEvent.kind) == "escalation.released")
            .order_by(col(RunEvent.id).desc())
        ).first()
    assert event is not None
    assert event.detail["reason"] == f"token {token} was revoked"
    assert event.detail["reviewer"] == "agentq" and event.detail["forced"] is True


@pytest.mark.parametrize("variant", ["Rita", "RITA", "rItA"])
def test_token_names_differing_only_in_case_are_refused(engine: LocalStack, variant: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    with session_scope() as session:
        first, _ = api_tokens.create_token(session, name=f"rita-{suffix}", role="reviewer")
    taken = rf"^name: token {first.id} is named 'rita-{suffix}' already \(names are compared"
    with pytest.raises(InvalidInput, match=taken), session_scope() as session:
        api_tokens.create_token(session, name=f"{variant}-{suffix}", role="reviewer")


def test_the_database_holds_names_unique_in_any_case(engine: LocalStack) -> None:
    name = f"Cased-{uuid.uuid4().hex[:8]}"
    insert = sa.text(
        "INSERT INTO api_tokens (name, role, token_hash) VALUES (:name, 'admin', :hash)"
    )
    with session_scope() as session:
        session.execute(insert, {"name": name, "hash": uuid.uuid4().hex})
    with pytest.raises(DatabaseError, match=api_tokens.LIVE_NAME_INDEX), session_scope() as session:
        session.execute(insert, {"name": name.upper(), "hash": uuid.uuid4().hex})


def test_the_upgrade_renames_later_case_variants(scratch_database: str) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0009")
    rows = [("rita", None), ("Rita", None), ("RITA", "now()"), ("RITA", None), ("solo", None)]
    with get_engine(scratch_database).begin() as connection:
        for i, (name, revoked) in enumerate(rows):
            connection.execute(
                sa.text(
                    "INSERT INTO api_tokens (name, role, token_hash, revoked_at) "
                    f"VALUES (:name, 'admin', :hash, {revoked or 'NULL'})"
                ),
                {"name": name, "hash": f"h{i}"},
            )
    command.upgrade(config, "0010")
    with get_engine(scratch_database).connect() as connection:
        names = connection.execute(sa.text("SELECT id, name FROM api_tokens ORDER BY id")).all()
    assert [n for _, n in names] == ["rita", "Rita #2", "RITA", "RITA #4", "solo"]
    command.downgrade(config, "0009")
    command.upgrade(config, "0010")
