"""Store each incident's plotted series in the database: at opening, while open, after the end.

One tick (the daemon's `evidence` job, every `evidence.interval`) looks for
incidents whose stored window is incomplete, oldest need first:

1. open incidents with no row yet, then recent resolved ones with none (an
   incident that opened and resolved between two ticks): the first capture
   reaches `evidence.before` back from the onset, as far as the store does,
   before the store's retention drops those samples;
2. rows not `final` (open incidents, and resolved ones until `evidence.after`
   past the resolution), stalest first: extended from where they end.

Reading the database and writing it are two short transactions; queries run
between them, holding none. A failing incident is counted and logged, and the
others go on. More due incidents than `MAX_PER_TICK` wait for the next tick
(counted as deferred); so do those left when the daemon stops mid-tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import exists, false, select

from sentinel.incidents.convert import dt_to_ms, ms_to_dt, opt_dt_to_ms
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert, IncidentStatus
from sentinel.incidents.models_series import IncidentSeries
from sentinel.incidents.series_capture import (
    CaptureSettings,
    CaptureSpec,
    QueryFn,
    RuleSpec,
    capture,
    window,
)
from sentinel.incidents.series_codec import MAX_POINTS, SeriesSet, decode, encode, merge
from sentinel.quietlog import QuietFailure

log = logging.getLogger(__name__)
MAX_PER_TICK = 50
RECENT_MS = 3_600_000  # resolved incidents without a row are captured up to this late


@dataclass(frozen=True, slots=True)
class Due:
    """One incident to capture, as read from the database."""

    incident_id: int
    opened_ms: int
    evidence_ms: int | None
    resolved_ms: int | None
    spec: CaptureSpec
    stored: SeriesSet | None


class SeriesRecorder:
    """Captures and stores incidents' series (the daemon's `evidence` job)."""

    def __init__(self, db: Database, query_fn: QueryFn, rule_expr: Callable[[str], str | None],
                 settings: CaptureSettings, registry: CollectorRegistry | None = None,
                 earliest_ms: Callable[[int], int | None] = lambda now: None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.db = db
        self.query_fn = query_fn
        self.rule_expr = rule_expr
        self.settings = settings
        # The oldest time the query backend still holds at `now` (the store's retention),
        # or None: a first capture asks no further back.
        self.earliest_ms = earliest_ms
        # True once the daemon stops: a tick ends after the incident in flight (the
        # others wait for the next start), not after MAX_PER_TICK captures.
        self.stopping = stopping
        self.captures = Counter("sentinel_incident_series_captures",
                                "Captures of incidents' plotted series into the database, "
                                "by outcome (stored, failed, deferred).", ["outcome"],
                                registry=registry)
        for outcome in ("stored", "failed", "deferred"):
            self.captures.labels(outcome)
        self._failure = QuietFailure(log, "storing an incident's series")

    def tick(self, now_ms: int) -> int:
        """Capture every due incident (at most MAX_PER_TICK); how many were stored."""
        due, deferred = self.due(now_ms)
        if deferred:
            self.captures.labels("deferred").inc(deferred)
        stored = 0
        for item in due:
            if self.stopping():
                break
            try:
                self.record(item, now_ms)
            except Exception:
                self.captures.labels("failed").inc()
                self._failure.failed(detail=f"incident {item.incident_id}")
                continue
            self._failure.ok()
            self.captures.labels("stored").inc()
            stored += 1
        return stored

    def due(self, now_ms: int) -> tuple[list[Due], int]:
        """The incidents to capture now, and how many more wait for a later tick."""
        no_row = ~exists().where(IncidentSeries.incident_id == Incident.id)
        with self.db.session() as s:
            fresh = list(s.scalars(select(Incident).where(
                Incident.status == IncidentStatus.OPEN, no_row)
                .order_by(Incident.opened_at).limit(MAX_PER_TICK + 1)))
            fresh += s.scalars(select(Incident).where(
                Incident.status == IncidentStatus.RESOLVED,
                Incident.opened_at >= ms_to_dt(now_ms - RECENT_MS), no_row)
                .order_by(Incident.opened_at).limit(MAX_PER_TICK + 1))
            rows = s.execute(select(Incident, IncidentSeries).join(
                IncidentSeries, IncidentSeries.incident_id == Incident.id)
                .where(IncidentSeries.final == false())  # `= false`: the index serves it
                .order_by(IncidentSeries.updated_at).limit(MAX_PER_TICK + 1)).all()
            pairs: list[tuple[Incident, IncidentSeries | None]] = [(i, None) for i in fresh]
            pairs += [(r[0], r[1]) for r in rows]
            waiting = max(0, len(pairs) - MAX_PER_TICK)
            return [self._due(s, inc, row) for inc, row in pairs[:MAX_PER_TICK]], waiting

    def _due(self, s: Any, inc: Incident, row: IncidentSeries | None) -> Due:
        alerts = s.scalars(select(IncidentAlert.labels).where(
            IncidentAlert.incident_id == inc.id)).all()
        stored = None
        if row is not None:
            try:
                stored = decode(row.data)
            except ValueError:  # unreadable (a newer format?): captured again from scratch
                log.warning("stored series of incident %d unreadable; capturing anew", inc.id)
        return Due(inc.id, dt_to_ms(inc.opened_at), opt_dt_to_ms(inc.evidence_at),
                   opt_dt_to_ms(inc.resolved_at),
                   spec_of(inc.alertname, inc.target, dict(inc.labels or {}), alerts,
                           self.rule_expr), stored)

    def record(self, item: Due, now_ms: int) -> SeriesSet:
        """Capture one incident's missing part and store the whole set; returns it."""
        start, end, final = window(item.opened_ms, item.evidence_ms, item.resolved_ms, now_ms,
                                   self.settings)
        new = extend(self.query_fn, item.spec, item.stored, start, end, self.settings,
                     self.earliest_ms(now_ms))
        blob, kept = encode(new)
        with self.db.session() as s:
            row = s.get(IncidentSeries, item.incident_id)
            if row is None:
                row = IncidentSeries(incident_id=item.incident_id)
                s.add(row)
            row.start_at, row.end_at = ms_to_dt(kept.start_ms), ms_to_dt(kept.end_ms)
            row.step_ms, row.points, row.final = kept.step_ms, kept.points(), final
            row.updated_at, row.data = ms_to_dt(now_ms), blob
        return kept


