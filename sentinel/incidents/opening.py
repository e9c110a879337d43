"""Incidents opened in batches: a fleet-wide failure costs a few statements, not a few per target.

When a fleet fails together, one evaluation hands the incident stage thousands
of alerts that fire for the first time. Opened one key at a time, each new
incident cost about ten statements (is there an incident to join, did a
verified recovery already end this occurrence, the insert and its flush in a
savepoint, the crash lines to attach, the first evidence and the target's
last resolved incident): ~8 CPU-s and ten seconds of the database's write
lock per 1,000 targets (issue 49). Here the same questions are asked once for
the whole evaluation, with answers that are at least as wide as the per-key
ones, and the new incidents are inserted with one flush:

- `plain_keys` picks the keys whose opening is plain: no open incident of
  their own, only firing alerts, nothing to join, no recovery that may have
  ended the occurrence. A key that may be anything else (the batched answer
  is a superset: e.g. "a resolved incident of this target holds this
  fingerprint and ended within `STILL_FIRING_MS`") takes the tracker's
  per-key path, which decides exactly, as before.
- `insert` adds the incidents in one savepoint and one flush; when another
  writer opened one of the keys meanwhile (the partial unique index, two
  daemons on one PostgreSQL), it returns None and the tracker opens them one
  at a time, each falling back to the winner.
- `attach_evidence` attaches each target's recent crash lines and starts
  each incident's clock at its first evidence, from one read of the
  targets' log events and one of their last resolved incidents.

The result is the same as the per-key path's for every key it takes
(tests/test_incidents_opening.py compares the two).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sentinel.incidents.convert import dt_to_ms, labels_to_json, ms_to_dt
from sentinel.incidents.evidence import EVIDENCE_WINDOW, MAX_EXCERPTS_ON_OPEN, excerpt_event
from sentinel.incidents.keys import GroupKey
from sentinel.incidents.models import (
    Incident,
    IncidentAlert,
    IncidentStatus,
    LogEventRow,
)
from sentinel.incidents.recovery import STILL_FIRING_MS
from sentinel.model import Alert, AlertState, label_value

# Bound parameters per IN list: SQLite's default limit is 999 (older builds), and
# PostgreSQL plans a short list better than a huge one.
CHUNK = 500


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), CHUNK):
        yield list(items[i:i + CHUNK])


def plain_keys(s: Session, fresh: Mapping[GroupKey, Sequence[Alert]],
               all_keys: Iterable[GroupKey], joins: frozenset[str], window_ms: int,
               now: datetime) -> list[GroupKey]:
    """The keys of `fresh` (no open incident of their own) whose opening is plain.

    Plain: only firing alerts; no alert's fingerprint in an open incident of
    its target (joined before); no failure incident of the target to join
    within `window_ms`, nor another failure alert of the target in this
    evaluation (it may open one first); no resolved incident of the target
    holding the fingerprint that ended within `STILL_FIRING_MS` (a verified
    recovery may have ended this occurrence). Sorted as the tracker opens.
    """
    keys = [k for k, alerts in fresh.items()
            if alerts and all(a.state is AlertState.FIRING for a in alerts)]
    if not keys:
        return []
    failures: dict[str, int] = defaultdict(int)
    for k in all_keys:
        if k.target and k.alertname in joins:
            failures[k.target] += 1
    slow: set[GroupKey] = {k for k in keys if failures.get(k.target, 0) > 1
                           and k.alertname in joins}
    joining = [k for k in keys if k.target and k.alertname in joins and k not in slow]
    slow |= _may_join(s, joining, fresh, joins, window_ms, now)
    slow |= _may_be_recovered(s, [k for k in keys if k not in slow], fresh, now)
    return sorted((k for k in keys if k not in slow), key=lambda k: (k.alertname, k.target))


def _may_join(s: Session, keys: list[GroupKey], fresh: Mapping[GroupKey, Sequence[Alert]],
              joins: frozenset[str], window_ms: int, now: datetime) -> set[GroupKey]:
    """Failure-alert keys that may join an open incident of their target (joining.py)."""
    if not keys:
        return set()
    targets = sorted({k.target for k in keys})
    held: set[tuple[str, str]] = set()  # (target, fingerprint) in an open incident
    recent: dict[str, set[str]] = defaultdict(set)  # target → failure incidents in window
    since = now - timedelta(milliseconds=window_ms)
    for part in _chunks(targets):
        held.update(s.execute(select(Incident.target, IncidentAlert.fingerprint)
                              .join(IncidentAlert).where(
            Incident.status == IncidentStatus.OPEN.value, Incident.target.in_(part))))
        for target, name in s.execute(select(Incident.target, Incident.alertname).where(
                Incident.status == IncidentStatus.OPEN.value, Incident.target.in_(part),
                Incident.alertname.in_(sorted(joins)), Incident.opened_at >= since)):
            recent[target].add(name)
    return {k for k in keys
            if any((k.target, a.fingerprint) in held for a in fresh[k])
            or recent.get(k.target, set()) - {k.alertname}}


def _may_be_recovered(s: Session, keys: list[GroupKey],
                      fresh: Mapping[GroupKey, Sequence[Alert]], now: datetime
                      ) -> set[GroupKey]:
    """Keys with an alert that a resolved incident of its target held, ended within
    `STILL_FIRING_MS`: recovery.ended_by_recovery decides those one by one."""
    targets = sorted({k.target for k in keys})
    if not targets:
        return set()
    cutoff = now - timedelta(milliseconds=STILL_FIRING_MS)
    ended: set[tuple[str, str]] = set()
    for part in _chunks(targets):
        ended.update(s.execute(select(Incident.target, IncidentAlert.fingerprint)
                               .join(IncidentAlert).where(
            Incident.status == IncidentStatus.RESOLVED.value, Incident.target.in_(part),
            Incident.resolved_at >= cutoff)))
    return {k for k in keys if any((k.target, a.fingerprint) in ended for a in fresh[k])}


def new_incident(key: GroupKey, alert: Alert, now: datetime) -> Incident:
    """The open incident a key's first firing alert opens (not yet added to a session)."""
    annotations = dict(alert.annotations)
    opened_at = fired_at(alert, now)
    return Incident(
        group_key=key.text, alertname=key.alertname, target=key.target,
        status=IncidentStatus.OPEN, severity=label_value(alert.labels, "severity"),
        summary=annotations.get("summary") or annotations.get("description") or "",
        labels=labels_to_json(alert.labels), opened_at=opened_at,
        resolved_at=None, updated_at=now,
        category=label_value(alert.labels, "category") or None,
        detect_ms=max(0, dt_to_ms(opened_at) - alert.active_at_ms),
    )


