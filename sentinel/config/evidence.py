"""The `evidence:` section: which window of an incident's series is stored with it.

    evidence:
      before: 30m      # stored from this long before the onset (as far as the store reaches)
      after: 5m        # to this long after the resolution
      interval: 30s    # how often open incidents' stored series are extended

See sentinel/incidents/series_capture.py for what is stored.
"""

from __future__ import annotations

from pydantic import Field

from sentinel.config.base import Duration, PositiveDuration, Strict
from sentinel.incidents.series_capture import (
    DEFAULT_AFTER_MS,
    DEFAULT_BEFORE_MS,
    DEFAULT_INTERVAL_MS,
    CaptureSettings,
)


class EvidenceConfig(Strict):
    """The stored window of an incident's series, and how often it is extended."""

    # Stored from this long before the onset, as far back as the series store still reaches.
    before_ms: Duration = Field(DEFAULT_BEFORE_MS, alias="before")
    # Stored until this long after the resolution; then the stored plot is final.
    after_ms: Duration = Field(DEFAULT_AFTER_MS, alias="after")
    # How often open incidents' stored series are extended (and new incidents' first stored).
    interval_ms: PositiveDuration = Field(DEFAULT_INTERVAL_MS, alias="interval")

    def settings(self, step_ms: int) -> CaptureSettings:
        """What the capture job and the API take; `step_ms`: the finest sampling step."""
        return CaptureSettings(self.before_ms, self.after_ms, self.interval_ms, step_ms)
