"""Alertmanager API v2's alert reads over Sentinel's incidents, so amtool and Grafana read them.

`GET /api/v2/alerts` answers gettableAlerts: {labels, annotations, startsAt,
endsAt, updatedAt, fingerprint, receivers: [{name}], status: {state,
silencedBy, inhibitedBy}, generatorURL}; `GET /api/v2/alerts/groups` answers
alertGroups: {labels, receiver: {name}, alerts}, one per route, receiver and
group labels, as Alertmanager's dispatcher groups them. The alerts are those
firing in open incidents; receivers, silences and inhibitions are decided by
the same routing tree, silences and rules the dispatcher uses.

Query parameters as Alertmanager's: `filter` (repeatable matchers, e.g.
`alertname="X"`), `active`, `silenced`, `inhibited`, `unprocessed` (booleans,
default true) and `receiver` (a regex, fully anchored, over receiver names).
Sentinel has processed every alert it lists, so none is ever `unprocessed`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from sentinel.api.errors import ApiError, bad_param
from sentinel.config.notify import DEFAULT_RESEND_INTERVAL_MS
from sentinel.incidents.convert import dt_to_ms, labels_from_json, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert, IncidentAlertState, IncidentStatus
from sentinel.incidents.models_notify import SilenceRow
from sentinel.model import Labels, fingerprint
from sentinel.respond.notify.alertmanager import ENDS_AT_INTERVALS
from sentinel.respond.notify.matchers import Matcher, from_lists, matches_all, parse_matcher
from sentinel.respond.notify.mute import InhibitRule, inhibited_by
from sentinel.respond.notify.payload import generator_url, rfc3339
from sentinel.respond.notify.routing import Route, build_route, match_routes

# An active alert's endsAt: as far ahead as Sentinel pushes it to an Alertmanager.
ENDS_AHEAD_MS = ENDS_AT_INTERVALS * DEFAULT_RESEND_INTERVAL_MS


@dataclass(frozen=True, slots=True)
class AlertRouting:
    """What the alert reads need from the notify config: the routing tree and inhibition."""

    route: Route | None = None
    inhibit_rules: tuple[InhibitRule, ...] = ()

    @classmethod
    def from_config(cls, config: Any) -> AlertRouting:
        """From a loaded `Config` (its `notify` section and receiver names)."""
        names = [r.name for r in config.receivers]
        return cls(build_route(config.notify.route, names),
                   tuple(InhibitRule.from_config(r) for r in config.notify.inhibit_rules))


@dataclass(frozen=True, slots=True)
class AlertQuery:
    """The parsed query parameters of both endpoints."""

    matchers: tuple[Matcher, ...] = ()
    active: bool = True
    silenced: bool = True
    inhibited: bool = True
    unprocessed: bool = True
    receiver: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, filters: Sequence[str], params: Mapping[str, str]) -> AlertQuery:
        """400 (naming the parameter) for a bad matcher, boolean or regex."""
        try:
            matchers = tuple(parse_matcher(f) for f in filters)
        except ValueError as exc:
            raise bad_param("filter", str(exc)) from None
        receiver = None
        if params.get("receiver"):
            try:
                receiver = re.compile(params["receiver"])
            except re.error as exc:
                raise bad_param("receiver", f"invalid regex: {exc}") from None
        return cls(matchers, active=_bool(params, "active"), silenced=_bool(params, "silenced"),
                   inhibited=_bool(params, "inhibited"),
                   unprocessed=_bool(params, "unprocessed"), receiver=receiver)

    def wants(self, alert: dict[str, Any]) -> bool:
        """Alertmanager's alertFilter: state flags, then receivers."""
        status = alert["status"]
        if not self.active and status["state"] == "active":
            return False
        if not self.silenced and status["silencedBy"]:
            return False
        if not self.inhibited and status["inhibitedBy"]:
            return False
        if self.receiver is not None and not any(
                self.receiver.fullmatch(r["name"]) for r in alert["receivers"]):
            return False
        return True


def _bool(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "true").lower()
    if value not in ("true", "false", "1", "0"):
        raise bad_param(name, "expected true or false")
    return value in ("true", "1")


