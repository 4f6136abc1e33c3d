"""The migrations build the schema the tables declare (`models/tables.py`,
`models/memory/episodes.py`): every column, index and constraint, so a table changed without a
migration (or the reverse) fails here rather than in a user's upgraded database. The one kind of
object neither declares is left out: each embedding model's HNSW index, which memory builds when the
model is first used (`models.memory.retrieval.ensure_vector_index`). Comments are compared by
neither: the migrations write them (`models.migrate.AUTOGENERATE_PLUGINS`), and
tests/integration/test_sql_views.py checks that every column has one."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

from models.db import database_url
from models.migrate import AUTOGENERATE_PLUGINS
from ops.stack import LocalStack

pytestmark = pytest.mark.integration


def _built_by_memory(index: sa.Index) -> bool:
    """An embedding model's HNSW index (`models.memory.retrieval.VECTOR_INDEX`), by its access
    method."""
    return bool(index.dialect_options["postgresql"]["using"] == "hnsw")


def test_the_migrated_schema_is_the_declared_one(engine: LocalStack) -> None:
    migrated = sa.create_engine(database_url(), poolclass=sa.pool.NullPool)
    with migrated.connect() as connection:
        differences = compare_metadata(
            MigrationContext.configure(
                connection, opts={"autogenerate_plugins": AUTOGENERATE_PLUGINS}
            ),
            SQLModel.metadata,
        )
    migrated.dispose()
    kept = [d for d in differences if not (d[0] == "remove_index" and _built_by_memory(d[1]))]
    assert kept == []
