"""models/access/remote_access.py: what role `agentq` (other machines of `agentq up --listen`) may
do to each table (the rule; tests/acceptance/test_several_machines.py holds it on a server)."""

from __future__ import annotations

from sqlmodel import SQLModel

from models.access.remote_access import (
    NO_ACCESS_TABLES,
    READ_ONLY_TABLES,
    READ_WRITE,
    privileges_for,
)


def test_the_apis_credentials_are_out_of_reach() -> None:
    assert {"api_tokens", "console_sessions"} <= NO_ACCESS_TABLES
    for table in NO_ACCESS_TABLES:
        assert privileges_for(table, is_view=False) is None


def test_engine_tables_are_read_write_and_views_read_only() -> None:
    for table in ("runs", "steps", "step_attempts", "facts", "episodes", "webhook_deliveries"):
        assert privileges_for(table, is_view=False) == READ_WRITE
    assert privileges_for("run_progress", is_view=True) == "SELECT"
    for table in READ_ONLY_TABLES:
        assert privileges_for(table, is_view=False) == "SELECT"


def test_every_named_table_exists() -> None:
    """A table renamed away from these lists would be read-write for other machines."""
    tables = set(SQLModel.metadata.tables) | {"alembic_version"}
    assert tables >= NO_ACCESS_TABLES | READ_ONLY_TABLES
