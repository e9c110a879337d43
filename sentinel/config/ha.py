"""The `ha:` section: several Sentinels on one PostgreSQL, one leader at a time (issue 16).

    ha:
      lease: 15s          # how long a leader's lease lasts without renewal (default 15s)
      name: sentinel      # the lease's name: Sentinels sharing it elect one leader

Absent: no lease; the daemon acts alone (one daemon per database, as before).
Present on PostgreSQL: every daemon scrapes, the lease holder alone evaluates,
records incidents and responds (sentinel/daemon/leader.py). On SQLite there
is nobody to share with: the daemon is always the leader.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from sentinel.config.base import PositiveDuration, Strict

DEFAULT_LEASE_MS = 15_000
MIN_LEASE_MS = 1_000


class HAConfig(Strict):
    """The leader lease."""

    lease_ms: PositiveDuration = Field(DEFAULT_LEASE_MS, alias="lease")
    name: str = Field("sentinel", min_length=1, max_length=200)

    @field_validator("lease_ms")
    @classmethod
    def _long_enough(cls, v: int) -> int:
        # Renewal runs every third of the lease; under a second that is a busy loop.
        if v < MIN_LEASE_MS:
            raise ValueError(f"must be at least {MIN_LEASE_MS // 1000}s")
        return v
