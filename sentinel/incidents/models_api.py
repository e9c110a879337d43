"""Tables of the surfaces where people act: approvals of parked actions, and the write audit.

    approvals   an action the guards allowed, parked until a person approves or
                denies it (or it expires); claimed with conditional UPDATEs so a
                second approval, or two daemons, run it at most once
    api_audit   every write through the API, the page or MCP: when, which token
                (by its name, never its value), what, and how it ended

Created by migration 0008 (with `incidents.category` and the indexes stats read).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from sentinel.incidents.models_base import Base
from sentinel.incidents.models_remediation import RemediationAttempt


class ApprovalStatus(enum.StrEnum):
    """pending → approved → running → done; or pending → denied | expired."""

    PENDING = "pending"
    APPROVED = "approved"
    RUNNING = "running"
    DONE = "done"
    DENIED = "denied"
    EXPIRED = "expired"


class Approval(Base):
    """One parked action awaiting a person's decision."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"))
    target: Mapped[str] = mapped_column(String)
    policy: Mapped[str] = mapped_column(String)
    step: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(32))
    plan: Mapped[str] = mapped_column(Text)
    alertname: Mapped[str] = mapped_column(String)
    labels: Mapped[dict[str, Any]]
    active_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(16))
    requested_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    decided_by: Mapped[str | None] = mapped_column(String)
    attempt_id: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text)
    # Set when on-call was paged about a denial or expiry (claimed once, by one daemon).
    escalated_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint(f"status IN ({', '.join(repr(s.value) for s in ApprovalStatus)})",
                        name="status"),
        Index("ix_approvals_status_expires_at", "status", "expires_at"),
        Index("ix_approvals_incident_id", "incident_id"),
    )


class ApiAudit(Base):
    """One write: who (token name), when, what (method and path), and the outcome."""

    __tablename__ = "api_audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime]
    who: Mapped[str] = mapped_column(String)
    via: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String)
    status: Mapped[int] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_api_audit_at", "at"),)


# Stats read the verified attempts of a time window. Declared here, beside the other
# indexes the API needs, so the remediation models stay the remediation stage's own.
Index("ix_remediation_attempts_status_requested_at", RemediationAttempt.status,
      RemediationAttempt.requested_at)
