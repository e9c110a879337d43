"""Where people look and act: incident category and detection time, approvals, write audit.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22 16:00:00

- `incidents.category` (the alert's `category` label), `incidents.detect_ms`
  (condition true → firing) and `incidents.resolve_ms` (opened → resolved), with an
  index per filter the API offers; both times are filled for existing incidents.
- `timeline_events (kind, at, incident_id)`, `remediation_attempts (status, requested_at)`: stats read
  pages sent and verified recoveries of a window.
- `approvals`: actions parked until a person approves, denies, or they expire.
- `api_audit`: every write through the API, the page or MCP, with the token's name.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns, indexes and tables."""
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("category", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("detect_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("resolve_ms", sa.BigInteger(), nullable=True))
    op.create_index("ix_incidents_category_opened_at_id", "incidents",
                    ["category", "opened_at", "id"])
    op.create_index("ix_timeline_events_kind_at_incident_id", "timeline_events",
                    ["kind", "at", "incident_id"])
    op.create_index("ix_remediation_attempts_status_requested_at", "remediation_attempts",
                    ["status", "requested_at"])
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("UPDATE incidents SET detect_ms = (SELECT (EXTRACT(EPOCH FROM "
                   "min(incidents.opened_at - a.active_at)) * 1000)::bigint "
                   "FROM incident_alerts a WHERE a.incident_id = incidents.id)")
        op.execute("UPDATE incidents SET resolve_ms = (EXTRACT(EPOCH FROM resolved_at - "
                   "opened_at) * 1000)::bigint WHERE resolved_at IS NOT NULL")
    else:
        op.execute("UPDATE incidents SET detect_ms = (SELECT CAST(round((julianday("
                   "incidents.opened_at) - julianday(min(a.active_at))) * 86400000) AS INTEGER) "
                   "FROM incident_alerts a WHERE a.incident_id = incidents.id)")
        op.execute("UPDATE incidents SET resolve_ms = CAST(round((julianday(resolved_at) - "
                   "julianday(opened_at)) * 86400000) AS INTEGER) WHERE resolved_at IS NOT NULL")
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("policy", sa.String(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("plan", sa.Text(), nullable=False),
        sa.Column("alertname", sa.String(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("active_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(), nullable=True),
        sa.Column("attempt_id", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("escalated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'approved', 'running', 'done', 'denied', "
                           "'expired')", name=op.f("ck_approvals_status")),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE",
                                name=op.f("fk_approvals_incident_id_incidents")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
    )
    op.create_index("ix_approvals_status_expires_at", "approvals", ["status", "expires_at"])
    op.create_index("ix_approvals_incident_id", "approvals", ["incident_id"])
    op.create_table(
        "api_audit",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("who", sa.String(), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_audit")),
    )
    op.create_index("ix_api_audit_at", "api_audit", ["at"])


def downgrade() -> None:
    """Drop what upgrade added."""
    op.drop_index("ix_api_audit_at", table_name="api_audit")
    op.drop_table("api_audit")
    op.drop_index("ix_approvals_incident_id", table_name="approvals")
    op.drop_index("ix_approvals_status_expires_at", table_name="approvals")
    op.drop_table("approvals")
    op.drop_index("ix_remediation_attempts_status_requested_at",
                  table_name="remediation_attempts")
    op.drop_index("ix_timeline_events_kind_at_incident_id", table_name="timeline_events")
    op.drop_index("ix_incidents_category_opened_at_id", table_name="incidents")
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("resolve_ms")
        batch.drop_column("detect_ms")
        batch.drop_column("category")
