"""Remediation state: every attempt (intent first, outcome after) and each target's guard state.

Kept in the database so a restart of Sentinel resets no cooldown, budget,
backoff or breaker. `remediation_attempts` rows are written as `running`
before the side effect and finished with the outcome after it; the fleet-wide
concurrency limit counts `running` rows, so two daemons on one PostgreSQL see
each other's actions.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from sentinel.incidents.models_base import Base


class AttemptStatus(enum.StrEnum):
    """An attempt runs, then succeeded (acted and verified) or failed."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Verdict(enum.StrEnum):
    """What became of a remediation some time after it."""

    FIXED = "fixed"  # the same failure did not come back, throughput is back
    RECURRED = "recurred"  # the same failure came back on the target within the window
    FAILED = "failed"  # the action or its verification failed, or throughput stayed low
    OVERRIDDEN = "overridden"  # a person acted on the target instead


class RemediationAttempt(Base):
    """One action taken against a target for an incident."""

    __tablename__ = "remediation_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"))
    target: Mapped[str] = mapped_column(String)
    policy: Mapped[str] = mapped_column(String)
    step: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(32))
    manual: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(String(16))
    requested_at: Mapped[datetime]
    # Written (fenced, by the leader) just before the action runs: an attempt without it
    # never acted, and is withdrawn rather than failed when reaped (migration 0015).
    acting_at: Mapped[datetime | None]
    acted_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    recovery_ms: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None]
    # Who runs it (host:pid:start) and until when its heartbeat holds it (migration 0007).
    owner: Mapped[str | None] = mapped_column(String)
    lease_until: Mapped[datetime | None]
    # Some time after it (remediation.verdicts.after), whether it fixed the failure
    # (migration 0017): fixed, recurred, failed, overridden; written once.
    verdict: Mapped[str | None] = mapped_column(String(16))
    verdict_at: Mapped[datetime | None]
    verdict_detail: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(f"status IN ({', '.join(repr(s.value) for s in AttemptStatus)})",
                        name="status"),
        CheckConstraint("verdict IS NULL OR verdict IN "
                        f"({', '.join(repr(v.value) for v in Verdict)})", name="verdict"),
        Index("ix_remediation_attempts_verdict", "verdict"),
        CheckConstraint("(status = 'running') = (finished_at IS NULL)",
                        name="finished_at_matches_status"),
        Index("ix_remediation_attempts_target_requested_at", "target", "requested_at"),
        Index("ix_remediation_attempts_incident_id", "incident_id"),
        Index("ix_remediation_attempts_status", "status"),
    )


class RemediationTarget(Base):
    """A target's guard state: failures in a row, last attempt/failure/success, the breaker."""

    __tablename__ = "remediation_targets"

    target: Mapped[str] = mapped_column(String, primary_key=True)
    consecutive_failures: Mapped[int] = mapped_column(Integer)
    last_attempt_at: Mapped[datetime | None]
    last_failure_at: Mapped[datetime | None]
    last_success_at: Mapped[datetime | None]
    breaker_opened_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class RemediationStep(Base):
    """A policy step demoted to approval: its recent runs were mostly not fixed (0017)."""

    __tablename__ = "remediation_steps"

    policy: Mapped[str] = mapped_column(String, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    demoted_at: Mapped[datetime | None]  # None: promoted back (or never demoted)
    demoted_reason: Mapped[str] = mapped_column(Text)
    promoted_at: Mapped[datetime | None]
    promoted_by: Mapped[str | None] = mapped_column(String)
    updated_at: Mapped[datetime]
