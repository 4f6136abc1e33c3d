"""Alembic environment: migrations run against the URL given in the Alembic config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

# Every module that defines tables, so they are on SQLModel.metadata for autogenerate.
import models.approvals.calls
import models.engine.children
import models.engine.fair_queue
import models.engine.forks
import models.engine.idempotency
import models.engine.stack_limits
import models.engine.storage
import models.memory.episodes
import models.memory.facts
import models.memory.messages
import models.memory.procedure_outcomes
import models.memory.procedures
import models.operations.webhook_tables
import models.plans.plan_checks
import models.process_leases
import models.schedules.schedules  # goals on a schedule (issue 32, item 2)
import models.tables  # noqa: F401
from models.db import driver_options
from models.migrate import AUTOGENERATE_PLUGINS

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    """Run every pending migration in one transaction."""
    url = config.get_main_option("sqlalchemy.url") or ""
    engine = create_engine(url, connect_args=driver_options())
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            autogenerate_plugins=AUTOGENERATE_PLUGINS,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
