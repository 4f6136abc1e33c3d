"""Token names: unique among live tokens (checked, and held by migration 0008's index), never one
agentq records for itself; and what `agentq token create` says it made."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import make_url

from models.access import api_tokens
from models.db import database_url, get_engine, session_scope
from models.errors import DatabaseError, InvalidInput
from models.migrate import alembic_config
from ops.stack import LocalStack
from ops.token_commands import created_line

pytestmark = pytest.mark.integration


def test_a_live_tokens_name_is_refused_until_it_is_revoked(engine: LocalStack) -> None:
    name = f"temp-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        first, _ = api_tokens.create_token(session, name=name, role="admin")
    taken = rf"^name: token {first.id} is named '{name}' already"
    with pytest.raises(InvalidInput, match=taken), session_scope() as session:
        api_tokens.create_token(session, name=name, role="reviewer")
    with session_scope() as session:
        api_tokens.revoke_token(session, first.id or 0)
        again, _ = api_tokens.create_token(session, name=name, role="reviewer")
    assert again.id != first.id


def test_the_database_holds_live_names_unique_without_the_check(engine: LocalStack) -> None:
    name = f"raced-{uuid.uuid4().hex[:8]}"
    insert = sa.text(
        "INSERT INTO api_tokens (name, role, token_hash) VALUES (:name, 'admin', :hash)"
    )
    with session_scope() as session:
        session.execute(insert, {"name": name, "hash": uuid.uuid4().hex})
    with pytest.raises(DatabaseError, match=api_tokens.LIVE_NAME_INDEX), session_scope() as session:
        session.execute(insert, {"name": name, "hash": uuid.uuid4().hex})


def test_a_create_that_loses_the_race_for_a_name_is_refused_naming_the_field(
    engine: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"raced-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        api_tokens.create_token(session, name=name, role="admin")
    # as if the other create committed between this one's check and its insert
    monkeypatch.setattr(api_tokens, "_check_name_free", lambda _session, _name: None)
    taken = rf"^name: a live token is named '{name}' already"
    with pytest.raises(InvalidInput, match=taken), session_scope() as session:
        api_tokens.create_token(session, name=name, role="admin")


@pytest.mark.parametrize("name", ["agentq", "deadline", "DeadLine"])
def test_the_names_agentq_records_for_itself_are_refused(name: str) -> None:
    nothing: object = None  # no session: the check comes first
    with pytest.raises(InvalidInput, match=r"^name: .* is reserved .*agentq, deadline"):
        api_tokens.create_token(nothing, name=name, role="reviewer")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["rita ", " rita", "rita\u200b", "rita\x7f", "nul\x01ctl", ""])
def test_names_that_would_look_like_another_are_refused(name: str) -> None:
    nothing: object = None  # no session: the check comes first
    with pytest.raises(InvalidInput, match=r"^name: .* is not a reviewer name"):
        api_tokens.create_token(nothing, name=name, role="reviewer")  # type: ignore[arg-type]


def test_create_says_the_tokens_name_and_whom_a_submitter_acts_for() -> None:
    line = created_line(7, name="bobsub", role="submitter", user="bob")
    assert line.startswith("token 7 created: name 'bobsub', role submitter, acting for user 'bob'")
    assert "acting for" not in created_line(8, name="rita", role="reviewer", user=None)


@pytest.fixture
def scratch_database(engine: LocalStack) -> Iterator[str]:
    """The URL of a new, empty database on the engine's Postgres (dropped afterwards)."""
    name = f"migrations_{uuid.uuid4().hex[:8]}"
    server = get_engine().execution_options(isolation_level="AUTOCOMMIT")
    with server.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = make_url(database_url()).set(database=name).render_as_string(hide_password=False)
    yield url
    get_engine(url).dispose()
    with server.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))


def test_the_upgrade_renames_later_duplicates_and_revoked_tokens_keep_their_names(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0007")
    rows = [("temp", None), ("temp", None), ("temp", "now()"), ("temp", None), ("solo", None)]
    with get_engine(scratch_database).begin() as connection:
        for i, (name, revoked) in enumerate(rows):
            connection.execute(
                sa.text(
                    "INSERT INTO api_tokens (name, role, token_hash, revoked_at) "
                    f"VALUES (:name, 'admin', :hash, {revoked or 'NULL'})"
                ),
                {"name": name, "hash": f"h{i}"},
            )
    command.upgrade(config, "0008")
    with get_engine(scratch_database).connect() as connection:
        names = connection.execute(sa.text("SELECT id, name FROM api_tokens ORDER BY id")).all()
    assert [n for _, n in names] == ["temp", "temp #2", "temp", "temp #4", "solo"]
    command.downgrade(config, "0007")
    command.upgrade(config, "0008")
