"""Query-parameter parsing shared by the API, the page and MCP: each failure names the parameter."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from sentinel.api.errors import bad_param
from sentinel.config.durations import parse_duration

_CURSOR = re.compile(r"^(-?[0-9]{1,18}):([0-9]{1,18})$")
# Times the API takes: the epoch to the end of year 9999 (what datetime and the
# database hold); ids: what a signed 64-bit column holds.
MAX_TIME_MS = 253_402_300_799_999
MAX_ID = 2**63 - 1


def parse_id(raw: str, name: str = "id") -> int:
    """A row id from text: ASCII digits (`²` is a digit to str.isdigit), at most 2^63-1."""
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_ID:
        raise bad_param(name, "expected an integer id")
    return int(raw)


def _in_range(name: str, ms: int) -> int:
    if not 0 <= ms <= MAX_TIME_MS:
        raise bad_param(name, "time out of range (1970 to 9999)")
    return ms


def time_param(params: Mapping[str, str], name: str, now_ms: int) -> int | None:
    """Epoch ms from RFC 3339, epoch seconds, or a duration back from now (`30d`); None if unset."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            raise bad_param(name, "expected a finite time")
        return _in_range(name, round(seconds * 1000))
    try:
        return _in_range(name, now_ms - parse_duration(raw))
    except (ValueError, OverflowError):
        pass
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise bad_param(name, "expected RFC 3339 time, epoch seconds or a duration like 30d"
                        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return _in_range(name, int(dt.timestamp() * 1000))
    except (OverflowError, ValueError):
        raise bad_param(name, "time out of range (1970 to 9999)") from None


def int_param(params: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """An integer in [lo, hi]."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.lstrip("-").isascii() or not raw.lstrip("-").isdigit() or len(raw) > 19:
        raise bad_param(name, "expected an integer")
    value = int(raw)
    if not lo <= value <= hi:
        raise bad_param(name, f"must be between {lo} and {hi}")
    return value


def choice_param(params: Mapping[str, str], name: str, choices: tuple[str, ...],
                 default: str | None = None) -> str | None:
    """One of `choices`, or the default when unset."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise bad_param(name, f"must be one of {', '.join(choices)}")
    return raw


def str_param(params: Mapping[str, str], name: str) -> str | None:
    """A non-empty string, or None."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > 256:
        raise bad_param(name, "longer than 256 characters")
    return raw


def encode_cursor(opened_ms: int, incident_id: int) -> str:
    """The opaque cursor after (opened_at, id)."""
    return base64.urlsafe_b64encode(f"{opened_ms}:{incident_id}".encode()).decode().rstrip("=")


def cursor_param(params: Mapping[str, str], name: str = "cursor") -> tuple[int, int] | None:
    """(opened ms, id) from an opaque cursor."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise bad_param(name, "not a cursor this API returned") from None
    m = _CURSOR.match(text)
    if m is None or not -MAX_TIME_MS <= int(m.group(1)) <= MAX_TIME_MS:
        raise bad_param(name, "not a cursor this API returned")
    return int(m.group(1)), int(m.group(2))
