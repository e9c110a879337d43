"""Incidents, their alerts and timelines, and persisted rule-engine alert states.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 10:30:00

Written out in full rather than importing the models: a migration records
the schema as it was at this revision, whatever the models become later.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
OPEN = sa.text("status = 'open'")
TIMELINE_KINDS = (
    "pending", "firing", "value", "resolved", "incident_resolved", "notification_sent",
    "notification_failed", "log_excerpt", "runbook", "action", "note",
)


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    """Create the four tables with their constraints and indexes."""
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_key", sa.String(), nullable=False),
        sa.Column("alertname", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("opened_at", TS, nullable=False),
        sa.Column("resolved_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incidents")),
        sa.CheckConstraint(_in("status", ("open", "resolved")), name=op.f("ck_incidents_status")),
        sa.CheckConstraint(
            "(status = 'open' AND resolved_at IS NULL)"
            " OR (status = 'resolved' AND resolved_at IS NOT NULL)",
            name=op.f("ck_incidents_resolved_at_matches_status"),
        ),
    )
    op.create_index(
        op.f("uq_incidents_open_group_key"), "incidents", ["group_key"], unique=True,
        sqlite_where=OPEN, postgresql_where=OPEN,
    )
    op.create_index(op.f("ix_incidents_opened_at_id"), "incidents", ["opened_at", "id"])
    op.create_index(
        op.f("ix_incidents_status_opened_at_id"), "incidents", ["status", "opened_at", "id"]
    )
    op.create_index(
        op.f("ix_incidents_alertname_opened_at_id"), "incidents", ["alertname", "opened_at", "id"]
    )
    op.create_index(
        op.f("ix_incidents_target_opened_at_id"), "incidents", ["target", "opened_at", "id"]
    )

    op.create_table(
        "incident_alerts",
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("value_recorded_at", TS, nullable=True),
        sa.Column("active_at", TS, nullable=False),
        sa.Column("fired_at", TS, nullable=False),
        sa.Column("resolved_at", TS, nullable=True),
        sa.Column("notified_firing_at", TS, nullable=True),
        sa.Column("notified_resolved_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("incident_id", "fingerprint", name=op.f("pk_incident_alerts")),
        sa.ForeignKeyConstraint(
            ["incident_id"], ["incidents.id"], ondelete="CASCADE",
            name=op.f("fk_incident_alerts_incident_id_incidents"),
        ),
        sa.CheckConstraint(
            _in("state", ("firing", "resolved")), name=op.f("ck_incident_alerts_state")
        ),
        sa.CheckConstraint(
            "(state = 'firing' AND resolved_at IS NULL)"
            " OR (state = 'resolved' AND resolved_at IS NOT NULL)",
            name=op.f("ck_incident_alerts_resolved_at_matches_state"),
        ),
    )

    op.create_table(
        "timeline_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_timeline_events")),
        sa.ForeignKeyConstraint(
            ["incident_id"], ["incidents.id"], ondelete="CASCADE",
            name=op.f("fk_timeline_events_incident_id_incidents"),
        ),
        sa.CheckConstraint(_in("kind", TIMELINE_KINDS), name=op.f("ck_timeline_events_kind")),
    )
    op.create_index(
        op.f("ix_timeline_events_incident_id_at"), "timeline_events", ["incident_id", "at", "id"]
    )

    op.create_table(
        "alert_states",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_name", sa.String(), nullable=False),
        sa.Column("rule", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("active_at", TS, nullable=False),
        sa.Column("last_eval", TS, nullable=False),
        sa.Column("fired_at", TS, nullable=True),
        sa.Column("resolved_at", TS, nullable=True),
        sa.Column("keep_firing_since", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_states")),
        sa.CheckConstraint(
            "state IN ('inactive', 'pending', 'firing')", name=op.f("ck_alert_states_state")
        ),
    )
    op.create_index(op.f("ix_alert_states_group_name_rule"), "alert_states", ["group_name", "rule"])


def downgrade() -> None:
    """Drop everything this revision created."""
    op.drop_table("alert_states")
    op.drop_index(op.f("ix_timeline_events_incident_id_at"), table_name="timeline_events")
    op.drop_table("timeline_events")
    op.drop_table("incident_alerts")
    for name in (
        "ix_incidents_target_opened_at_id", "ix_incidents_alertname_opened_at_id",
        "ix_incidents_status_opened_at_id", "ix_incidents_opened_at_id",
        "uq_incidents_open_group_key",
    ):
        op.drop_index(op.f(name), table_name="incidents")
    op.drop_table("incidents")
