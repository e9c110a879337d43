"""Fleet incidents: the targets that joined each (issue 49).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 18:30:00

A fleet-wide failure opens one fleet incident (an `incidents` row with no
target); `fleet_members` links each target that joined it, with the target's
own incident, whether that incident pages nothing of its own (`quiet`), and
when the target's alert resolved (`left_at`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create `fleet_members`."""
    op.create_table(
        "fleet_members",
        sa.Column("fleet_incident_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.Column("quiet", sa.Boolean(), nullable=False),
        sa.Column("joined_at", TS, nullable=False),
        sa.Column("left_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["fleet_incident_id"], ["incidents.id"],
                                name=op.f("fk_fleet_members_fleet_incident_id_incidents"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"],
                                name=op.f("fk_fleet_members_incident_id_incidents"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("fleet_incident_id", "target", name=op.f("pk_fleet_members")),
    )
    op.create_index("ix_fleet_members_incident_id", "fleet_members", ["incident_id"])


def downgrade() -> None:
    """Drop `fleet_members`."""
    op.drop_index("ix_fleet_members_incident_id", table_name="fleet_members")
    op.drop_table("fleet_members")
