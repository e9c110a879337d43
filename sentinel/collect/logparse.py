"""Parse the line formats of the command log sources: docker `--timestamps`, journald JSON."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

# RFC 3339 with nanoseconds, as `docker logs --timestamps` prefixes every line.
_DOCKER_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ?")
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """One line's text and time (ms), and where a restart could resume after it."""

    t_ms: int
    text: str
    resume_token: str | None = None
    t_ns: int | None = None  # the source's own time, at full precision, where it has one


def parse_rfc3339_ns(ts: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 timestamp (RFC3339Nano too), else None."""
    m = _DOCKER_TS.fullmatch(ts)
    if m is None:
        return None
    return _ns(m)


def _ns(m: re.Match[str]) -> int | None:
    base, frac, zone = m.group(1), m.group(2) or "", m.group(3)
    try:
        dt = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    return int(dt.timestamp()) * _NS + int(frac.ljust(9, "0"))


def parse_docker(text: str, now_ms: int) -> ParsedLine:
    """A `docker logs --timestamps` line; without a parsable prefix, the text as read now."""
    m = _DOCKER_TS.match(text)
    ns = _ns(m) if m is not None else None
    if m is None or ns is None:
        return ParsedLine(now_ms, text)
    token = text[: m.end()].rstrip()
    return ParsedLine(ns // 1_000_000, text[m.end() :], token, ns)


def parse_journal_json(text: str, now_ms: int) -> tuple[list[ParsedLine], str | None, str | None]:
    """One `journalctl -o json` record: (its message's lines, its cursor, an error or None).

    MESSAGE is a string, or an array of byte values where it is not valid
    UTF-8, or null where it is too big; __REALTIME_TIMESTAMP is microseconds
    as a decimal string. A line that is not such a record comes back as text.
    """
    try:
        record = json.loads(text)
    except ValueError:
        return [ParsedLine(now_ms, text)], None, f"not journal JSON: {text[:80]!r}"
    if not isinstance(record, dict):
        return [ParsedLine(now_ms, text)], None, f"not a journal record: {text[:80]!r}"
    cursor = record.get("__CURSOR")
    cursor = cursor if isinstance(cursor, str) else None
    t_ms = _journal_ms(record.get("__REALTIME_TIMESTAMP"), now_ms)
    message = _journal_message(record.get("MESSAGE"))
    if message is None:
        return [], cursor, None
    lines = message.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return [ParsedLine(t_ms, line, cursor) for line in lines], cursor, None


def _journal_ms(value: object, now_ms: int) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value) // 1000
    return now_ms


def _journal_message(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    return None
