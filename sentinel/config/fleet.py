"""Fleet-wide correlation (issue 49): when one alert on many targets is one incident.

    fleet:
      enabled: true
      min_targets: 10       # fleet-wide at 10 targets of a group...
      min_fraction: 0.2     # ...or 20 % of a label group's targets (at least 3)
      window: 5m            # ...that went active within this window
      group_by: []          # target labels that split the fleet (none: one fleet)
      breakdown_by: []      # target labels the page counts members by (pool=a100: 3,900)
      list_limit: 20        # targets named on the page; the rest are counted

Why these defaults: ten servers failing the same way within five minutes is
rarely ten coincidences, and ten pages for it are nine too many; 20 % of a pool
(`group_by`; at least three servers) is as telling. Without `group_by` the
fraction does not apply: a small fleet's servers keep their own pages. Five
minutes covers a fleet whose scrapes and evaluations spread one instant's failure
over a few intervals, and a rollout wave; unrelated failures an hour apart stay their own incidents.
The decisions are in sentinel/incidents/fleet.py.
"""

from __future__ import annotations

from pydantic import Field

from sentinel.config.base import PositiveDuration, Strict

DEFAULT_MIN_TARGETS = 10
DEFAULT_MIN_FRACTION = 0.2
DEFAULT_WINDOW_MS = 5 * 60_000
DEFAULT_LIST_LIMIT = 20


class FleetConfig(Strict):
    """When the same alert on many targets opens one fleet incident and pages once."""

    # false: every target's incident pages on its own, as before.
    enabled: bool = True
    # Fleet-wide when the alert went active on at least this many targets of a group...
    min_targets: int = Field(DEFAULT_MIN_TARGETS, ge=2)
    # ...or this fraction of a group_by group's targets, configured or discovered (never
    # fewer than 3)...
    min_fraction: float = Field(DEFAULT_MIN_FRACTION, gt=0, le=1)
    # ...within this window (pending targets count: a fleet fires over a few evaluations).
    window_ms: PositiveDuration = Field(DEFAULT_WINDOW_MS, alias="window")
    # Target labels that split the fleet into groups, one fleet incident each.
    group_by: tuple[str, ...] = ()
    # Target labels the page counts the members by (pool=a100: 3,900, pool=h100: 912).
    breakdown_by: tuple[str, ...] = ()
    # Targets named on the page; the rest are counted.
    list_limit: int = Field(DEFAULT_LIST_LIMIT, ge=1, le=1000)
