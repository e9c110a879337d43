"""Turn a Cloud Logging entry's payload into bounded, printable text.

textPayload is used as is; jsonPayload gives its `message` (Python logging,
the Ops Agent) or `MESSAGE` (journald) field, else a compact JSON dump;
other payloads are dumped. What comes out is bounded (an enormous payload is
cut, and the cut is marked) and printable (NULs, other control characters
and lone surrogates, which would break the database and terminals, become
U+FFFD). Each oddity is reported as a reason, for the source's counters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_CHARS = 64 * 1024
# Control characters but tab and newlines, and lone UTF-16 surrogates (from "\udc80"
# in the JSON), which cannot be encoded as UTF-8.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_MESSAGE_KEYS = ("message", "MESSAGE", "msg")


@dataclass(frozen=True, slots=True)
class EntryText:
    """The text of one entry, and what was wrong with the entry (empty when nothing)."""

    text: str
    problems: tuple[str, ...] = ()


def entry_text(payload: Any, max_chars: int = DEFAULT_MAX_CHARS) -> EntryText:
    """The printable text of a payload, at most `max_chars` characters plus a cut marker."""
    problems: list[str] = []
    if isinstance(payload, str):
        text = payload
    elif isinstance(payload, dict):
        text = _message(payload)
    elif payload is None:
        text = ""
    else:
        problems.append("payload_not_object")
        text = _dump(payload)
    if len(text) > max_chars:
        problems.append("payload_truncated")
        text = f"{text[:max_chars]} …[truncated {len(text) - max_chars} chars]"
    clean = _printable(text)
    if clean != text:
        problems.append("binary_replaced")
    return EntryText(clean, tuple(problems))


def _message(payload: dict[str, Any]) -> str:
    for key in _MESSAGE_KEYS:
        value = payload.get(key)
        if isinstance(value, str):
            return value
    return _dump(payload)


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _printable(text: str) -> str:
    return _UNPRINTABLE.sub("\ufffd", text)
