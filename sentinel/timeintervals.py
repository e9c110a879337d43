"""Recurring time intervals in Alertmanager's `time_intervals` syntax (pure, no config types).

    time_intervals:
      - name: weekday-nights
        time_intervals:
          - times: [{start_time: "22:00", end_time: "24:00"}]
            weekdays: ["monday:friday"]
            days_of_month: ["1:7", "-1"]      # -1 is the month's last day
            months: ["january:march", "12"]
            years: ["2026:2027"]
            location: Europe/Amsterdam          # IANA zone; default UTC

As in Alertmanager: every field is a list; within a list one element must match;
a field left out matches anything; an instant is in an interval when every field
matches; a named interval is active when any of its intervals is. Times include
their start and exclude their end (`24:00` ends a day); day, month and year
ranges include both ends; negative days count back from the month's end.
`parse_interval` raises ValueError with the same refusals Alertmanager gives
(a start after its end, an unknown weekday or month, a day out of range).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")

Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class TimeInterval:
    """One `time_intervals` entry, parsed: empty tuples match anything."""

    times: tuple[Range, ...] = ()          # minutes of the day, [start, end)
    weekdays: tuple[Range, ...] = ()       # 0 = sunday, inclusive
    days_of_month: tuple[Range, ...] = ()  # 1..31 or -31..-1, inclusive
    months: tuple[Range, ...] = ()         # 1..12, inclusive
    years: tuple[Range, ...] = ()          # inclusive
    location: tzinfo = UTC

    def contains(self, when: datetime) -> bool:
        """Whether the instant (aware) falls in this interval, in its location."""
        local = when.astimezone(self.location)
        minute = local.hour * 60 + local.minute
        weekday = (local.weekday() + 1) % 7  # Python's Monday = 0; Alertmanager's Sunday = 0
        month_days = calendar.monthrange(local.year, local.month)[1]
        return (_any(self.times, lambda r: r[0] <= minute < r[1])
                and _any(self.weekdays, lambda r: r[0] <= weekday <= r[1])
                and _any(self.days_of_month, lambda r: _in_month(r, local.day, month_days))
                and _any(self.months, lambda r: r[0] <= local.month <= r[1])
                and _any(self.years, lambda r: r[0] <= local.year <= r[1]))


def _any(ranges: tuple[Range, ...], test: object) -> bool:
    return not ranges or any(test(r) for r in ranges)  # type: ignore[operator]


def _in_month(r: Range, day: int, month_days: int) -> bool:
    start, end = (v if v > 0 else month_days + 1 + v for v in r)
    if start > month_days:  # the 31st of a 30-day month: not this month (as Alertmanager)
        return False
    return max(start, 1) <= day <= min(end, month_days)


def active(intervals: Iterable[TimeInterval], now_ms: int) -> bool:
    """Whether any of a named interval's entries contains the instant."""
    when = datetime.fromtimestamp(now_ms / 1000, UTC)
    return any(i.contains(when) for i in intervals)


def any_active(names: Sequence[str], table: Mapping[str, tuple[TimeInterval, ...]],
               now_ms: int) -> str | None:
    """The first of `names` active at `now_ms`, or None."""
    return next((n for n in names if active(table.get(n, ()), now_ms)), None)


# -- parsing (Alertmanager's rules and refusals) ----------------------------------------


def parse_interval(spec: Mapping[str, object]) -> TimeInterval:
    """One `time_intervals` entry from its YAML mapping; ValueError names the field."""
    return TimeInterval(
        times=tuple(_time_range(t) for t in _list(spec, "times")),
        weekdays=tuple(_named_range(v, WEEKDAYS, "weekdays", 0) for v in _list(spec, "weekdays")),
        days_of_month=tuple(_day_range(v) for v in _list(spec, "days_of_month")),
        months=tuple(_named_range(v, MONTHS, "months", 1) for v in _list(spec, "months")),
        years=tuple(_number_range(v, "years", 0, None) for v in _list(spec, "years")),
        location=_location(spec.get("location")),
    )


def _list(spec: Mapping[str, object], key: str) -> list[object]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ValueError(f"{key}: expected a list")
    return list(value)


_HHMM = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]|24:00")


def _minutes(text: object, key: str) -> int:
    if not isinstance(text, str) or not _HHMM.fullmatch(text):
        raise ValueError(f"{key}: {text!r} is not a time of day HH:MM (00:00 to 24:00)")
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _time_range(t: object) -> Range:
    if not isinstance(t, Mapping) or set(t) - {"start_time", "end_time"}:
        raise ValueError("times: each entry has start_time and end_time only")
    if not t.get("start_time") or not t.get("end_time"):
        raise ValueError("times: both start_time and end_time must be given")
    start = _minutes(t.get("start_time"), "start_time")
    end = _minutes(t.get("end_time"), "end_time")
    if start >= end:
        raise ValueError(f"times: start_time {t.get('start_time')} must be before "
                         f"end_time {t.get('end_time')}")
    return start, end


def _bounds(value: object, key: str) -> tuple[str, str]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}: expected a value or a range 'a:b', got {value!r}")
    parts = value.split(":")
    if len(parts) > 2:
        raise ValueError(f"{key}: {value!r} is not a value or a range 'a:b'")
    return parts[0].strip(), parts[-1].strip()


def _named_range(value: object, names: tuple[str, ...], key: str, base: int) -> Range:
    def one(text: str) -> int:
        low = text.lower()
        if low in names:
            return names.index(low) + base
        if key == "months" and text.isdigit() and 1 <= int(text) <= 12:
            return int(text)
        raise ValueError(f"{key}: unknown {key[:-1]} {text!r}")
    start, end = (one(p) for p in _bounds(value, key))
    if start > end:
        raise ValueError(f"{key}: {value!r} starts after it ends")
    return start, end


def _number_range(value: object, key: str, low: int, high: int | None) -> Range:
    def one(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"{key}: {text!r} is not a number") from None
        if n < low or (high is not None and n > high):
            raise ValueError(f"{key}: {n} is out of range")
        return n
    start, end = (one(p) for p in _bounds(value, key))
    if start > end:
        raise ValueError(f"{key}: {value!r} starts after it ends")
    return start, end


def _day_range(value: object) -> Range:
    start, end = (int(p) if p.lstrip("-").isdigit() else _not_a_day(p)
                  for p in _bounds(value, "days_of_month"))
    for day in (start, end):
        if day == 0 or not -31 <= day <= 31:
            raise ValueError(f"days_of_month: {day} is out of range (1 to 31, -1 to -31)")
    # Alertmanager's checks: a negative start needs a negative end, and a range that is
    # backwards even in the shortest month (28 days) is refused.
    if start < 0 < end:
        raise ValueError(f"days_of_month: {value!r}: the end must be negative when the "
                         "start is")
    if (start if start > 0 else 28 + start) > (end if end > 0 else 28 + end):
        raise ValueError(f"days_of_month: {value!r}: the end is always before the start")
    return start, end


def _not_a_day(text: str) -> int:
    raise ValueError(f"days_of_month: {text!r} is not a day")


def _location(value: object) -> tzinfo:
    if value is None or value == "UTC":
        return UTC
    if not isinstance(value, str):
        raise ValueError("location: expected an IANA time zone name")
    if value == "Local":
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else UTC
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"location: unknown time zone {value!r}") from None