def extend(query_fn: QueryFn, spec: CaptureSpec, stored: SeriesSet | None, start_ms: int,
           end_ms: int, settings: CaptureSettings, earliest_ms: int | None = None) -> SeriesSet:
    """`stored` extended to `end_ms` (or a first capture of [start, end] when None).

    A first capture asks only from `earliest_ms` on (what the store still holds),
    at a step that fits that span in MAX_POINTS: fine while the incident is young;
    `bound` coarsens it as the incident grows. An extension keeps the stored step,
    coarser only when the gap since the last capture is longer than MAX_POINTS
    steps (a daemon that was down for a day).
    """
    if stored is None:
        first = max(start_ms, earliest_ms) if earliest_ms is not None else start_ms
        step = settings.first_step(first, end_ms)
        found = capture(query_fn, spec, first, end_ms, step)
        return merge(SeriesSet(step, first, end_ms, ()), found)  # from what was asked
    if end_ms <= stored.end_ms:
        return stored
    step = stored.step_ms
    while (end_ms - stored.end_ms) // step > MAX_POINTS:
        step *= 2
    return merge(stored, capture(query_fn, spec, stored.end_ms + 1, end_ms, step))


def spec_of(alertname: str, target: str, labels: dict[str, Any],
            alert_labels: Sequence[dict[str, Any]],
            rule_expr: Callable[[str], str | None]) -> CaptureSpec:
    """What to sample for an incident: its own rule first, then rules of alerts that joined."""
    by_rule: dict[str, list[dict[str, str]]] = {alertname: []}
    for al in alert_labels:
        name = str((al or {}).get("alertname", alertname))
        by_rule.setdefault(name, []).append({str(k): str(v) for k, v in (al or {}).items()})
    if not by_rule[alertname] and labels:
        by_rule[alertname].append({str(k): str(v) for k, v in labels.items()})
    rules = []
    for name, sets in by_rule.items():
        expr = rule_expr(name)
        if expr:
            rules.append(RuleSpec(name, expr, tuple(sets)))
    return CaptureSpec(target, tuple(rules))
