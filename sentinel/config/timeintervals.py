"""Configuration of recurring time intervals (Alertmanager's `time_intervals` syntax).

```yaml
time_intervals:
  - name: weekly-maintenance
    time_intervals:
      - weekdays: [tuesday]
        times: [{start_time: "02:00", end_time: "04:00"}]
        location: Europe/Amsterdam
```

Named here once; referenced by name from notify routes (`mute_time_intervals`,
`active_time_intervals`) and remediation silences (`time_intervals`). The
semantics and the refusals are Alertmanager's (sentinel/timeintervals.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from sentinel.config.base import Strict, problem
from sentinel.timeintervals import TimeInterval, parse_interval


class NamedTimeIntervalConfig(Strict):
    """A named list of time intervals; active when any of them contains the instant."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]+$")
    time_intervals: tuple[dict[str, Any], ...] = Field(min_length=1)

    @field_validator("time_intervals")
    @classmethod
    def _parse(cls, v: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        known = {"times", "weekdays", "days_of_month", "months", "years", "location"}
        for i, spec in enumerate(v):
            unknown = sorted(set(spec) - known)
            if unknown:
                raise problem(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})",
                              i, unknown[0])
            try:
                parse_interval(spec)
            except ValueError as exc:
                raise problem(str(exc), i, str(exc).split(":", 1)[0]) from None
        return v

    def parsed(self) -> tuple[TimeInterval, ...]:
        """The intervals as sentinel.timeintervals values."""
        return tuple(parse_interval(spec) for spec in self.time_intervals)


def interval_table(named: tuple[NamedTimeIntervalConfig, ...]
                   ) -> dict[str, tuple[TimeInterval, ...]]:
    """Name → parsed intervals, for the route and remediation checks."""
    return {n.name: n.parsed() for n in named}
