"""Remediation attempts and per-target guard state.

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-05 09:00:00

`remediation_attempts` holds every action taken (written as `running` before
the side effect, finished with its outcome after); `remediation_targets` the
guard state that must survive a restart (failures in a row, last attempt,
failure and success, when the breaker opened). Written out in full rather
than importing the models, as 0001 is.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create `remediation_attempts` and `remediation_targets`."""
    op.create_table(
        "remediation_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("policy", sa.String(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("manual", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("acted_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("recovery_ms", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.CheckConstraint("status IN ('running', 'succeeded', 'failed')",
                           name=op.f("ck_remediation_attempts_status")),
        sa.CheckConstraint("(status = 'running') = (finished_at IS NULL)",
                           name=op.f("ck_remediation_attempts_finished_at_matches_status")),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE",
                                name=op.f("fk_remediation_attempts_incident_id_incidents")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_remediation_attempts")),
    )
    op.create_index(op.f("ix_remediation_attempts_target_requested_at"),
                    "remediation_attempts", ["target", "requested_at"])
    op.create_index(op.f("ix_remediation_attempts_incident_id"), "remediation_attempts",
                    ["incident_id"])
    op.create_index(op.f("ix_remediation_attempts_status"), "remediation_attempts", ["status"])
    op.create_table(
        "remediation_targets",
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_attempt_at", TS, nullable=True),
        sa.Column("last_failure_at", TS, nullable=True),
        sa.Column("last_success_at", TS, nullable=True),
        sa.Column("breaker_opened_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("target", name=op.f("pk_remediation_targets")),
    )


def downgrade() -> None:
    """Drop everything this revision created."""
    op.drop_table("remediation_targets")
    op.drop_index(op.f("ix_remediation_attempts_status"), table_name="remediation_attempts")
    op.drop_index(op.f("ix_remediation_attempts_incident_id"), table_name="remediation_attempts")
    op.drop_index(op.f("ix_remediation_attempts_target_requested_at"),
                  table_name="remediation_attempts")
    op.drop_table("remediation_attempts")
