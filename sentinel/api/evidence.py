"""GET /api/v1/incidents/{id}/evidence: an incident's plotted series, however old it is.

The stored series (incident_series, written by the daemon's evidence job) are
the plot; only what the job has not stored yet (the last seconds of an open
incident, or everything of an incident from before the upgrade) is read from
the live query backend, through the same capture code, so a plot looks the same
while the incident fires and a year later. The answer is JSON-ready: the page
draws it (sentinel/web/evidence_plot.py) and tools read it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from sentinel.api.errors import ApiError
from sentinel.incidents.convert import dt_to_ms, iso, ms_to_dt, opt_dt_to_ms, value_to_json
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert
from sentinel.incidents.models_remediation import RemediationAttempt
from sentinel.incidents.models_series import IncidentSeries
from sentinel.incidents.series_capture import CaptureSettings, CaptureSpec, window
from sentinel.incidents.series_codec import SeriesSet, decode
from sentinel.incidents.series_recorder import spec_of

log = logging.getLogger(__name__)
LIVE_POINTS = 120  # a first capture for the page alone: coarser than the job's
# Live reads: (spec, stored or None, start, end, settings) -> the set extended to `end`.
LiveFn = Callable[[CaptureSpec, SeriesSet | None, int, int, CaptureSettings], SeriesSet]


def incident_evidence(db: Database, incident_id: int, rule_expr: Callable[[str], str | None],
                      settings: CaptureSettings, now_ms: int, live: LiveFn | None,
                      earliest_ms: int | None = None) -> dict[str, Any]:
    """The incident's plots (stored, plus the live tail), marks and window, as JSON.

    `earliest_ms`: the oldest time the live backend still holds (None: no limit).
    """
    with db.session() as s:
        inc = s.get(Incident, incident_id)
        if inc is None:
            raise ApiError(404, f"no incident {incident_id}")
        row = s.get(IncidentSeries, incident_id)
        alerts = s.scalars(select(IncidentAlert).where(
            IncidentAlert.incident_id == incident_id)).all()
        acted = s.execute(select(RemediationAttempt.id, RemediationAttempt.action,
                                 RemediationAttempt.acted_at).where(
            RemediationAttempt.incident_id == incident_id,
            RemediationAttempt.acted_at.is_not(None))).all()
        spec = spec_of(inc.alertname, inc.target, dict(inc.labels or {}),
                       [a.labels for a in alerts], rule_expr)
        opened, resolved = dt_to_ms(inc.opened_at), opt_dt_to_ms(inc.resolved_at)
        evidence_ms = opt_dt_to_ms(inc.evidence_at)
        stored = _decoded(row)
        stored_view = None if row is None else {
            "start": iso(row.start_at), "end": iso(row.end_at), "step_ms": row.step_ms,
            "points": row.points, "final": row.final, "updated_at": iso(row.updated_at)}
        final = row is not None and row.final
    start, end, _ = window(opened, evidence_ms, resolved, now_ms, settings)
    shown, source = stored, "stored" if stored is not None else "none"
    if not final and live is not None and (stored is None or stored.end_ms < end):
        shown, source = _with_live(live, spec, stored, start, end, settings, source,
                                   earliest_ms)
    marks = [{"at": iso(inc.opened_at), "at_ms": opened, "kind": "firing",
              "label": "incident opened (firing)"}]
    if resolved is not None:
        marks.append({"at": iso(inc.resolved_at), "at_ms": resolved, "kind": "resolved",
                      "label": "resolved"})
    marks += [{"at": iso(at), "at_ms": dt_to_ms(at), "kind": "action", "label": f"{a} #{i}"}
              for i, a, at in acted if at is not None]
    return {"incident_id": incident_id, "source": source, "stored": stored_view,
            "window": {"start": iso(ms_to_dt(start)), "end": iso(ms_to_dt(end)),
                       "start_ms": start, "end_ms": end},
            "view": view_of(shown, opened, end),
            "step_ms": shown.step_ms if shown is not None else None,
            "plots": [_plot_json(p) for p in (shown.plots if shown is not None else ())],
            "marks": marks}


def _with_live(live: LiveFn, spec: CaptureSpec, stored: SeriesSet | None, start: int, end: int,
               settings: CaptureSettings, source: str, earliest: int | None
               ) -> tuple[SeriesSet | None, str]:
    try:
        if stored is not None:
            return live(spec, stored, start, end, settings), "stored+live"
        return _live_only(live, spec, start, end, settings, earliest), "live"
    except Exception as exc:  # noqa: BLE001 - a backend down, a query stopped: what is stored
        log.info("live tail of an incident's series: %s", exc)
        return stored, source


def _live_only(live: LiveFn, spec: CaptureSpec, start: int, end: int,
               settings: CaptureSettings, earliest: int | None) -> SeriesSet:
    """Nothing stored yet (the job has not run, or an incident from before the upgrade):
    LIVE_POINTS over what the store holds, then again over where samples start, so a
    series born a few seconds ago is not a sliver at the right edge."""
    lo = start if earliest is None else max(start, earliest)
    got = live(spec, None, lo, end, _every(settings, lo, end))
    first = min((s.points[0][0] for p in got.plots for s in p.series if s.points), default=None)
    if first is not None and first - lo > (end - lo) // 10:
        lo = max(lo, first - max(2_000, (end - first) // 10))
        got = live(spec, None, lo, end, _every(settings, lo, end))
    return got


def _every(settings: CaptureSettings, start: int, end: int) -> CaptureSettings:
    return CaptureSettings(settings.before_ms, settings.after_ms, settings.interval_ms,
                           max(1, (end - start) // LIVE_POINTS))


def view_of(shown: SeriesSet | None, opened_ms: int, end_ms: int) -> dict[str, int]:
    """The time range to draw: from a little before the first sample (or the opening)."""
    first = min((s.points[0][0] for p in (shown.plots if shown else ()) for s in p.series
                 if s.points), default=opened_ms)
    first = min(first, opened_ms)
    margin = max(5_000, (end_ms - first) // 20)
    return {"start_ms": first - margin, "end_ms": max(end_ms, first + 1)}


def _decoded(row: IncidentSeries | None) -> SeriesSet | None:
    if row is None:
        return None
    try:
        return decode(row.data)
    except ValueError:
        log.warning("stored series of incident %d unreadable", row.incident_id)
        return None


def _plot_json(p: Any) -> dict[str, Any]:
    return {"kind": p.kind, "title": p.title, "expr": p.expr, "plotted": p.plotted,
            "threshold": None if p.threshold is None else {
                "op": p.threshold.op, "value": p.threshold.value, "text": str(p.threshold)},
            "series": [{"labels": dict(s.labels),
                        "points": [[t, value_to_json(v)] for t, v in s.points]}
                       for s in p.series]}
