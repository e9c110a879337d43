"""Act first, then tell once (issue 33): the held first page of an incident.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 11:30:00

`notify_holds`: one row per incident opened with a notification. While a
remediation policy acts (`waiting`, until `deadline_at`), the incident's
notify intents stay undispatched; a verified recovery makes it `fixed` (no
page), anything else `paged`. Persisted so a restart during the grace neither
loses the held page nor sends it twice. (Reserved number 0014; it follows 0011
on this branch: the lead chains it after 0012/0013 at merge.)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `notify_holds`."""
    op.create_table(
        "notify_holds",
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("model_runbook", sa.Boolean(), nullable=False),
        sa.Column("update_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('waiting', 'fixed', 'paged')",
                           name=op.f("ck_notify_holds_status")),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"],
                                name=op.f("fk_notify_holds_incident_id_incidents"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("incident_id", name=op.f("pk_notify_holds")),
    )
    op.create_index(op.f("ix_notify_holds_status_deadline_at"), "notify_holds",
                    ["status", "deadline_at"])


def downgrade() -> None:
    """Drop `notify_holds`."""
    op.drop_index(op.f("ix_notify_holds_status_deadline_at"), table_name="notify_holds")
    op.drop_table("notify_holds")
