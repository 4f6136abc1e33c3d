"""Who wrote each procedure version, by role: `procedures.written_as`, `procedure_versions.
written_as` (issue 27, item 1).

Revision ID: 0033
Revises: 0032

`written_by` names the writer (`cli:<name>`, `token:<name>`); `written_as` is the role it wrote
with (`submitter`, `reviewer`, `admin`), so a plan that adopts a template knows whose rights its
steps act with (`models.review.authorship`). Rows written before this migration get the role of
their writer where it is known: `cli:` writers and the demo's seeder (`demo`) are admins,
`token:<name>` writers have their token's role (when every token of that name had one role).
Otherwise (a deleted token) the role stays NULL, and such a version acts for a reviewer, the
safe side, until someone edits it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

COMMENT = (
    "Role the writer of this version wrote with: submitter, reviewer or admin; NULL unknown "
    "(acts for a reviewer: models/review/authorship.py)."
)
CURRENT = "Role the writer of the current version wrote with (procedure_versions.written_as)."
# backfill_written_as: the role of each version's writer, where it is known.
BACKFILL = """
UPDATE {table} AS p SET written_as = CASE
    WHEN p.{by} LIKE 'cli:%' OR p.{by} = 'demo' THEN 'admin'
    ELSE (SELECT CASE WHEN count(DISTINCT t.role) = 1 THEN min(t.role) END
          FROM api_tokens t WHERE 'token:' || t.name = p.{by})
END"""


def upgrade() -> None:
    op.add_column(
        "procedure_versions",
        sa.Column("written_as", sa.String(length=10), nullable=True, comment=COMMENT),
    )
    op.add_column(
        "procedures", sa.Column("written_as", sa.String(length=10), nullable=True, comment=CURRENT)
    )
    op.execute(BACKFILL.format(table="procedure_versions", by="written_by"))
    op.execute(BACKFILL.format(table="procedures", by="updated_by"))


def downgrade() -> None:
    op.drop_column("procedures", "written_as")
    op.drop_column("procedure_versions", "written_as")
