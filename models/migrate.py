"""Database migrations (Alembic): an explicit step (`agentq migrate`), never run on worker start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from models.db import database_url, normalize_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Autogenerate's comparisons, comments aside: the comments on tables, views and columns are the
# database's documentation, written by the migrations (0027 on), not declared on the models; so
# autogenerate proposes no change to them, and the schema test compares the rest.
AUTOGENERATE_PLUGINS = ["alembic.autogenerate.*", "~alembic.autogenerate.comments"]


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for `url` (default: the configured database)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Alembic's config interpolates `%`; a percent-encoded socket path must survive it.
    config.set_main_option(
        "sqlalchemy.url", normalize_url(url or database_url()).replace("%", "%%")
    )
    return config


def upgrade(url: str | None = None) -> None:
    """Apply every pending migration to the database at `url`."""
    command.upgrade(alembic_config(url), "head")
