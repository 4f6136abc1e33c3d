"""memory: facts (semantic) and episodes (episodic)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 13:30:00.000000

Hand-written: autogenerate renders neither generated columns nor pgvector's untyped `vector`
well. `embedding` has no fixed dimension so several embedding models can share a table; each
model's HNSW index is a partial expression index created by
`models.memory.facts.ensure_vector_indexes` (pgvector README, "Indexing vectors with different
dimensions"), not here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

FACT_TSV = "to_tsvector('english', subject || ' ' || coalesce(attribute, '') || ' ' || text)"
EPISODE_TSV = "to_tsvector('english', summary)"
CURRENT = sa.text("valid_to IS NULL")


def _created(name: str) -> sa.Column[sa.DateTime]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _embedding() -> list[sa.Column[object]]:
    return [
        sa.Column("embedding", VECTOR(), nullable=False),
        sa.Column("embedding_model", sa.String(length=200), nullable=False),
        sa.Column("embedding_dim", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "facts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("attribute", sa.String(length=200), nullable=True),
        sa.Column("category", sa.String(length=40), nullable=False),
        sa.Column("text", sa.String(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        *_embedding(),
        _created("valid_from"),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("superseded_by", sa.Integer(), nullable=True),
        sa.Column("source_run_id", sa.Integer(), nullable=True),
        sa.Column("source_step_id", sa.Integer(), nullable=True),
        _created("created_at"),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tsv", postgresql.TSVECTOR(), sa.Computed(FACT_TSV, persisted=True)),
        sa.ForeignKeyConstraint(["superseded_by"], ["facts.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_facts_user_id", "facts", ["user_id"])
    op.create_index(
        "facts_current_content",
        "facts",
        ["user_id", "content_hash"],
        unique=True,
        postgresql_where=CURRENT,
    )
    op.create_index(
        "facts_current_attribute",
        "facts",
        ["user_id", "subject", "attribute"],
        postgresql_where=CURRENT,
    )
    op.create_index("facts_expiring", "facts", ["expires_at"], postgresql_where=CURRENT)
    op.create_index("facts_tsv", "facts", ["tsv"], postgresql_using="gin")

    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("goal", sa.String(), nullable=False),
        sa.Column("plan", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("failures", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("final_answer", sa.String(), nullable=False),
        sa.Column("summary", sa.String(), nullable=False),
        *_embedding(),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("tsv", postgresql.TSVECTOR(), sa.Computed(EPISODE_TSV, persisted=True)),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )
    op.create_index("ix_episodes_user_id", "episodes", ["user_id"])
    op.create_index("episodes_tsv", "episodes", ["tsv"], postgresql_using="gin")


def downgrade() -> None:
    # Dropping the tables drops every index on them, the per-model HNSW indexes included.
    op.drop_table("episodes")
    op.drop_table("facts")
