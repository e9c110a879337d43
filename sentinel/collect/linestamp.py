"""A log line's own time, from the stamp it starts with, where that stamp is plausible.

A file (or a command's plain output) carries no time but the one its lines
print. The incident's clock starts at the first evidence, so a crash line
read a few seconds after it was written should count from its stamp, not
from the poll that read it. Stamps read here, at the start of the line:

- ISO 8601 / RFC 3339 (`2026-12-07T10:00:01.123Z`, `2026-12-07 10:00:01,123`,
  with or without a zone: none means UTC), also inside `[...]`;
- vLLM's and SGLang's logger prefix (`INFO 12-07 10:00:01 [...]`, after an
  optional `(APIServer pid=1) `), which has no year and no zone: the year
  is the reader's, UTC assumed (vLLM's containers run in UTC);
- syslog's (`Dec  7 10:00:01 host ...`), likewise without a year.

Plausible: no more than `PAST_MS` before the line was read (a stamp that
old is a server in another time zone, or a line read long after it was
written, when the read time is the better clock for what Sentinel saw) and
no more than `FUTURE_MS` after. Anything else keeps the read time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

PAST_MS = 10 * 60_000  # the incidents' evidence window: an older stamp is not this failure's
FUTURE_MS = 60_000  # clocks of two hosts disagree by this much at most

_ISO = re.compile(r"^\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
                  r" ?(Z|[+-]\d\d:?\d\d)?")
_PYLOG = re.compile(r"^(?:\([A-Za-z_0-9]+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                    r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_SYSLOG = re.compile(r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) "
                     r"(\d\d):(\d\d):(\d\d) ")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def line_time_ms(text: str, read_ms: int) -> int:
    """The line's own time where it starts with a plausible stamp, else `read_ms`."""
    stamp = stamp_ms(text, read_ms)
    if stamp is None or not read_ms - PAST_MS <= stamp <= read_ms + FUTURE_MS:
        return read_ms
    return stamp


def stamp_ms(text: str, read_ms: int) -> int | None:
    """The time the line's leading stamp says (ms since the epoch), or None.

    `read_ms` gives the year to stamps that print none (the year before when
    that would put the stamp in the future, at New Year).
    """
    m = _ISO.match(text)
    if m is not None:
        y, mo, d, h, mi, s, frac, zone = m.groups()
        base = _at(int(y), int(mo), int(d), int(h), int(mi), int(s), frac)
        return None if base is None else base - _offset_ms(zone)
    m = _PYLOG.match(text)
    if m is not None:
        mo, d, h, mi, s, frac = m.groups()
        return _yearless(read_ms, int(mo), int(d), int(h), int(mi), int(s), frac)
    m = _SYSLOG.match(text)
    if m is not None:
        mon, d, h, mi, s = m.groups()
        return _yearless(read_ms, _MONTHS.index(mon) + 1, int(d), int(h), int(mi), int(s), None)
    return None


def _yearless(read_ms: int, *parts: int | str | None) -> int | None:
    year = datetime.fromtimestamp(read_ms / 1000, UTC).year
    for y in (year, year - 1):
        at = _at(y, *parts)  # type: ignore[arg-type]
        if at is not None and at <= read_ms + FUTURE_MS:
            return at
    return None


def _at(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None) -> int | None:
    try:
        dt = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    except ValueError:
        return None
    ms = int((frac or "0").ljust(3, "0")[:3])
    return int(dt.timestamp()) * 1000 + ms


def _offset_ms(zone: str | None) -> int:
    if not zone or zone == "Z":
        return 0
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return sign * int(timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])).total_seconds()
                      * 1000)
