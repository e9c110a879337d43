"""How often, how fast: counts and times per alertname, target or category over a window.

    detect    condition true → incident opened (`incidents.detect_ms`)
    recovery  alert active → verified remediation (the succeeded attempt's `recovery_ms`)
    resolve   incident opened → resolved (`incidents.resolve_ms`, written with resolved_at)
    resolved_by  "remediation" when a verified action preceded the resolution,
                 else "itself"; pages are NOTIFICATION_SENT events sent in the window

Three grouped, index-driven reads over the window: the incidents opened in
it (by opened_at), their verified attempts requested in it (by status and
requested_at) and their pages sent in it (by kind, at and incident). Each returns one
row per group; the durations come as one comma-joined string per group
(`group_concat` / `string_agg`), since fetching 82,000 rows one by one costs
more than the aggregation itself. Means and nearest-rank p90s are taken
here, as SQLite has no percentile function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Text, case, cast, func, literal, literal_column, select

from sentinel.api.errors import ApiError
from sentinel.api.history import iso
from sentinel.api.params import choice_param, time_param
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, TimelineEvent, TimelineKind
from sentinel.incidents.models_remediation import RemediationAttempt

DEFAULT_WINDOW_MS = 30 * 86_400_000
GROUPINGS = ("alertname", "target", "category")
PARAMS = ("since", "until", "by")
MAX_GROUPS = 200


def stats(db: Database, params: Mapping[str, str], now_ms: int) -> dict[str, Any]:
    """{"since", "until", "by", "total": {...}, "groups": [{"key", ...}]} for the window."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: {', '.join(PARAMS)})",
                       unknown[0])
    by = choice_param(params, "by", GROUPINGS, "alertname")
    assert by is not None
    since = time_param(params, "since", now_ms)
    until = time_param(params, "until", now_ms)
    since = now_ms - DEFAULT_WINDOW_MS if since is None else since
    until = now_ms if until is None else until
    if until <= since:
        raise ApiError(400, "bad parameter 'until': must be after since", "until")
    # Grouped by an expression, not the bare column: SQLite would otherwise walk the
    # (column, opened_at) index to skip a sort, visiting table rows in random order;
    # through the opened_at index they are read in the order they were written.
    column = func.coalesce(getattr(Incident, by), literal(""))
    lo, hi = ms_to_dt(since), ms_to_dt(until)
    window = (Incident.opened_at >= lo, Incident.opened_at < hi)
    resolved = func.sum(case((Incident.status == "resolved", 1), else_=0))
    with db.session() as s:
        # One row per group: the values travel as one joined string per group (82,000
        # rows fetched one by one cost more than the whole aggregation).
        per_group = s.execute(
            select(column, func.count(), resolved, _concat(db, Incident.detect_ms),
                   _concat(db, Incident.resolve_ms))
            .where(*window).group_by(column)).all()
        # Verified recoveries and pages of the window's incidents, sent in the window: both
        # sides are bounded by a time index (PostgreSQL hash-joins two small sets instead
        # of scanning every incident; SQLite looks incidents up by primary key).
        # (After a verified success the guards allow nothing more for the episode, so an
        # incident has one such attempt; no per-incident grouping, which would make
        # SQLite walk every attempt in incident order.)
        by_remediation = func.count(func.distinct(case(
            (Incident.status == "resolved", RemediationAttempt.incident_id))))
        recovered = s.execute(
            select(column, by_remediation, _concat(db, RemediationAttempt.recovery_ms))
            .select_from(RemediationAttempt)
            .join(Incident, Incident.id == RemediationAttempt.incident_id)
            .where(RemediationAttempt.status == "succeeded",
                   RemediationAttempt.requested_at >= lo, RemediationAttempt.requested_at < hi,
                   RemediationAttempt.recovery_ms.is_not(None), *window)
            .group_by(column)).all()
        paged = s.execute(
            select(column, func.count())
            .select_from(TimelineEvent).join(Incident, Incident.id == TimelineEvent.incident_id)
            .where(TimelineEvent.kind == TimelineKind.NOTIFICATION_SENT.value,
                   TimelineEvent.at >= lo, TimelineEvent.at < hi, *window)
            .group_by(column)).all()
    groups: dict[str, _Acc] = {}
    total = _Acc()

    def accs(key: str | None) -> tuple[_Acc, _Acc]:
        return groups.setdefault(key if key is not None else "", _Acc()), total

    for key, count, n_resolved, detect, resolve in per_group:
        for a in accs(key):
            a.count += int(count)
            a.resolved += int(n_resolved or 0)
            a.detect += _floats(detect)
            a.resolve += _floats(resolve)
    for key, n_resolved, ms in recovered:
        for a in accs(key):
            a.recovery += _floats(ms)
            a.by_remediation += int(n_resolved or 0)
    for key, pages in paged:
        for a in accs(key):
            a.pages += int(pages)
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1].count, kv[0]))[:MAX_GROUPS]
    return {"since": iso(ms_to_dt(since)), "until": iso(ms_to_dt(until)), "by": by,
            "total": total.view(), "groups": [{"key": k, **a.view()} for k, a in ordered]}


def _concat(db: Database, value: Any) -> Any:
    if db.dialect == "postgresql":
        return func.string_agg(cast(value, Text), literal_column("','"))
    return func.group_concat(value)


def _floats(joined: str | None) -> list[float]:
    return list(map(float, joined.split(","))) if joined else []


class _Acc:
    """Accumulates one group's durations."""

    def __init__(self) -> None:
        self.count = 0
        self.detect: list[float] = []
        self.recovery: list[float] = []
        self.resolve: list[float] = []
        self.by_remediation = 0
        self.resolved = 0
        self.pages = 0

    def view(self) -> dict[str, Any]:
        resolved = self.resolved
        by_itself = resolved - self.by_remediation
        return {
            "count": self.count, "open": self.count - resolved, "resolved": resolved,
            "time_to_detect_ms": _summary(self.detect),
            "time_to_recovery_ms": _summary(self.recovery),
            "time_to_resolve_ms": _summary(self.resolve),
            "resolved_by_remediation": _share(self.by_remediation, resolved),
            "resolved_by_itself": _share(by_itself, resolved),
            "pages_sent": self.pages,
        }


def _summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mean": None, "p50": None, "p90": None}
    values.sort()

    def nearest_rank(q: float) -> float:
        return round(values[max(0, math.ceil(q * len(values)) - 1)], 1)
    return {"n": len(values), "mean": round(sum(values) / len(values), 1),
            "p50": nearest_rank(0.5), "p90": nearest_rank(0.9)}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