def list_alerts(db: Database, routing: AlertRouting, query: AlertQuery, external_url: str,
                now_ms: int) -> list[dict[str, Any]]:
    """gettableAlerts: every alert firing in an open incident that the query selects."""
    return [a for a, _ in _alerts(db, routing, query, external_url, now_ms)]


def list_groups(db: Database, routing: AlertRouting, query: AlertQuery, external_url: str,
                now_ms: int) -> list[dict[str, Any]]:
    """alertGroups: the selected alerts grouped per route, receiver and group labels."""
    groups: dict[str, dict[str, Any]] = {}
    for alert, labels in _alerts(db, routing, query, external_url, now_ms):
        for route in _routes(routing, labels):
            if query.receiver is not None and not query.receiver.fullmatch(route.receiver):
                continue
            key = route.group_key(labels)
            group = groups.setdefault(key, {
                "labels": dict(route.group_labels(labels)), "receiver": {"name": route.receiver},
                "alerts": []})
            group["alerts"].append(alert)
    return [groups[k] for k in sorted(groups)]


def _alerts(db: Database, routing: AlertRouting, query: AlertQuery, external_url: str,
            now_ms: int) -> list[tuple[dict[str, Any], Labels]]:
    now = ms_to_dt(now_ms)
    with db.session() as s:
        rows = s.execute(select(IncidentAlert, Incident.id).join(Incident).where(
            Incident.status == IncidentStatus.OPEN,
            IncidentAlert.state == IncidentAlertState.FIRING).order_by(
            IncidentAlert.fired_at, IncidentAlert.fingerprint)).all()
        silences = [(silence_id(r), from_lists(r.matchers)) for r in s.scalars(
            select(SilenceRow).where(SilenceRow.starts_at <= now, SilenceRow.ends_at > now)
            .order_by(SilenceRow.id))]
    firing = [labels_from_json(a.labels) for a, _ in rows]
    out = []
    for row, incident_id in rows:
        labels = labels_from_json(row.labels)
        if not matches_all(query.matchers, labels):
            continue
        alert = _gettable(row, incident_id, labels, silences, routing, firing, external_url,
                          now_ms)
        if query.wants(alert):
            out.append((alert, labels))
    return out


def _gettable(row: IncidentAlert, incident_id: int, labels: Labels,
              silences: Sequence[tuple[str, tuple[Matcher, ...]]], routing: AlertRouting,
              firing: Sequence[Labels], external_url: str, now_ms: int) -> dict[str, Any]:
    silenced = [sid for sid, ms in silences if matches_all(ms, labels)]
    inhibited = _inhibitors(labels, routing.inhibit_rules, firing)
    receivers: list[str] = []
    for route in _routes(routing, labels):
        if route.receiver not in receivers:
            receivers.append(route.receiver)
    updated = row.value_recorded_at or row.fired_at
    return {
        "labels": dict(labels), "annotations": dict(row.annotations),
        "startsAt": rfc3339(dt_to_ms(row.fired_at)), "updatedAt": rfc3339(dt_to_ms(updated)),
        "endsAt": rfc3339(now_ms + ENDS_AHEAD_MS), "fingerprint": row.fingerprint,
        "receivers": [{"name": r} for r in receivers],
        "status": {"state": "suppressed" if silenced or inhibited else "active",
                   "silencedBy": silenced, "inhibitedBy": inhibited},
        "generatorURL": generator_url(external_url, incident_id),
    }


def _inhibitors(labels: Labels, rules: Sequence[InhibitRule], firing: Sequence[Labels]
                ) -> list[str]:
    """Fingerprints of every firing alert that inhibits this one (Alertmanager lists all)."""
    out: list[str] = []
    for source in firing:
        if inhibited_by(labels, rules, [source]) is not None:
            out.append(fingerprint(source))
    return out


def _routes(routing: AlertRouting, labels: Labels) -> list[Route]:
    return match_routes(routing.route, labels) if routing.route is not None else []


def silence_id(row: SilenceRow) -> str:
    """The id a silence is known by in API v2 (its UUID; the integer of an old row)."""
    return row.uuid or str(row.id)


def not_found(sid: str) -> ApiError:
    """404 for a silence id."""
    return ApiError(404, f"no silence {sid}")
