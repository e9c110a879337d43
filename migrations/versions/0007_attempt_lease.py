"""A lease on each running remediation attempt, so a dead owner's attempt is freed while running.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22 16:30:00

`owner` names the process that claimed the attempt (host, pid and process
start time) and `lease_until` is renewed by its heartbeat; a running attempt
whose lease ran out is failed by any daemon, freeing its concurrency slot
within one lease period (issue 10). Rows from before this revision keep NULLs
and are handled by the older age rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `owner` and `lease_until` to `remediation_attempts`."""
    with op.batch_alter_table("remediation_attempts") as batch:
        batch.add_column(sa.Column("owner", sa.String(), nullable=True))
        batch.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop the lease columns."""
    with op.batch_alter_table("remediation_attempts") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("owner")
