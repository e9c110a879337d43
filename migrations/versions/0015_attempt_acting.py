"""When a remediation attempt began to act: one that never did is withdrawn, not failed.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 21:30:00

`acting_at` is written by the leader, fenced, just before the action runs;
an attempt cannot act without it. A running attempt reaped without it (its
daemon lost the lead or died between the claim and the action) did nothing,
so it is withdrawn: no failure counted, the step offered again. Rows from
before this revision get `acting_at = requested_at`: whether they acted is
not known, so they keep the old rule (reaped as failed).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `acting_at` to `remediation_attempts`, set for the rows already there."""
    with op.batch_alter_table("remediation_attempts") as batch:
        batch.add_column(sa.Column("acting_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE remediation_attempts SET acting_at = requested_at")


def downgrade() -> None:
    """Drop `acting_at`."""
    with op.batch_alter_table("remediation_attempts") as batch:
        batch.drop_column("acting_at")