def fired_at(alert: Alert, now: datetime) -> datetime:
    """When the alert fired, else now."""
    return ms_to_dt(alert.fired_at_ms) if alert.fired_at_ms is not None else now


def insert(s: Session, opening: Sequence[tuple[GroupKey, Alert]], now: datetime
           ) -> list[Incident] | None:
    """Open an incident per key with one flush; None when another writer opened one of the
    keys meanwhile (nothing of the batch stays: open them one at a time instead)."""
    incidents = [new_incident(key, alert, now) for key, alert in opening]
    try:
        with s.begin_nested():
            s.add_all(incidents)
    except IntegrityError:
        return None
    return incidents


def attach_evidence(s: Session, opened: Sequence[tuple[Incident, Alert]]) -> None:
    """For each new incident (and its first firing alert): attach its target's recent crash
    lines and start its clock at the first evidence, as evidence.attach_recent and the
    tracker's clock do one incident at a time."""
    targets = sorted({i.target for i, _ in opened if i.target})
    lines: dict[str, list[LogEventRow]] = defaultdict(list)
    ended: dict[str, datetime] = {}
    if targets:
        lo = min(ms_to_dt(a.active_at_ms) for _, a in opened) - EVIDENCE_WINDOW
        for part in _chunks(targets):
            for row in s.scalars(select(LogEventRow).where(
                    LogEventRow.target.in_(part), LogEventRow.at >= lo)):
                lines[row.target].append(row)
            for target, at in s.execute(select(Incident.target, func.max(Incident.resolved_at))
                                        .where(Incident.target.in_(part),
                                               Incident.status == IncidentStatus.RESOLVED.value)
                                        .group_by(Incident.target)):
                if at is not None:
                    ended[target] = at
    for incident, alert in opened:
        active_at = ms_to_dt(alert.active_at_ms)
        rows = lines.get(incident.target, []) if incident.target else []
        recent = sorted((r for r in rows if r.at >= active_at - EVIDENCE_WINDOW),
                        key=lambda r: (r.at, r.id))[-MAX_EXCERPTS_ON_OPEN:]
        for row in recent:
            s.add(excerpt_event(incident.id, row))
        lo = active_at - EVIDENCE_WINDOW
        last_end = ended.get(incident.target)
        if last_end is not None and last_end > lo:
            lo = last_end
        line_at = min((r.at for r in rows if lo < r.at <= incident.opened_at), default=None)
        incident.evidence_at = min(active_at, line_at) if line_at is not None else active_at
        incident.detect_ms = max(0, dt_to_ms(incident.opened_at)
                                 - dt_to_ms(incident.evidence_at))

