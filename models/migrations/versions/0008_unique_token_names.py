"""Live API tokens have unique names: a partial unique index on `name` where `revoked_at` is null.

Revision ID: 0008
Revises: 0007

A token's name is who the audit trail says claimed and decided an escalation, so two live tokens
must not share one (`models.access.api_tokens.create_token` checks first and names the field; the
index holds against two creates at once). Revoked tokens keep their names and are left out, so a
name is free again once its token is revoked. Live tokens that share a name when this runs keep the
oldest one's name; each later one is renamed `<name> #<id>` (`agentq token list` shows it), so
the upgrade never fails and no token stops working.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LIVE_NAME_INDEX = "ux_api_tokens_live_name"  # models.access.api_tokens.LIVE_NAME_INDEX


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE api_tokens AS t "
            "SET name = left(t.name, 200 - length(' #' || t.id)) || ' #' || t.id "
            "WHERE t.revoked_at IS NULL AND EXISTS ("
            "  SELECT 1 FROM api_tokens AS older"
            "  WHERE older.name = t.name AND older.revoked_at IS NULL AND older.id < t.id)"
        )
    )
    op.create_index(
        LIVE_NAME_INDEX,
        "api_tokens",
        ["name"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(LIVE_NAME_INDEX, table_name="api_tokens")
