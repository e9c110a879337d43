"""Alerts and rules as Prometheus's /api/v1/alerts and /api/v1/rules answer them.

Read from the live rule manager (health, last evaluation, duration, error, the
active alerts) and the loaded rule groups (expression, `for`, labels). Each
alert also carries its `for` progress: when it would fire and how much of
`for` has elapsed, which Prometheus leaves to the reader. Filters: `state`
(inactive, pending, firing) and `label`, one or more matchers such as
`target="tpu-a"` (all must match an alert; a rule matches when one of its
alerts, or its own labels, do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sentinel.api.errors import ApiError
from sentinel.model import Alert, AlertState
from sentinel.promql.floatops import format_float
from sentinel.respond.notify.matchers import Matcher, matches_all, parse_matcher
from sentinel.rules.loader import AlertingRule

STATES = ("inactive", "pending", "firing")


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def filters(params: Mapping[str, str], labels: Sequence[str]) -> tuple[str | None,
                                                                        list[Matcher]]:
    """(state, matchers) from the query; 400 on an unknown state or a bad matcher."""
    state = params.get("state") or None
    if state is not None and state not in STATES:
        raise ApiError(400, f"bad parameter 'state': one of {', '.join(STATES)}", "state")
    try:
        matchers = [parse_matcher(m) for text in labels for m in text.split() if m]
    except ValueError as exc:
        raise ApiError(400, f"bad parameter 'label': {exc}", "label") from None
    return state, matchers


def _matches(labels: Mapping[str, str], matchers: Iterable[Matcher]) -> bool:
    return matches_all(matchers, tuple(sorted(labels.items())))


def alert_view(a: Alert, rule: Any, now_ms: int) -> dict[str, Any]:
    """One active alert, Prometheus's fields plus its `for` progress."""
    for_ms = int(getattr(rule, "for_ms", 0) or 0)
    elapsed = max(0, now_ms - a.active_at_ms)
    fires_at = a.active_at_ms + for_ms
    return {"labels": dict(a.labels), "annotations": dict(a.annotations),
            "state": str(a.state), "activeAt": _iso(a.active_at_ms),
            "value": format_float(a.value), "firedAt": _iso(a.fired_at_ms),
            "forSeconds": for_ms / 1000,
            "firesAt": _iso(fires_at) if a.state == AlertState.PENDING else _iso(a.fired_at_ms),
            "forElapsed": (1.0 if for_ms == 0 or a.state == AlertState.FIRING
                           else round(min(1.0, elapsed / for_ms), 4))}


def rules_data(manager: Any, groups: Sequence[Any], now_ms: int, state: str | None,
               matchers: Sequence[Matcher]) -> dict[str, Any]:
    """{"groups": [...]} in /api/v1/rules's shape, filtered."""
    health = {(s.group, s.rule): s for s in (manager.rule_health() if manager else ())}
    alerts: dict[tuple[str, str], list[Alert]] = {}
    for a in manager.active_alerts() if manager else ():
        alerts.setdefault((a.group, a.rule), []).append(a)
    intervals = manager.groups if manager else {}  # the default filled in for unset ones
    out = []
    for g in groups:
        rules = []
        for rule in g.rules:
            h = health.get((g.name, rule.name))
            mine = alerts.get((g.name, rule.name), [])
            view = _rule_view(rule, h, mine, now_ms)
            if state is not None and view.get("state", "inactive") != state:
                continue
            if matchers and not (_matches(view["labels"], matchers)
                                 or any(_matches(x["labels"], matchers) for x in view["alerts"])):
                continue
            rules.append(view)
        if rules or not (state or matchers):
            evals = [r["lastEvaluation"] for r in rules if r["lastEvaluation"]]
            out.append({"name": g.name, "file": g.file,
                        "interval": (intervals.get(g.name) or g.interval_ms or 0) / 1000,
                        "limit": g.limit,
                        "rules": rules, "lastEvaluation": max(evals, default=None),
                        "evaluationTime": sum(r["evaluationTime"] for r in rules)})
    return {"groups": out}


def _rule_view(rule: Any, h: Any, mine: Sequence[Alert], now_ms: int) -> dict[str, Any]:
    common = {"name": rule.name, "query": str(rule.expr), "labels": dict(rule.labels),
              "health": str(h.health) if h else "unknown",
              "lastError": h.last_error if h else "",
              "evaluationTime": h.last_duration_s if h else 0.0,
              "lastEvaluation": _iso(h.last_eval_ms) if h else None}
    if not isinstance(rule, AlertingRule):
        return {**common, "type": "recording", "alerts": []}
    views = [alert_view(a, rule, now_ms) for a in mine if a.state != AlertState.INACTIVE]
    states = {v["state"] for v in views}
    state = "firing" if "firing" in states else "pending" if "pending" in states else "inactive"
    return {**common, "type": "alerting", "state": state, "duration": rule.for_ms / 1000,
            "keepFiringFor": rule.keep_firing_for_ms / 1000,
            "annotations": dict(rule.annotations), "alerts": views}


def alerts_data(manager: Any, groups: Sequence[Any], now_ms: int, state: str | None,
                matchers: Sequence[Matcher]) -> dict[str, Any]:
    """{"alerts": [...]} in /api/v1/alerts's shape (pending and firing), filtered."""
    by_name = {(g.name, r.name): r for g in groups for r in g.rules}
    out = []
    for a in manager.active_alerts() if manager else ():
        if a.state == AlertState.INACTIVE:
            continue
        view = alert_view(a, by_name.get((a.group, a.rule)), now_ms)
        if state is not None and view["state"] != state:
            continue
        if matchers and not _matches(view["labels"], matchers):
            continue
        out.append(view)
    out.sort(key=lambda v: (v["state"] != "firing", v["activeAt"] or ""))
    return {"alerts": out}

