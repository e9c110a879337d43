"""How often, how fast: counts and times per alertname, target or category over a window.

    detect    condition true → incident opened (`incidents.detect_ms`)
    recovery  alert active → verified remediation (the succeeded attempt's `recovery_ms`)
    resolve   incident opened → resolved
    resolved_by  "remediation" when a verified action preceded the resolution,
                 else "itself"; pages are NOTIFICATION_SENT events in the window

Three index-driven reads over the window: the incidents (by opened_at), the
verified attempts (by status and requested_at, joined to their incidents),
and the pages (by kind and at, counted per group in the database). Durations
come back as numbers computed by the database; means and p90s are taken
here, as SQLite has no percentile function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Float, cast, func, literal_column, select

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
    column = getattr(Incident, by)
    resolve_ms = _ms_between(db, Incident.opened_at, Incident.resolved_at)
    lo, hi = ms_to_dt(since), ms_to_dt(until)
    window = (Incident.opened_at >= lo, Incident.opened_at < hi)
    with db.session() as s:
        # Durations of every incident in the window (p90 needs the values).
        rows = s.execute(select(column, Incident.detect_ms, resolve_ms).where(*window)).all()
        # Verified recoveries: attempts of the window joined to their incidents.
        recovered = s.execute(
            select(column, Incident.status, func.min(RemediationAttempt.recovery_ms))
            .join(Incident, Incident.id == RemediationAttempt.incident_id)
            .where(RemediationAttempt.status == "succeeded",
                   RemediationAttempt.requested_at >= lo,
                   RemediationAttempt.recovery_ms.is_not(None), *window)
            .group_by(RemediationAttempt.incident_id, column, Incident.status)).all()
        # Pages: sent notifications of the window's incidents, counted per group.
        paged = s.execute(
            select(column, func.count())
            .select_from(TimelineEvent).join(Incident, Incident.id == TimelineEvent.incident_id)
            .where(TimelineEvent.kind == TimelineKind.NOTIFICATION_SENT.value,
                   TimelineEvent.at >= lo, *window)
            .group_by(column)).all()
    groups: dict[str, _Acc] = {}
    total = _Acc()

    def accs(key: str | None) -> tuple[_Acc, _Acc]:
        return groups.setdefault(key if key is not None else "", _Acc()), total

    for key, detect, resolve in rows:
        for a in accs(key):
            a.add(detect, resolve)
    for key, status, recovery in recovered:
        for a in accs(key):
            a.recovery.append(float(recovery))
            if status == "resolved":
                a.by_remediation += 1
    for key, pages in paged:
        for a in accs(key):
            a.pages += int(pages)
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1].count, kv[0]))[:MAX_GROUPS]
    return {"since": iso(ms_to_dt(since)), "until": iso(ms_to_dt(until)), "by": by,
            "total": total.view(), "groups": [{"key": k, **a.view()} for k, a in ordered]}


def _ms_between(db: Database, start: Any, end: Any) -> Any:
    if db.dialect == "postgresql":
        return cast(func.extract("epoch", end - start) * 1000, Float)
    return (func.julianday(end) - func.julianday(start)) * literal_column("86400000.0")


class _Acc:
    """Accumulates one group's durations."""

    def __init__(self) -> None:
        self.count = 0
        self.detect: list[float] = []
        self.recovery: list[float] = []
        self.resolve: list[float] = []
        self.by_remediation = 0
        self.pages = 0

    def add(self, detect: int | None, resolve: float | None) -> None:
        self.count += 1
        if detect is not None:
            self.detect.append(float(detect))
        if resolve is not None:
            self.resolve.append(float(resolve))

    def view(self) -> dict[str, Any]:
        resolved = len(self.resolve)
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
        return {"n": 0, "mean": None, "p90": None}
    values.sort()
    rank = max(0, math.ceil(0.9 * len(values)) - 1)  # nearest-rank p90
    return {"n": len(values), "mean": round(sum(values) / len(values), 1),
            "p90": round(values[rank], 1)}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
