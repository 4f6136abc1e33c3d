"""Token calibrations: how each model's server counts prompts against tiktoken (issue 12, item 6).

Revision ID: 0022
Revises: 0021

For a model tiktoken does not know, our token counts are estimates (o200k counted 24% fewer
tokens than SmolLM2's own tokenizer), and a context filled to the budget was refused as too long.
Each call's reported prompt tokens now update a running mean of the ratio per model
(`models.engine.token_calibrations`), and the prompt budget is divided by it. A database upgraded to
this revision has no calibrations yet: the first calls of each model write them.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "token_calibrations",
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("model"),
    )


def downgrade() -> None:
    op.drop_table("token_calibrations")
