"""The members of fleet incidents (migration 0018; incidents/fleet.py, issue 49).

A fleet incident is an `incidents` row of its own (group key `fleet/<alert>/<group>`,
no target); each target that joined it keeps its own per-target incident and rows,
linked here. `quiet`: the member's incident opened as part of the fleet, so it pages
nothing of its own (one that paged before the fleet opened keeps its own page and
resolve: one page per incident). `left_at`: the member's alert resolved.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from sentinel.incidents.models_base import Base


class FleetMember(Base):
    """One target of one fleet incident."""

    __tablename__ = "fleet_members"

    fleet_incident_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("incidents.id", ondelete="CASCADE"), primary_key=True)
    target: Mapped[str] = mapped_column(String, primary_key=True)
    # The target's own incident of the alert (None: it had none when it joined).
    incident_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("incidents.id", ondelete="SET NULL"))
    quiet: Mapped[bool] = mapped_column(Boolean)
    joined_at: Mapped[datetime]
    left_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_fleet_members_incident_id", "incident_id"),)
