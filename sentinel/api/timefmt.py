"""How the API writes a time: RFC 3339 in UTC with milliseconds (one place, so every view,
the history and the fleet's alike, says it the same way and none imports another for it)."""

from __future__ import annotations

from datetime import datetime


def iso(dt: datetime | None) -> str | None:
    """RFC 3339 in UTC with milliseconds, or None."""
    if dt is None:
        return None
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
