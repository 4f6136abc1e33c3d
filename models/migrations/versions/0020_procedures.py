"""Procedural memory: `procedures` and `procedure_versions` (issue 12, item 3).

Revision ID: 0020
Revises: 0019

A procedure (`models.memory.procedures`) is a how-to and/or a plan template, scoped to everyone, one
user or one tool, embedded for recall into planning and step context. `procedures` holds each
one's current version; `procedure_versions` every version, the current one included. Hand-written
like 0002: autogenerate renders neither generated columns nor pgvector's untyped `vector` well.
No HNSW index: procedures are few, and recall scans them exactly (`models.memory.procedure_recall`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

PROCEDURE_TSV = "to_tsvector('english', title || ' ' || when_to_use || ' ' || body)"
SCOPE_CHECK = (
    "(scope = 'everyone' AND user_id IS NULL AND tool IS NULL) OR "
    "(scope = 'user' AND user_id IS NOT NULL AND tool IS NULL) OR "
    "(scope = 'tool' AND tool IS NOT NULL AND user_id IS NULL)"
)


def _created(name: str) -> sa.Column[sa.DateTime]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _content() -> list[sa.Column[object]]:
    return [
        sa.Column("scope", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=True),
        sa.Column("tool", sa.String(length=100), nullable=True),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("when_to_use", sa.String(), nullable=False),
        sa.Column("body", sa.String(), nullable=False),
        sa.Column("plan_template", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "procedures",
        sa.Column("id", sa.Integer(), nullable=False),
        *_content(),
        sa.Column("embedding", VECTOR(), nullable=False),
        sa.Column("embedding_model", sa.String(length=200), nullable=False),
        sa.Column("embedding_dim", sa.Integer(), nullable=False),
        sa.Column("source_run_id", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("updated_by", sa.String(length=200), nullable=False),
        _created("created_at"),
        _created("updated_at"),
        sa.Column("tsv", postgresql.TSVECTOR(), sa.Computed(PROCEDURE_TSV, persisted=True)),
        sa.CheckConstraint(SCOPE_CHECK, name="procedures_scope"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "procedures_user",
        "procedures",
        ["user_id"],
        postgresql_where=sa.text("user_id IS NOT NULL"),
    )
    op.create_index("procedures_tsv", "procedures", ["tsv"], postgresql_using="gin")
    op.create_table(
        "procedure_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("procedure_id", sa.Integer(), nullable=False),
        *_content(),
        sa.Column("written_by", sa.String(length=200), nullable=False),
        _created("written_at"),
        sa.ForeignKeyConstraint(["procedure_id"], ["procedures.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("procedure_id", "version"),
    )
    op.create_index("ix_procedure_versions_procedure_id", "procedure_versions", ["procedure_id"])


def downgrade() -> None:
    op.drop_table("procedure_versions")
    op.drop_table("procedures")
