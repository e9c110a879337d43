"""Incidents as Grafana annotations: `GET /api/v1/annotations?from=…&to=…`.

Shaped for Grafana's Infinity data source (JSON, format "Data Frame"), whose
annotation queries want a time column, an optional end time, a text, a
title and comma-separated tags: a flat JSON array, one object per incident
whose span [opened, resolved] overlaps [from, to], newest first. `from` and
`to` are epoch milliseconds, as Grafana's `${__from}` and `${__to}` expand.
An open incident's region ends now (`timeEnd`), and says `open`.

Read from the database, not the series store: an incident of last week is
annotated on last week's graphs whatever the store's retention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import or_, select

from sentinel.api.errors import ApiError, bad_param
from sentinel.api.params import MAX_TIME_MS, int_param, str_param
from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident

PARAMS = ("from", "to", "target", "alertname", "limit")
DEFAULT_LIMIT = 500
MAX_LIMIT = 5000
DEFAULT_SPAN_MS = 6 * 3600 * 1000  # Grafana's default time range, when `from` is not given


def _ms(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_TIME_MS:
        raise bad_param(name, "expected epoch milliseconds (Grafana's ${__from}, ${__to})")
    return int(raw)


def incident_annotations(db: Database, params: Mapping[str, str], now_ms: int
                         ) -> list[dict[str, Any]]:
    """The incidents overlapping [from, to] as annotation rows, newest first."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: {', '.join(PARAMS)})",
                       unknown[0])
    to = _ms(params, "to", now_ms)
    start = _ms(params, "from", to - DEFAULT_SPAN_MS)
    if to < start:
        raise bad_param("to", "must not be before from")
    limit = int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    q = select(Incident).where(
        Incident.opened_at <= ms_to_dt(to),
        or_(Incident.resolved_at.is_(None), Incident.resolved_at >= ms_to_dt(start)))
    for name, column in (("target", Incident.target), ("alertname", Incident.alertname)):
        value = str_param(params, name)
        if value is not None:
            q = q.where(column == value)
    q = q.order_by(Incident.opened_at.desc(), Incident.id.desc()).limit(limit)
    with db.session() as s:
        return [_row(i, now_ms) for i in s.scalars(q).all()]


def _row(i: Incident, now_ms: int) -> dict[str, Any]:
    opened = dt_to_ms(i.opened_at)
    resolved = dt_to_ms(i.resolved_at) if i.resolved_at is not None else None
    return {"id": i.id, "time": opened, "timeEnd": resolved if resolved is not None else now_ms,
            "title": f"{i.alertname} on {i.target}" if i.target else i.alertname,
            "text": f"#{i.id} {i.status} ({i.severity}): {i.summary or i.alertname}",
            "tags": ",".join(t for t in ("sentinel", i.alertname, i.target, i.severity,
                                         i.status) if t),
            "status": i.status, "severity": i.severity, "alertname": i.alertname,
            "target": i.target}
