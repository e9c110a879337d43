"""The series an incident's plot shows, kept in the database so the plot outlives the store.

    incident_series   one row per incident: the covered window, the sampling step, and
                      every plotted series (the alert rules' compared expressions,
                      restricted to the incident's labels, and the diagnosis evidence
                      series), encoded by sentinel/incidents/series_codec.py (bounded
                      size); `final` once the window reaches past the resolution

Created by migration 0012.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, LargeBinary
from sqlalchemy.orm import Mapped, mapped_column

from sentinel.incidents.models_base import Base


class IncidentSeries(Base):
    """An incident's stored series: written at opening, extended while open, final at the end."""

    __tablename__ = "incident_series"

    incident_id: Mapped[int] = mapped_column(
        ForeignKey("incidents.id", ondelete="CASCADE"), primary_key=True)
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    step_ms: Mapped[int] = mapped_column(BigInteger)
    points: Mapped[int] = mapped_column(Integer)
    final: Mapped[bool] = mapped_column(Boolean)
    updated_at: Mapped[datetime]
    data: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (
        # The capture job looks for the rows still to extend (few) among all (many).
        Index("ix_incident_series_final_updated_at", "final", "updated_at"),
    )
