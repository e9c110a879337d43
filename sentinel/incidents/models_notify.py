"""The notify stage's tables: intents, aggregation groups, the outbox, silences.

    notify_intents  per-alert "announce this" rows, written by the incident
                    tracker in the same transaction as the incident change
    notify_groups   Alertmanager-style aggregation groups (group_wait,
                    group_interval, repeat_interval), persisted so a restart
                    neither loses a pending message nor re-sends a sent one
    notify_outbox   one row per message to one receiver, claimed by a lease
                    (conditional UPDATE), retried with backoff until sent or failed
    silences        label matchers with start, end, author and comment

Created by migration 0005; imported by `sentinel.incidents.models` so the
drift test compares them too.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from sentinel.incidents.models_base import Base


class OutboxStatus(enum.StrEnum):
    """A message waits (pending, also while retrying), was accepted (sent), or gave up (failed)."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class NotifyIntent(Base):
    """One alert to announce (firing or resolved), queued with the incident change."""

    __tablename__ = "notify_intents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16))
    alert: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    dispatched_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("kind IN ('firing', 'resolved')", name="kind"),
        Index("ix_notify_intents_dispatched_at_id", "dispatched_at", "id"),
    )


class NotifyGroup(Base):
    """An aggregation group: the alerts one route sends to one receiver under one label set."""

    __tablename__ = "notify_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String, unique=True)
    receiver: Mapped[str] = mapped_column(String)
    route: Mapped[str] = mapped_column(String)
    group_labels: Mapped[dict[str, Any]]
    # fingerprint -> {"alert": {...}, "incident_id": n, "muted": reason | None}
    alerts: Mapped[dict[str, Any]]
    sent_firing: Mapped[list[str]] = mapped_column(JSON)
    sent_resolved: Mapped[list[str]] = mapped_column(JSON)
    seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    next_flush_at: Mapped[datetime]
    last_sent_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_notify_groups_next_flush_at", "next_flush_at"),)


class OutboxMessage(Base):
    """One message for one receiver; its `idempotency_key` is the same on every attempt."""

    __tablename__ = "notify_outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    receiver: Mapped[str] = mapped_column(String)
    group_key: Mapped[str] = mapped_column(String)
    idempotency_key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    notification: Mapped[dict[str, Any]]
    incident_ids: Mapped[list[int]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime]
    lease_until: Mapped[datetime | None]
    last_error: Mapped[str] = mapped_column(Text)
    escalated_from: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("status IN ('pending', 'sent', 'failed')", name="status"),
        CheckConstraint("kind IN ('firing', 'resolved')", name="kind"),
        Index("ix_notify_outbox_status_next_attempt_at", "status", "next_attempt_at"),
    )


class SilenceRow(Base):
    """A silence: alerts matching every matcher send nothing between starts_at and ends_at."""

    __tablename__ = "silences"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The id API v2 shows (Alertmanager's clients expect UUIDs); `id` is still accepted.
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    # [[name, op, value], ...] with op one of =, !=, =~, !~
    matchers: Mapped[list[list[str]]] = mapped_column(JSON)
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String)
    comment: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]

    __table_args__ = (
        CheckConstraint("ends_at >= starts_at", name="ends_after_start"),
        Index("ix_silences_ends_at", "ends_at"),
    )


class HoldStatus(enum.StrEnum):
    """Act first, then tell once (issue 33): where an incident's first page stands.

    WAITING: a remediation policy acts on the incident; its first notification waits
    until the deadline. FIXED: a verified recovery ended it within the grace; no page,
    one "fixed by Sentinel" message. PAGED: the page went out (refused, failed, parked,
    not verified in time, or no policy at all), so a later runbook is an update to it.
    """

    WAITING = "waiting"
    FIXED = "fixed"
    PAGED = "paged"


class NotifyHold(Base):
    """One row per incident opened with a notification: the act-first state of its page.

    Persisted (migration 0014) so a restart during the grace neither loses the held page
    (its intents stay undispatched until the row lets them go) nor sends it twice.
    """

    __tablename__ = "notify_holds"

    incident_id: Mapped[int] = mapped_column(
        ForeignKey("incidents.id", ondelete="CASCADE"), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime]
    deadline_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    # Why the page went out, or what fixed it: shown on the page (`sentinel_remediation`).
    reason: Mapped[str] = mapped_column(Text)
    # Whether the page carried the model's runbook; if not, one update follows when it comes.
    model_runbook: Mapped[bool] = mapped_column(Boolean)
    update_sent_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("status IN ('waiting', 'fixed', 'paged')", name="status"),
        Index("ix_notify_holds_status_deadline_at", "status", "deadline_at"),
    )
