"""The leader lease of several Sentinels sharing one PostgreSQL (issue 16).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22 19:30:00

One row per lease `name`: who holds it (`holder`: host, pid and process start),
its `epoch` (the fencing token, +1 at every change of holder) and `expires_at`,
computed with the database's clock and pushed on by the holder's conditional
UPDATE. Every side effect of the leader is written in a transaction that first
locks this row FOR SHARE with the holder's epoch (sentinel/daemon/leader.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `ha_leases`."""
    op.create_table(
        "ha_leases",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_ha_leases")),
    )


def downgrade() -> None:
    """Drop `ha_leases`."""
    op.drop_table("ha_leases")
