"""The leader lease table of several Sentinels on one PostgreSQL (migration 0009).

Imported by `sentinel.incidents.models` so the drift test compares it too. The
lease is read and written with plain SQL in `sentinel/daemon/leader.py` (the
expiry is computed with the database's clock there); this model only declares it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from sentinel.incidents.models_base import Base


class LeaderLeaseRow(Base):
    """One lease: its holder, its epoch (the fencing token) and when it runs out."""

    __tablename__ = "ha_leases"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    holder: Mapped[str] = mapped_column(String)
    epoch: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]
