"""The API's side of what people do to an incident (page, JSON API and MCP alike).

Each act is audited (token name, surface, what, outcome) whether it succeeds
or not, and its effect is on the incident's timeline (incidents/operator.py).
A silence made from an incident is the silence API's own (`create_silence`),
prefilled with the incident's alertname and target unless matchers are given,
and noted on the incident's timeline with its UUID.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from sentinel.api.auth import Principal
from sentinel.api.errors import ApiError
from sentinel.config.durations import parse_duration
from sentinel.incidents import operator
from sentinel.incidents.db import Database
from sentinel.incidents.operator import Done
from sentinel.respond.notify.matchers import parse_matcher

DEFAULT_SILENCE = "1h"


class ApiService(Protocol):
    """What the acts need of api/service.py's ApiService (which calls them)."""

    db: Database

    def now_ms(self) -> int: ...
    def incident(self, incident_id: int) -> dict[str, Any]: ...
    def audit(self, who: Principal, via: str, action: str, status: int, detail: str) -> None: ...
    def create_silence(self, body: Mapping[str, Any], who: Principal, via: str
                       ) -> dict[str, Any]: ...


def act(service: ApiService, incident_id: int, who: Principal, via: str, what: str,
        fn: Callable[[], Done]) -> dict[str, Any]:
    """Run one act; audit it; its outcome as JSON, or the ApiError that says why not."""
    action = f"{what} incident {incident_id}"
    try:
        done = fn()
    except LookupError:
        service.audit(who, via, action, 404, "no such incident")
        raise ApiError(404, f"no incident {incident_id}") from None
    except ValueError as exc:
        service.audit(who, via, action, 400, str(exc))
        raise ApiError(400, str(exc)) from None
    service.audit(who, via, action, 200, done.message)
    return {"incident": incident_id, "changed": done.changed, "message": done.message}


def incident_matchers(inc: Mapping[str, Any]) -> str:
    """A silence's default matchers for an incident: its alertname and target, as text."""
    labels = {"alertname": inc["alertname"], "target": inc["target"]}
    return " ".join(f'{k}="{_quote(v)}"' for k, v in labels.items() if v)


def silence_incident(service: ApiService, incident_id: int, body: Any, who: Principal,
                     via: str) -> dict[str, Any]:
    """POST /api/v1/incidents/{id}/silence: {matchers?: text or API v2 matchers,
    duration?: "1h", comment}. The silence's id, and the incident's timeline says so."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "body must be a JSON object")
    inc = service.incident(incident_id)["incident"]
    raw = body.get("matchers") or incident_matchers(inc)
    try:
        matchers = _matchers(raw)
        duration = parse_duration(str(body.get("duration") or DEFAULT_SILENCE))
    except ValueError as exc:
        service.audit(who, via, f"silence incident {incident_id}", 400, str(exc))
        raise ApiError(400, str(exc)) from None
    now = service.now_ms()
    ends = _iso(now + duration)
    created = service.create_silence({"matchers": matchers, "startsAt": _iso(now),
                                      "endsAt": ends, "comment": str(body.get("comment") or "")},
                                     who, via)
    text = " ".join(_matcher_text(m) for m in matchers)
    operator.note_silence(service.db, incident_id, created["silenceID"], text, ends, who.name,
                          now)
    return {"incident": incident_id, **created}


def _matchers(raw: Any) -> list[dict[str, Any]]:
    """API v2 matcher objects from text (`a="b" c=~"d.*"`) or from a list of them."""
    if isinstance(raw, list):
        return raw
    out = []
    for m in str(raw).split():
        parsed = parse_matcher(m)
        op = str(parsed.op)
        out.append({"name": parsed.name, "value": parsed.value, "isRegex": op in ("=~", "!~"),
                    "isEqual": op in ("=", "=~")})
    if not out:
        raise ValueError("matchers: at least one matcher is required")
    return out


def _matcher_text(m: Mapping[str, Any]) -> str:
    op = ("=" if m.get("isEqual", True) else "!") + ("~" if m.get("isRegex") else "")
    if op == "!":
        op = "!="
    return f'{m.get("name")}{op}"{_quote(str(m.get("value")))}"'


def _quote(v: str) -> str:
    return str(v).replace('"', '\\"')  # parse_matcher unquotes \" (and only that)


def _iso(ms: int) -> str:
    """RFC 3339 in UTC to the second, as people read it on the timeline."""
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
