"""Console sessions are rows; claims record their token; token names are unique in any case.

Revision ID: 0010
Revises: 0009

- `console_sessions`: one row per signed-in review console session (issue 9, finding 8: a
  stateless cookie replayed after sign-out still worked). The cookie holds a random id; the row
  keeps its sha256, the token, the CSRF token and the times that expire it. Deleting a token's
  row (never done today) deletes its sessions.
- `escalations.claimed_by_token_id` and `decided_by_token_id`: the API token that claimed and
  decided (finding 9: a new token with a revoked token's name decided its claim). Claims held
  when this runs are given to the live token of their claimer's name, if there is one, so its
  holder can still decide them from the console; other claims keep NULL, the CLI's.
- Live token names are unique case-insensitively (`rita`, `Rita` and `RITA` were all live): the
  index on `lower(name)` replaces 0008's. Live tokens whose names clash in any case keep the
  oldest one's name; each later one is renamed `<name> #<id>` as 0008 did, so the upgrade never
  fails and no token stops working.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

OLD_NAME_INDEX = "ux_api_tokens_live_name"  # 0008's
LIVE_NAME_INDEX = "ux_api_tokens_live_lower_name"  # models.access.api_tokens.LIVE_NAME_INDEX


def upgrade() -> None:
    _console_sessions()
    op.add_column("escalations", sa.Column("claimed_by_token_id", sa.Integer(), nullable=True))
    op.add_column("escalations", sa.Column("decided_by_token_id", sa.Integer(), nullable=True))
    op.execute(
        sa.text(
            "UPDATE escalations AS e SET claimed_by_token_id = t.id FROM api_tokens AS t "
            "WHERE e.status = 'claimed' AND t.revoked_at IS NULL AND t.name = e.claimed_by"
        )
    )
    op.execute(
        sa.text(
            "UPDATE api_tokens AS t "
            "SET name = left(t.name, 200 - length(' #' || t.id)) || ' #' || t.id "
            "WHERE t.revoked_at IS NULL AND EXISTS ("
            "  SELECT 1 FROM api_tokens AS older WHERE lower(older.name) = lower(t.name)"
            "  AND older.revoked_at IS NULL AND older.id < t.id)"
        )
    )
    op.drop_index(OLD_NAME_INDEX, table_name="api_tokens")
    op.create_index(
        LIVE_NAME_INDEX,
        "api_tokens",
        [sa.text("lower(name)")],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def _console_sessions() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("session_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "token_id",
            sa.Integer(),
            sa.ForeignKey("api_tokens.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("csrf_token", sa.String(length=100), nullable=False),
        sa.Column("flashes", JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "last_seen_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.create_index(
        "ix_console_sessions_session_hash", "console_sessions", ["session_hash"], unique=True
    )
    op.create_index("ix_console_sessions_token_id", "console_sessions", ["token_id"])


def downgrade() -> None:
    op.drop_index(LIVE_NAME_INDEX, table_name="api_tokens")
    op.create_index(
        OLD_NAME_INDEX,
        "api_tokens",
        ["name"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )
    op.drop_column("escalations", "decided_by_token_id")
    op.drop_column("escalations", "claimed_by_token_id")
    op.drop_table("console_sessions")
