"""Log sources' read cursors and the crash signatures matched in logs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28 09:00:00

`log_cursors` holds where each log source stopped reading (Cloud Logging:
the last entry timestamp and the insertIds seen at exactly that timestamp),
so a restarted daemon neither misses nor re-counts an entry. `log_events`
keeps every matched signature with its excerpt, for incident timelines.
Written out in full rather than importing the models, as 0001 is.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create `log_cursors` and `log_events`."""
    op.create_table(
        "log_cursors",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("insert_ids", sa.JSON(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_log_cursors")),
    )
    op.create_table(
        "log_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("signature", sa.String(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=True),
        sa.Column("excerpt", sa.JSON(), nullable=False),
        sa.Column("runbook", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_events")),
    )
    op.create_index(op.f("ix_log_events_target_at_id"), "log_events", ["target", "at", "id"])


def downgrade() -> None:
    """Drop everything this revision created."""
    op.drop_index(op.f("ix_log_events_target_at_id"), table_name="log_events")
    op.drop_table("log_events")
    op.drop_table("log_cursors")
