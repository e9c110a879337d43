"""Notification intents, aggregation groups, the delivery outbox and silences.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05 09:00:00

The tracker writes `notify_intents` in the same transaction as the incident
change; the dispatcher folds them into `notify_groups` and writes one
`notify_outbox` row per message; the sender claims outbox rows with a lease.
`silences` are created by `sentinel silence add`. Written out in full, as 0001 is.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create the four tables."""
    op.create_table(
        "notify_intents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("alert", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("dispatched_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_intents")),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE",
                                name=op.f("fk_notify_intents_incident_id_incidents")),
        sa.CheckConstraint("kind IN ('firing', 'resolved')", name=op.f("ck_notify_intents_kind")),
    )
    op.create_index(op.f("ix_notify_intents_dispatched_at_id"), "notify_intents",
                    ["dispatched_at", "id"])
    op.create_table(
        "notify_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("receiver", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("group_labels", sa.JSON(), nullable=False),
        sa.Column("alerts", sa.JSON(), nullable=False),
        sa.Column("sent_firing", sa.JSON(), nullable=False),
        sa.Column("sent_resolved", sa.JSON(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("next_flush_at", TS, nullable=False),
        sa.Column("last_sent_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_groups")),
        sa.UniqueConstraint("key", name=op.f("uq_notify_groups_key")),
    )
    op.create_index(op.f("ix_notify_groups_next_flush_at"), "notify_groups", ["next_flush_at"])
    op.create_table(
        "notify_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("receiver", sa.String(), nullable=False),
        sa.Column("group_key", sa.String(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("notification", sa.JSON(), nullable=False),
        sa.Column("incident_ids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("lease_until", TS, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("escalated_from", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_outbox")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_notify_outbox_idempotency_key")),
        sa.CheckConstraint("status IN ('pending', 'sent', 'failed')",
                           name=op.f("ck_notify_outbox_status")),
        sa.CheckConstraint("kind IN ('firing', 'resolved')", name=op.f("ck_notify_outbox_kind")),
    )
    op.create_index(op.f("ix_notify_outbox_status_next_attempt_at"), "notify_outbox",
                    ["status", "next_attempt_at"])
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", TS, nullable=False),
        sa.Column("ends_at", TS, nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_silences")),
        sa.CheckConstraint("ends_at >= starts_at", name=op.f("ck_silences_ends_after_start")),
    )
    op.create_index(op.f("ix_silences_ends_at"), "silences", ["ends_at"])


def downgrade() -> None:
    """Drop everything this revision created."""
    op.drop_index(op.f("ix_silences_ends_at"), table_name="silences")
    op.drop_table("silences")
    op.drop_index(op.f("ix_notify_outbox_status_next_attempt_at"), table_name="notify_outbox")
    op.drop_table("notify_outbox")
    op.drop_index(op.f("ix_notify_groups_next_flush_at"), table_name="notify_groups")
    op.drop_table("notify_groups")
    op.drop_index(op.f("ix_notify_intents_dispatched_at_id"), table_name="notify_intents")
    op.drop_table("notify_intents")
