"""Prometheus durations ("30s", "1h30m", "5m") to and from milliseconds."""

from __future__ import annotations

import re

_UNITS_MS = {
    "y": 365 * 24 * 3600 * 1000,
    "w": 7 * 24 * 3600 * 1000,
    "d": 24 * 3600 * 1000,
    "h": 3600 * 1000,
    "m": 60 * 1000,
    "s": 1000,
    "ms": 1,
}
# Units must appear largest first and at most once each, as in prometheus/common.
_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_ORDER = ("y", "w", "d", "h", "m", "s", "ms")


def parse_duration(text: str) -> int:
    """Milliseconds in a Prometheus duration; ValueError with the text when malformed."""
    text = str(text).strip()
    if text == "0":
        return 0
    m = _DURATION.match(text)
    if not text or not m or not any(m.groups()):
        raise ValueError(f'not a valid duration: "{text}" (use e.g. 30s, 5m, 1h30m)')
    return sum(int(g) * _UNITS_MS[u] for g, u in zip(m.groups(), _ORDER, strict=True) if g)


def format_duration(ms: int) -> str:
    """The shortest Prometheus duration for a number of milliseconds ("1h30m", "0s")."""
    if ms == 0:
        return "0s"
    out = []
    for unit in _ORDER:
        size = _UNITS_MS[unit]
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(out)
