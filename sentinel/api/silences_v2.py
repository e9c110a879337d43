"""Alertmanager API v2's silences over Sentinel's `silences` table, so `amtool` works unchanged.

GettableSilence: {id, status: {state}, updatedAt, matchers: [{name, value,
isRegex, isEqual}], startsAt, endsAt, createdBy, comment}. Ids are UUIDs,
as Alertmanager's; a silence's integer id (what the CLI shows, and what
API v2 showed before migration 0010) still finds it. Updating a silence by posting it with its id is
Alertmanager's "expire the old one, create a new one", done the same way here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sentinel.api.history import iso
from sentinel.incidents.db import Database
from sentinel.respond.notify.matchers import make_matcher
from sentinel.respond.notify.silences import (
    SilenceError,
    SilenceView,
    add_silence,
    expire_silence,
    list_silences,
)

_OPS = {(False, True): "=", (False, False): "!=", (True, True): "=~", (True, False): "!~"}


def list_v2(db: Database, now_ms: int) -> list[dict[str, Any]]:
    """Every silence, newest first, in API v2 form."""
    return [_gettable(s) for s in list_silences(db, now_ms, include_expired=True)]


def get_v2(db: Database, silence_id: str, now_ms: int) -> dict[str, Any] | None:
    """One silence by UUID or integer id, in API v2 form; None when there is none."""
    key = silence_id.strip().lower()
    for s in list_silences(db, now_ms, include_expired=True):
        if key in (s.uuid, str(s.id)):
            return _gettable(s)
    return None


def _gettable(s: SilenceView) -> dict[str, Any]:
    from sentinel.respond.notify.matchers import parse_matcher

    matchers = [parse_matcher(m) for m in s.matchers]
    return {
        "id": s.uuid or str(s.id), "status": {"state": s.state}, "updatedAt": iso(s.starts_at),
        "matchers": [{"name": m.name, "value": m.value, "isRegex": str(m.op) in ("=~", "!~"),
                      "isEqual": str(m.op) in ("=", "=~")} for m in matchers],
        "startsAt": iso(s.starts_at), "endsAt": iso(s.ends_at),
        "createdBy": s.created_by, "comment": s.comment}


def create_v2(db: Database, body: Mapping[str, Any], author: str, now_ms: int) -> str:
    """Store a PostableSilence; returns its UUID. ValueError says which field is wrong."""
    if not isinstance(body, Mapping):
        raise ValueError("body must be a JSON object (PostableSilence)")
    raw = body.get("matchers")
    if not isinstance(raw, list) or not raw:
        raise ValueError("matchers: at least one matcher is required")
    matchers = []
    for i, m in enumerate(raw):
        if not isinstance(m, Mapping) or not isinstance(m.get("name"), str) \
                or not isinstance(m.get("value"), str):
            raise ValueError(f"matchers[{i}]: needs name and value")
        op = _OPS[(bool(m.get("isRegex", False)), bool(m.get("isEqual", True)))]
        matchers.append(make_matcher(m["name"], op, m["value"]))
    starts = _time(body.get("startsAt"), "startsAt", now_ms)
    ends = _time(body.get("endsAt"), "endsAt", None)
    comment = str(body.get("comment") or "")
    if not comment:
        raise ValueError("comment: required")
    given = str(body.get("createdBy") or "")
    created_by = author if not given or given == author else f"{given} (token {author})"
    old = body.get("id")
    if old:
        try:
            expire_silence(db, str(old), now_ms)
        except (SilenceError, ValueError):
            pass  # unknown or already expired: a new silence it is
    new_id = str(uuid.uuid4())
    try:
        add_silence(db, matchers, max(starts, now_ms) if old else starts, ends, created_by,
                    comment, now_ms, uuid=new_id)
        return new_id
    except SilenceError as exc:
        raise ValueError(str(exc)) from None


def _time(value: Any, name: str, default: int | None) -> int:
    if value in (None, "") and default is not None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"{name}: required RFC 3339 time")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: not an RFC 3339 time") from None
    if dt.tzinfo is None:
        raise ValueError(f"{name}: needs a time zone")
    return int(dt.timestamp() * 1000)
