"""The incident store's schema: typed SQLAlchemy 2.0 models (incidents, timelines, logs).

The schema carries the invariants: check constraints on every status/state
column, at most one OPEN incident per group key (a partial unique index, which
SQLite and PostgreSQL both enforce), and every constraint named so SQLite's
batch migrations can find it. Timestamps are timezone-aware UTC going in and
coming out on both databases (`UTCDateTime`).

The tables are created only by the Alembic migrations in `migrations/`; a
drift test compares these models with the migrated database.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

# Tables of other stages live in their own modules, on the shared base (models_base,
# which imports none of them); imported here, one way, so that `Base.metadata`
# (migrations' drift test, alembic env) sees every table.
from sentinel.incidents import models_api as _models_api  # noqa: F401
from sentinel.incidents import models_fleet as _models_fleet  # noqa: F401
from sentinel.incidents import models_ha as _models_ha  # noqa: F401
from sentinel.incidents import models_notify as _models_notify  # noqa: F401
from sentinel.incidents import models_remediation as _models_remediation  # noqa: F401
from sentinel.incidents import models_series as _models_series  # noqa: F401

# The shared base, re-exported: callers and migrations import it from here too.
from sentinel.incidents.models_base import NAMING_CONVENTION as NAMING_CONVENTION
from sentinel.incidents.models_base import Base as Base
from sentinel.incidents.models_base import UTCDateTime as UTCDateTime


class IncidentStatus(enum.StrEnum):
    """An incident is open while any of its alerts fires."""

    OPEN = "open"
    RESOLVED = "resolved"


class IncidentAlertState(enum.StrEnum):
    """An alert that joined an incident fires until it resolves (and may fire again)."""

    FIRING = "firing"
    RESOLVED = "resolved"


class TimelineKind(enum.StrEnum):
    """What a timeline event records. Adding a kind needs a migration (check constraint)."""

    PENDING = "pending"
    FIRING = "firing"
    VALUE = "value"
    RESOLVED = "resolved"
    INCIDENT_RESOLVED = "incident_resolved"
    NOTIFICATION_SENT = "notification_sent"
    NOTIFICATION_FAILED = "notification_failed"
    LOG_EXCERPT = "log_excerpt"
    RUNBOOK = "runbook"
    ACTION = "action"
    NOTE = "note"
    # What people do from the page, the API or MCP (issue 37).
    ACKNOWLEDGED = "acknowledged"
    ASSIGNED = "assigned"
    SILENCED = "silenced"
    DIAGNOSIS_REQUESTED = "diagnosis_requested"


def _in(column: str, values: type[enum.StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(v.value) for v in values)})"


OPEN_INCIDENT_KEY_INDEX = "uq_incidents_open_group_key"
OPEN_INCIDENT_WHERE = "status = 'open'"


class Incident(Base):
    """A group of alerts with the same alertname and target, with a timeline."""

    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_key: Mapped[str] = mapped_column(String)
    alertname: Mapped[str] = mapped_column(String)
    target: Mapped[str] = mapped_column(String)
    status: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(32))
    summary: Mapped[str] = mapped_column(Text)
    labels: Mapped[dict[str, Any]]
    opened_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]
    # The alert's `category` label (hbm_oom, …) and condition true → firing, for stats.
    category: Mapped[str | None] = mapped_column(String(64))
    detect_ms: Mapped[int | None] = mapped_column(BigInteger)
    # opened → resolved, written with resolved_at: stats read it instead of computing it.
    resolve_ms: Mapped[int | None] = mapped_column(BigInteger)
    # The failure's first evidence (a crash line's own time, else the alert going active):
    # time to detect runs from it to opened_at, time to recovery to verified serving.
    evidence_at: Mapped[datetime | None]
    recovery_ms: Mapped[int | None] = mapped_column(BigInteger)
    # A person took it (no more repeats or escalations), who owns it, and a diagnosis
    # asked for again that the diagnosis job has not yet claimed.
    acknowledged_at: Mapped[datetime | None]
    acknowledged_by: Mapped[str | None] = mapped_column(String(128))
    owner: Mapped[str | None] = mapped_column(String(128))
    diagnosis_requested_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint(_in("status", IncidentStatus), name="status"),
        CheckConstraint(
            "(status = 'open' AND resolved_at IS NULL)"
            " OR (status = 'resolved' AND resolved_at IS NOT NULL)",
            name="resolved_at_matches_status",
        ),
        # The invariant the tracker relies on: one open incident per key. Its PostgreSQL
        # WHERE is attached by use_postgresql_options() when a PostgreSQL engine is made:
        # declared here, SQLAlchemy would import the whole PostgreSQL dialect (with its
        # drivers' modules, ~45 ms) into every SQLite command, `incidents list` included.
        Index(
            OPEN_INCIDENT_KEY_INDEX,
            "group_key",
            unique=True,
            sqlite_where=text(OPEN_INCIDENT_WHERE),
        ),
        # Listing is newest first, optionally filtered by one column.
        Index("ix_incidents_opened_at_id", "opened_at", "id"),
        Index("ix_incidents_status_opened_at_id", "status", "opened_at", "id"),
        Index("ix_incidents_alertname_opened_at_id", "alertname", "opened_at", "id"),
        Index("ix_incidents_target_opened_at_id", "target", "opened_at", "id"),
        Index("ix_incidents_category_opened_at_id", "category", "opened_at", "id"),
    )


class IncidentAlert(Base):
    """One alert (by fingerprint) that belongs to an incident."""

    __tablename__ = "incident_alerts"

    incident_id: Mapped[int] = mapped_column(
        ForeignKey("incidents.id", ondelete="CASCADE"), primary_key=True
    )
    fingerprint: Mapped[str] = mapped_column(String(16), primary_key=True)
    labels: Mapped[dict[str, Any]]
    annotations: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16))
    # NULL stands for NaN: SQLite cannot store NaN.
    value: Mapped[float | None] = mapped_column(Float)
    value_recorded_at: Mapped[datetime | None]
    active_at: Mapped[datetime]
    fired_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    notified_firing_at: Mapped[datetime | None]
    notified_resolved_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint(_in("state", IncidentAlertState), name="state"),
        CheckConstraint(
            "(state = 'firing' AND resolved_at IS NULL)"
            " OR (state = 'resolved' AND resolved_at IS NOT NULL)",
            name="resolved_at_matches_state",
        ),
    )


class TimelineEvent(Base):
    """One thing that happened to an incident, at a time."""

    __tablename__ = "timeline_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"))
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None]

    __table_args__ = (
        CheckConstraint(_in("kind", TimelineKind), name="kind"),
        Index("ix_timeline_events_incident_id_at", "incident_id", "at", "id"),
        # Stats count pages sent in a window without touching other events.
        Index("ix_timeline_events_kind_at_incident_id", "kind", "at", "incident_id"),
    )


class AlertStateRow(Base):
    """A persisted rule-engine `Alert`, so `for` and firing state survive restarts."""

    __tablename__ = "alert_states"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_name: Mapped[str] = mapped_column(String)
    rule: Mapped[str] = mapped_column(String)
    fingerprint: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]]
    annotations: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16))
    value: Mapped[float | None] = mapped_column(Float)
    active_at: Mapped[datetime]
    last_eval: Mapped[datetime]
    fired_at: Mapped[datetime | None]
    resolved_at: Mapped[datetime | None]
    keep_firing_since: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("state IN ('inactive', 'pending', 'firing')", name="state"),
        # A delta names its rows by (group, rule, fingerprint); the prefix serves a group.
        Index("ix_alert_states_group_name_rule_fingerprint", "group_name", "rule",
              "fingerprint"),
    )


class AlertGroupEvalRow(Base):
    """When a rule group's alert state was last committed: Prometheus's `downAt`.

    Alert rows are written only when they change (alert_states.py); this one
    row per group moves at every evaluation, so a restart knows how long the
    group's pending alerts went unevaluated.
    """

    __tablename__ = "alert_group_evals"

    group_name: Mapped[str] = mapped_column(String, primary_key=True)
    evaluated_at: Mapped[datetime]


class LogCursorRow(Base):
    """Where one log source stopped reading, so a restart neither misses nor repeats entries.

    For Cloud Logging: the timestamp of the last entry read and the insertIds
    already read at exactly that timestamp (the next query asks for
    `timestamp >= at` and drops those ids).
    """

    __tablename__ = "log_cursors"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    at: Mapped[datetime]
    insert_ids: Mapped[list[str]] = mapped_column(JSON)
    updated_at: Mapped[datetime]


class LogFilePositionRow(Base):
    """Where a followed log file stopped: its device and inode, and the offset past the last
    line handed out, so a restart resumes there (or drains the rotated file first)."""

    __tablename__ = "log_file_positions"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    dev: Mapped[int] = mapped_column(BigInteger)
    inode: Mapped[int] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(BigInteger)
    line_no: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime]


class LogEventRow(Base):
    """A crash signature matched in a target's log, with the excerpt that shows it."""

    __tablename__ = "log_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target: Mapped[str] = mapped_column(String)
    source: Mapped[str] = mapped_column(String)
    signature: Mapped[str] = mapped_column(String)
    category: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime]
    line_no: Mapped[int | None] = mapped_column(Integer)
    excerpt: Mapped[list[str]] = mapped_column(JSON)
    runbook: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]

    __table_args__ = (
        # Timelines ask for one target's recent events.
        Index("ix_log_events_target_at_id", "target", "at", "id"),
    )


def use_postgresql_options() -> None:
    """Attach the PostgreSQL-only schema options (idempotent).

    Called when a PostgreSQL engine is made (`Database`, migrations/env.py), before
    any DDL or comparison with the database needs them; SQLite never loads them.
    """
    table = Base.metadata.tables[Incident.__tablename__]
    index = next(i for i in table.indexes if i.name == OPEN_INCIDENT_KEY_INDEX)
    if index.dialect_kwargs.get("postgresql_where") is None:
        index.dialect_kwargs["postgresql_where"] = text(OPEN_INCIDENT_WHERE)
