"""Incident history for people and programs: filtered keyset pages and one incident in full.

Both return plain JSON-ready dicts (the API's response bodies), which the
page renders and MCP hands to assistants, so every surface shows the same data.

Listing is newest first by (opened_at, id). The cursor is the last row's
(opened_at, id); the next page asks `opened_at <= t AND (opened_at < t OR
id < i)`, an index range scan on (filter column, opened_at, id) whatever the
table's size, and a row inserted meanwhile shifts no page (no duplicate, no gap).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select

from sentinel.api import fleet_view, told
from sentinel.api.errors import ApiError
from sentinel.api.params import (
    choice_param,
    cursor_param,
    encode_cursor,
    int_param,
    str_param,
    time_param,
)
from sentinel.api.timefmt import iso
from sentinel.incidents.convert import dt_to_ms, ms_to_dt, value_from_db
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert, TimelineEvent, TimelineKind
from sentinel.incidents.models_api import Approval
from sentinel.incidents.models_remediation import RemediationAttempt

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TIMELINE = 2000  # events of one incident returned at most (newest kept)
FILTERS = ("status", "alertname", "target", "category", "since", "until", "limit", "cursor")


def list_incidents(db: Database, params: Mapping[str, str], now_ms: int) -> dict[str, Any]:
    """One page of incidents matching the filters: {"incidents": [...], "next_cursor": ...}."""
    unknown = sorted(set(params) - set(FILTERS))
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: {', '.join(FILTERS)})",
                       unknown[0])
    status = choice_param(params, "status", ("open", "resolved"))
    since = time_param(params, "since", now_ms)
    until = time_param(params, "until", now_ms)
    limit = int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    cursor = cursor_param(params)
    # The alert counts ride along as correlated subqueries (two index probes per row):
    # one round trip per page, which is what a loaded PostgreSQL server makes you pay for.
    n_alerts = (select(func.count()).where(IncidentAlert.incident_id == Incident.id)
                .correlate(Incident).scalar_subquery())
    n_firing = (select(func.count()).where(IncidentAlert.incident_id == Incident.id,
                                           IncidentAlert.state == "firing")
                .correlate(Incident).scalar_subquery())
    q = select(Incident.id, Incident.alertname, Incident.target, Incident.status,
               Incident.severity, Incident.summary, Incident.category, Incident.opened_at,
               Incident.resolved_at, Incident.updated_at, Incident.acknowledged_by,
               Incident.owner, n_alerts.label("n_alerts"),
               n_firing.label("n_firing"))
    # Ordering by the (constant) filter column first names its (column, opened_at, id)
    # index to the planner: PostgreSQL otherwise walks opened_at and filters, which is
    # slow when the newest rows do not match (status=resolved behind 10,000 open ones).
    prefix: list[Any] = []
    if status is not None:
        q = q.where(Incident.status == status)
        prefix.append(Incident.status.desc())
    for name, column in (("alertname", Incident.alertname), ("target", Incident.target),
                         ("category", Incident.category)):
        value = str_param(params, name)
        if value is not None:
            q = q.where(column == value)
            prefix = prefix or [column.desc()]
    if since is not None:
        q = q.where(Incident.opened_at >= ms_to_dt(since))
    if until is not None:
        q = q.where(Incident.opened_at < ms_to_dt(until))
    if cursor is not None:
        at = ms_to_dt(cursor[0])
        q = q.where(Incident.opened_at <= at,
                    or_(Incident.opened_at < at, and_(Incident.opened_at == at,
                                                      Incident.id < cursor[1])))
    q = q.order_by(*prefix[:1], Incident.opened_at.desc(), Incident.id.desc()).limit(limit + 1)
    with db.session() as s:
        rows = s.execute(q).all()
        more = len(rows) > limit
        rows = rows[:limit]
        marks = _told_markers(s, [r.id for r in rows])
        # A fleet incident has no alerts of its own: its members are its count (issue 49).
        fleets = fleet_view.list_marks(s, [r.id for r in rows])
    items = [{**_summary(r, (int(r.n_alerts), int(r.n_firing))), "told": marks.get(r.id),
              "fleet": fleets.get(r.id, {}).get("fleet"),
              "fleet_incident_id": fleets.get(r.id, {}).get("fleet_incident_id")}
             for r in rows]
    last = rows[-1] if rows else None
    return {"incidents": items,
            "next_cursor": encode_cursor(dt_to_ms(last.opened_at), last.id)
            if more and last is not None else None}


_TOLD_KINDS = (TimelineKind.NOTIFICATION_SENT, TimelineKind.NOTIFICATION_FAILED,
               TimelineKind.NOTE)


def _told_markers(s: Any, ids: list[int]) -> dict[int, dict[str, Any] | None]:
    """Each listed incident's "who was told" marker: one query over the page's ids (the
    (incident_id, at, id) index), folded by `told.markers`."""
    if not ids:
        return {}
    rows = s.execute(select(TimelineEvent.incident_id, TimelineEvent.at, TimelineEvent.kind,
                            TimelineEvent.message, TimelineEvent.data)
                     .where(TimelineEvent.incident_id.in_(ids),
                            TimelineEvent.kind.in_([k.value for k in _TOLD_KINDS]))
                     .order_by(TimelineEvent.incident_id, TimelineEvent.at, TimelineEvent.id))
    timelines: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    for r in rows:
        timelines[int(r.incident_id)].append({"at": iso(r.at), "kind": r.kind,
                                              "message": r.message, "data": r.data})
    return told.markers(timelines)


def _summary(r: Any, counts: tuple[int, int]) -> dict[str, Any]:
    return {"id": r.id, "alertname": r.alertname, "target": r.target, "status": r.status,
            "severity": r.severity, "summary": r.summary, "category": r.category,
            "opened_at": iso(r.opened_at), "resolved_at": iso(r.resolved_at),
            "updated_at": iso(r.updated_at), "alerts": counts[0], "firing": counts[1],
            "acknowledged_by": r.acknowledged_by, "owner": r.owner,
            # opened → resolved; None while open (the page shows "–").
            "duration_ms": (dt_to_ms(r.resolved_at) - dt_to_ms(r.opened_at)
                            if r.resolved_at is not None and r.opened_at is not None else None)}


def get_incident(db: Database, incident_id: int) -> dict[str, Any]:
    """One incident: summary, alerts, timeline, runbooks, excerpts, actions, notifications."""
    with db.session() as s:
        inc = s.get(Incident, incident_id)
        if inc is None:
            raise ApiError(404, f"no incident {incident_id}")
        alerts = s.scalars(select(IncidentAlert).where(IncidentAlert.incident_id == incident_id)
                           .order_by(IncidentAlert.fired_at, IncidentAlert.fingerprint)).all()
        events = list(reversed(s.scalars(
            select(TimelineEvent).where(TimelineEvent.incident_id == incident_id)
            .order_by(TimelineEvent.at.desc(), TimelineEvent.id.desc())
            .limit(MAX_TIMELINE)).all()))
        attempts = s.scalars(select(RemediationAttempt).where(
            RemediationAttempt.incident_id == incident_id).order_by(RemediationAttempt.id)).all()
        approvals = s.scalars(select(Approval).where(Approval.incident_id == incident_id)
                              .order_by(Approval.id)).all()
        timeline = [{"id": e.id, "at": iso(e.at), "kind": e.kind, "message": e.message,
                     "data": e.data} for e in events]
        fleet, member_of = fleet_view.detail(s, inc, timeline)
    firing = sum(1 for a in alerts if a.state == "firing")
    return {
        "incident": {**_summary(inc, (len(alerts), firing)), "labels": dict(inc.labels),
                     "detect_ms": inc.detect_ms, "evidence_at": iso(inc.evidence_at),
                     "time_to_detect_ms": inc.detect_ms,
                     "time_to_recovery_ms": inc.recovery_ms,
                     # What people did (issue 37): who took it, who owns it.
                     "acknowledged_at": iso(inc.acknowledged_at),
                     "diagnosis_requested_at": iso(inc.diagnosis_requested_at),
                     # Issue 49: the fleet incident it joined (a member), and on a fleet
                     # incident its count (as the list shows it).
                     "fleet_incident_id": member_of["incident_id"] if member_of else None,
                     "fleet": {"members": fleet["members_now"],
                               "joined": fleet["members_joined"]} if fleet else None},
        # A fleet incident: members now, at peak, joined; size, breakdown, the members.
        "fleet": fleet,
        # A member: the fleet incident it joined (id, status, summary, quiet).
        "fleet_incident": member_of,
        "alerts": [{"fingerprint": a.fingerprint, "labels": dict(a.labels),
                    "annotations": dict(a.annotations), "state": a.state,
                    "value": _num(value_from_db(a.value)), "active_at": iso(a.active_at),
                    "fired_at": iso(a.fired_at), "resolved_at": iso(a.resolved_at)}
                   for a in alerts],
        "timeline": timeline,
        # Who was told, who was not and why, at a glance (issue 48).
        "told": told.summary(timeline),
        "runbooks": [t for t in timeline if t["kind"] == TimelineKind.RUNBOOK],
        "log_excerpts": [t for t in timeline if t["kind"] == TimelineKind.LOG_EXCERPT],
        "actions": [{"id": a.id, "action": a.action, "policy": a.policy, "step": a.step,
                     "manual": a.manual, "status": a.status,
                     "requested_at": iso(a.requested_at), "acted_at": iso(a.acted_at),
                     "finished_at": iso(a.finished_at), "recovery_ms": a.recovery_ms,
                     "detail": a.detail} for a in attempts],
        "decisions": [t for t in timeline if t["kind"] == TimelineKind.ACTION],
        "approvals": [approval_view(a) for a in approvals],
        "notifications": [t for t in timeline if t["kind"] in (
            TimelineKind.NOTIFICATION_SENT, TimelineKind.NOTIFICATION_FAILED)],
    }


def approval_view(a: Approval) -> dict[str, Any]:
    """An approval as the API shows it."""
    return {"id": a.id, "incident_id": a.incident_id, "target": a.target, "policy": a.policy,
            "step": a.step, "action": a.action, "plan": a.plan, "alertname": a.alertname,
            "status": a.status, "requested_at": iso(a.requested_at),
            "expires_at": iso(a.expires_at), "decided_at": iso(a.decided_at),
            "decided_by": a.decided_by, "attempt_id": a.attempt_id, "detail": a.detail}


def incident_window_ms(detail: Mapping[str, Any], now_ms: int) -> tuple[int, int]:
    """The time range links out (a dashboard, a graph) show: as long before the incident
    opened as it lasted (1–10 min), to half that after it resolved (or now)."""
    inc = detail["incident"]
    opened = _parse_ms(inc["opened_at"])
    resolved = _parse_ms(inc["resolved_at"]) if inc["resolved_at"] else now_ms
    margin = min(600_000, max(60_000, resolved - opened))
    return opened - margin, min(now_ms, resolved + margin // 2)


def _parse_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _num(v: float) -> float | str:
    return v if v == v and v not in (float("inf"), float("-inf")) else str(v)


__all__ = ["approval_view", "get_incident", "incident_window_ms", "iso", "list_incidents"]
