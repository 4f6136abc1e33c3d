"""Covering indexes for recall's term statistics: `facts_terms`, `episodes_terms` (issue 13).

Revision ID: 0025
Revises: 0024

`models.memory.rerank` takes n, df and the mean length for BM25 from up to 5,000 of a tenant's rows
of one embedding model (`term_sample`). Read from the table, that is a heap page per row (a row
holds its 384-d vector, so few share a page): 981 pages for a tenant of 1,000 facts. From an
index on (user_id, embedding_model) that includes `tsv`, an index-only scan reads 20
(`ops/bench/memory_scale.py`, 100,000 facts of 100 users).
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

TABLES = ("facts", "episodes")


def upgrade() -> None:
    for table in TABLES:
        op.create_index(
            f"{table}_terms", table, ["user_id", "embedding_model"], postgresql_include=["tsv"]
        )


def downgrade() -> None:
    for table in TABLES:
        op.drop_index(f"{table}_terms", table_name=table)
