"""Evidence that stays (issue 37): the series an incident's plot shows, stored with it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 11:30:00

`incident_series`: one row per incident, written when it opens, extended while
it is open and once more after it resolves (then `final`): the window covered,
the sampling step, and the series compactly encoded (sentinel/incidents/series_codec.py).
Incidents from before the upgrade have no row; their page plots what the
in-memory store still holds, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `incident_series`."""
    op.create_table(
        "incident_series",
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step_ms", sa.BigInteger(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE",
                                name=op.f("fk_incident_series_incident_id_incidents")),
        sa.PrimaryKeyConstraint("incident_id", name=op.f("pk_incident_series")),
    )
    op.create_index("ix_incident_series_final_updated_at", "incident_series",
                    ["final", "updated_at"])


def downgrade() -> None:
    """Drop `incident_series`."""
    op.drop_index("ix_incident_series_final_updated_at", table_name="incident_series")
    op.drop_table("incident_series")
