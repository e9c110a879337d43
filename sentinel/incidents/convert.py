"""Conversions between pipeline types (ms, `Labels`, floats) and what the database stores."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from sentinel.model import Labels

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def ms_to_dt(ms: int) -> datetime:
    """Epoch milliseconds to an aware UTC datetime, exactly (no float rounding)."""
    return EPOCH + timedelta(milliseconds=ms)


def opt_ms_to_dt(ms: int | None) -> datetime | None:
    """`ms_to_dt`, passing None through."""
    return None if ms is None else ms_to_dt(ms)


def dt_to_ms(dt: datetime) -> int:
    """An aware datetime to epoch milliseconds."""
    return (dt - EPOCH) // _MS


def opt_dt_to_ms(dt: datetime | None) -> int | None:
    """`dt_to_ms`, passing None through."""
    return None if dt is None else dt_to_ms(dt)


def labels_to_json(labels: Labels) -> dict[str, Any]:
    """A label set as a JSON object (key order is not significant)."""
    return dict(labels)


def labels_from_json(data: dict[str, Any] | None) -> Labels:
    """The canonical (sorted) label set back from its JSON object."""
    return tuple(sorted((str(k), str(v)) for k, v in (data or {}).items()))


def value_to_db(value: float) -> float | None:
    """NaN becomes NULL: SQLite cannot store NaN, and both backends should agree."""
    return None if math.isnan(value) else value


def value_from_db(value: float | None) -> float:
    """NULL back to NaN."""
    return math.nan if value is None else float(value)


def value_to_json(value: float | None) -> float | str | None:
    """A float JSON can carry: NaN and infinities become Prometheus's strings."""
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def format_value(value: float | None) -> str:
    """A sample value for people: `4`, `0.125`, `1.5e+09`, `NaN`, `+Inf`."""
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.6g}"


def iso(dt: datetime | None) -> str | None:
    """ISO-8601 UTC with a `Z`, milliseconds only when non-zero: `2026-11-21T10:00:05Z`."""
    if dt is None:
        return None
    dt = dt.astimezone(UTC)
    if dt.microsecond:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
