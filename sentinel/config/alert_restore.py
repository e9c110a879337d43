"""The `alert_restore:` section: how a restart restores alerts' `for` state.

    alert_restore:
      for_grace_period: 10m      # Prometheus's --rules.alert.for-grace-period
      for_outage_tolerance: 1h   # Prometheus's --rules.alert.for-outage-tolerance

See sentinel/rules/restore.py for what they do.
"""

from __future__ import annotations

from pydantic import Field

from sentinel.config.base import Duration, PositiveDuration, Strict
from sentinel.rules.restore import (
    DEFAULT_FOR_GRACE_PERIOD_MS,
    DEFAULT_FOR_OUTAGE_TOLERANCE_MS,
    RestoreSettings,
)


class AlertRestoreConfig(Strict):
    """Prometheus's `for` state restore settings."""

    for_grace_period_ms: Duration = Field(DEFAULT_FOR_GRACE_PERIOD_MS, alias="for_grace_period")
    for_outage_tolerance_ms: PositiveDuration = Field(DEFAULT_FOR_OUTAGE_TOLERANCE_MS,
                                                      alias="for_outage_tolerance")

    def settings(self) -> RestoreSettings:
        """The settings the rule manager takes."""
        return RestoreSettings(self.for_grace_period_ms, self.for_outage_tolerance_ms)
