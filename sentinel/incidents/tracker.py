"""Alerts → incidents → notifications.

`IncidentTracker.process` takes what the rule engine reported in one
evaluation and keeps the incident store in step:

- Alerts are grouped by (alertname, target). The target is the `target`
  label, else `instance`, else empty.
- A FIRING alert with no open incident for its key opens one; its timeline
  gets a `pending` event backdated to `active_at` when the rule had a `for`
  (fired_at > active_at), then `firing`. Later alerts with the same key join
  the open incident. PENDING alerts open nothing: `active_at` alone is enough
  to backdate the pending event once they fire.
- Value changes of a firing alert go on the timeline only when the value
  moved by more than 10 % (relative to the last recorded value; any change
  from 0 or to/from NaN counts) and at least 60 s passed since the last
  recorded value. So a noisy gauge writes at most one event a minute, and a
  slow drift is still recorded once it adds up to 10 %.
- An INACTIVE alert with `resolved_at_ms` resolves its row; when no alert of
  the incident fires any more, the incident resolves.

It returns at most one `Notification` per incident per call. It announces
alerts that newly fire (and alerts that fire but were never confirmed
delivered: `notified_firing_at` is NULL and this process has not announced
them, i.e. after a crash between commit and delivery), and alerts that
resolved after their firing was announced. The kind is RESOLVED when the
incident resolved in this call, FIRING otherwise (as Alertmanager's group
status). Alerts in a notification keep their own state (FIRING or INACTIVE).

Restarts are idempotent: the rule engine restores firing alerts and reports
them again; they find their open incident and their already-notified rows,
so nothing new is opened or sent.

Nothing is lost to a database outage (issue 10): the rule engine reports a
resolved alert until `process` committed (the caller then acknowledges it),
and the rule state is saved in the same transaction as the incidents
(`states`), so the two never disagree after a crash. Within one call,
resolutions are applied before firings, so an alert that resolved and fired
again while the database was away closes its incident and opens a new one.
A firing alert whose row fires with a `fired_at` older than the alert's own
`active_at` is a new occurrence whose predecessor's end was never recorded
(an orphaned incident): the old row resolves (paged resolved when its firing
was) and the new occurrence opens a new incident, paged. `reconcile` (on
start) resolves open incidents whose alerts the rule engine no longer fires.

What reaches a human (issue 33; design.md, "the incident life cycle"):

- One incident per failure: a failure alert (joining.py) with no incident of
  its own joins the target's incident of another failure alert opened within
  the window; the timeline says why, and it announces nothing itself.
- It ends when the failure ends: a verified remediation resolves the incident
  (recovery.py); the same occurrence still firing from its rule's window
  neither re-opens it nor pages.
- Honest clocks: an incident's clock starts at its first evidence (the crash
  line's own time, else the alert going active): `detect_ms` runs from there.
- Nothing is lost to an outage (issue 39): a resolved alert whose occurrence no
  incident holds fired and resolved while the database was away; it opens and
  resolves an incident with both times and is announced firing, then resolved.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnClause, String, literal_column, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sentinel.incidents import alert_states, ending, notice, opening
from sentinel.incidents.convert import (
    dt_to_ms,
    format_value,
    labels_from_json,
    labels_to_json,
    ms_to_dt,
    value_to_db,
    value_to_json,
)
from sentinel.incidents.db import Database
from sentinel.incidents.ending import Serving
from sentinel.incidents.evidence import attach_recent, first_evidence
from sentinel.incidents.fleet_hook import FleetCorrelator
from sentinel.incidents.joining import (
    FAILURE_ALERTS,
    JOIN_WINDOW_MS,
    incident_to_join,
    joined_incident,
)
from sentinel.incidents.keys import GroupKey, group_key
from sentinel.incidents.models import (
    Incident,
    IncidentAlert,
    IncidentAlertState,
    IncidentStatus,
    TimelineEvent,
    TimelineKind,
)
from sentinel.incidents.outboxwriter import OutboxWriter
from sentinel.incidents.quiet import RowFacts, quiet_keys
from sentinel.incidents.recovery import RECOVERED, ended_by_recovery, row_alert
from sentinel.model import (
    Alert,
    AlertState,
    Notification,
    NotificationKind,
    label_value,
    labels_of,
)
from sentinel.respond.notify.actfirst import hold as actfirst_hold
from sentinel.respond.notify.actfirst import paged as actfirst_paged

log = logging.getLogger(__name__)

# The act-first question, asked when an incident opens: (grace ms, which policy) when a
# remediation policy will act on the alert, else None. The daemon builds it from config.
ActFirst = Callable[[Alert], tuple[int, str] | None]

VALUE_EVENT_MIN_INTERVAL_MS = 60_000
# On the alerts of an occurrence recorded after a database outage, and on its timeline.
OUTAGE_ANNOTATION = "sentinel_outage"
OUTAGE_NOTE = "fired and resolved while Sentinel's database was unavailable"



VALUE_EVENT_MIN_CHANGE = 0.10

# A literal, not a bound parameter: SQLite only uses the partial unique index
# when the query's WHERE repeats the index's condition verbatim.
_OPEN: ColumnClause[str] = literal_column("'open'", String())


@dataclass(slots=True)
class _Outcome:
    """What one incident's processing announces, and what to remember after commit."""

    incident_id: int
    key: GroupKey
    fired: list[Alert]
    resolved: list[Alert]
    closed: bool
    now: datetime
    opened: bool = False
    missed: bool = False  # fired and resolved inside a database outage (`_missed`)
    joined: bool = False  # alerts that joined another key's incident: they page nothing
    # Joined alerts that fired, merged into the incident's own outcome: their own routes
    # hear of them (the dispatcher sends them only where the incident's page did not go).
    joined_fired: list[Alert] = field(default_factory=list)


class IncidentTracker:
    """Turns rule-engine alerts into incidents, timelines and notifications."""

    def __init__(
        self,
        db: Database,
        *,
        value_interval_ms: int = VALUE_EVENT_MIN_INTERVAL_MS,
        value_change: float = VALUE_EVENT_MIN_CHANGE,
        outbox: OutboxWriter | None = None,
        join_alerts: frozenset[str] = FAILURE_ALERTS,
        join_window_ms: int = JOIN_WINDOW_MS,
        act_first: ActFirst | None = None,
        serving: Serving | None = None,
        fleet: FleetCorrelator | None = None,
    ) -> None:
        self.db = db  # public: the daemon's incident API reads through it
        # A fleet-wide failure is one incident (fleet_hook.py); public: the pipeline asks
        # it which alerts remediation may act on, and an HA takeover hands it on.
        self.fleet = fleet
        # Whether a target serves (ending.py): a failure's incident ends only when it does.
        # Public: an HA takeover hands it to the next tracker.
        self.serving = serving
        # Open incidents whose alerts all ended but whose target did not serve yet, by id
        # (None: not loaded since start); each evaluation closes those that serve again.
        self._awaiting: dict[int, str] | None = None
        # One incident per failure (joining.py): which alerts join a target's incident.
        self._joins = join_alerts
        self._join_window_ms = join_window_ms
        # Act first, then tell once (respond/notify/actfirst.py): how long a new incident's
        # first page waits while a remediation policy acts on its alert, and why.
        self._act_first = act_first
        # With an outbox, each notification is written into it in the same
        # transaction as the incident change, and its alerts are marked
        # notified there: delivery is then the outbox's job (retried, never lost).
        self.outbox = outbox
        self._value_interval_ms = value_interval_ms
        self._value_change = value_change
        # (incident_id, fingerprint, fired_at_ms) announced FIRING by this
        # process but not yet confirmed by record_notification: not again.
        self._announced: set[tuple[int, str, int]] = set()


    def retune(self, join_window_ms: int, act_first: ActFirst | None) -> None:
        """A reloaded config's join window and act-first wait (the next process uses them)."""
        self._join_window_ms = join_window_ms
        self._act_first = act_first
    def process(self, alerts: Sequence[Alert], now_ms: int,
                states: Sequence[Alert] | alert_states.AlertStateDelta | None = None
                ) -> list[Notification]:
        """Apply one evaluation's alerts; return the notifications to deliver.

        With `states` (the group's delta, or the rule engine's whole set of active
        alerts), the persisted rule state is written in the same transaction.
        """
        groups: dict[GroupKey, list[Alert]] = {}
        for alert in alerts:
            if alert.state is AlertState.FIRING or alert.resolved_at_ms is not None:
                groups.setdefault(group_key(alert), []).append(alert)
        now = ms_to_dt(now_ms)
        outcomes: dict[int, _Outcome] = {}
        with self.db.session() as s:
            # Two queries for the whole evaluation, not three per alert group: under
            # an alert storm (a fleet's `up == 0`) per-key lookups of open incidents
            # and their rows were most of the evaluation time.
            # Keys with nothing to record are found with one compact read (quiet.py).
            quiet = quiet_keys(s, groups, lambda row, alert: self._settled(row, alert, now))
            busy = {k: alerts for k, alerts in groups.items() if k not in quiet}
            known = _preload(s, [k.text for k in busy])
            opened = self._open_together(s, groups, busy, known, now)
            for key in sorted(busy, key=lambda k: (k.alertname, k.target)):
                if key in opened:
                    outcome = self._apply(s, opened[key], {}, key, groups[key], [], now)
                    outcome.opened = True
                    _merge_outcome(outcomes, outcome)
                    continue
                for outcome in self._process_key(s, key, groups[key], now, known):
                    _merge_outcome(outcomes, outcome)
            for outcome in self._serving_again(s, now):
                _merge_outcome(outcomes, outcome)
            members = self._correlate(s, alerts, outcomes, now_ms)
            told = [o for o in outcomes.values() if o.incident_id not in members]
            if self.outbox is not None:
                self._hold_pages(s, told, now)
                self._enqueue(s, told, now_ms)
            if states is not None:
                alert_states.save_in(s, states)
        if self.fleet is not None:
            self.fleet.committed()
        return [n for o in outcomes.values()
                if (n := self._after_commit(o)) is not None and o.incident_id not in members]

    def _correlate(self, s: Session, alerts: Sequence[Alert], outcomes: dict[int, _Outcome],
                   now_ms: int) -> frozenset[int]:
        """Fleet-wide failures (fleet_hook.py): the member incidents that page nothing of
        their own; the fleet incidents' page, count and resolve join the outcomes."""
        if self.fleet is None:
            return frozenset()
        touched = {(o.key.alertname, o.key.target): o.incident_id
                   for o in outcomes.values() if not o.joined}
        found = self.fleet.correlate(s, alerts, touched,
                                     [o.incident_id for o in outcomes.values() if o.opened],
                                     now_ms)
        for n in found.news:
            outcomes[n.incident_id] = _Outcome(n.incident_id, GroupKey(n.alertname, ""),
                                               list(n.fired), list(n.resolved), n.closed,
                                               ms_to_dt(now_ms))
            if n.paged and self.outbox is not None:
                # Never held (remediation does not act on a fleet): it pages at once, and
                # the model's runbook, asked once for the fleet, comes as its update.
                actfirst_paged(s, n.incident_id, ms_to_dt(now_ms))
        return found.quiet

    def _open_together(self, s: Session, groups: dict[GroupKey, list[Alert]],
                       busy: dict[GroupKey, list[Alert]],
                       known: dict[str, tuple[Incident, dict[str, IncidentAlert]]],
                       now: datetime) -> dict[GroupKey, Incident]:
        """Open the evaluation's plain new incidents in one batch (opening.py, issue 49): a
        fleet that fails together costs a few statements, not ten per target. The keys
        that may join, were ended by a recovery or lost a race take `_process_key`."""
        fresh = {k: alerts for k, alerts in busy.items() if k.text not in known}
        keys = opening.plain_keys(s, fresh, groups, self._joins, self._join_window_ms, now)
        firsts = [(key, fresh[key][0]) for key in keys]
        incidents = opening.insert(s, firsts, now) if firsts else None
        if incidents is None:
            return {}
        opening.attach_evidence(s, [(i, a) for i, (_, a) in zip(incidents, firsts, strict=True)])
        return dict(zip(keys, incidents, strict=True))

    def _settled(self, row: RowFacts, alert: Alert, now: datetime) -> bool:
        """Whether `_process_key` would leave this firing alert's row as it is: the same
        occurrence, already announced, no value event due (`_fire`, `_maybe_value_event`)."""
        if row.state != IncidentAlertState.FIRING or row.fired_at < ms_to_dt(alert.active_at_ms):
            return False
        if row.notified_firing_at is None and (
                (row.incident_id, row.fingerprint, dt_to_ms(row.fired_at)) not in self._announced):
            return False
        last_at = row.value_recorded_at or row.fired_at
        return ((now - last_at).total_seconds() * 1000 < self._value_interval_ms
                or not _significant(row.value, alert.value, self._value_change))

    def reconcile(self, firing: Sequence[Alert], now_ms: int) -> list[Notification]:
        """Resolve the open incidents' firing rows whose alert the rule engine does not fire.

        Run on start, after the rule state was restored: an incident left
        open by a resolution that never reached the database (or by a rule
        that no longer exists) resolves now, and pages resolved when its
        firing was paged.
        """
        # By fingerprint (labels, alertname and target included): a joined alert's rows
        # live in an incident of another key.
        live = {a.fingerprint for a in firing if a.state is AlertState.FIRING}
        now = ms_to_dt(now_ms)
        outcomes: list[_Outcome] = []
        with self.db.session() as s:
            for incident in s.scalars(select(Incident).where(Incident.status == _OPEN)
                                      .order_by(Incident.id)).all():
                rows = {r.fingerprint: r for r in s.scalars(
                    select(IncidentAlert).where(IncidentAlert.incident_id == incident.id))}
                gone = [row_alert(r, now_ms) for r in rows.values()
                        if r.state == IncidentAlertState.FIRING
                        and r.fingerprint not in live]
                if not gone and any(r.state == IncidentAlertState.FIRING for r in rows.values()):
                    continue
                key = GroupKey(incident.alertname, incident.target)
                outcome = _Outcome(incident.id, key, [], [], closed=False, now=now)
                for alert in gone:
                    if self._resolve(s, incident, rows, alert, now):
                        outcome.resolved.append(alert)
                # Not closed because Sentinel restarted: the target must serve again first.
                self._settle(s, incident, rows, outcome, now)
                outcomes.append(outcome)
            if self.outbox is not None:
                self._enqueue(s, outcomes, now_ms)
        return [n for o in outcomes if (n := self._after_commit(o)) is not None]

    def _hold_pages(self, s: Session, outcomes: list[_Outcome], now: datetime) -> None:
        """A new incident's page waits while a policy acts on it, or goes at once (noted so
        a runbook that comes later is sent as an update)."""
        for o in outcomes:
            new_page = o.opened and not o.joined and not o.missed and bool(o.fired)
            held = self._act_first(o.fired[0]) if new_page and self._act_first else None
            why = notice.hold_begins(new_page, held[0] if held is not None else None)
            if why is notice.Reason.HELD:
                assert held is not None
                actfirst_hold(s, o.incident_id, now, held[0], held[1])
            elif why is notice.Reason.PAGED:
                actfirst_paged(s, o.incident_id, now)

    def _enqueue(self, s: Session, outcomes: list[_Outcome], now_ms: int) -> None:
        assert self.outbox is not None
        now = ms_to_dt(now_ms)
        told: dict[int, set[str]] = {}  # incident id → the fingerprints its message names
        for outcome in outcomes:
            notification = _notification(outcome)
            if notification is None:
                self._enqueue_joined(s, outcome, now_ms)
                continue
            if outcome.missed:  # its firing first, timed when it fired: then it is sent
                for a in outcome.resolved:
                    assert a.fired_at_ms is not None
                    fired = replace(a, state=AlertState.FIRING, resolved_at_ms=None)
                    self.outbox.enqueue(s, replace(notification, kind=NotificationKind.FIRING,
                                                   alerts=(fired,)), a.fired_at_ms)
            self.outbox.enqueue(s, notification, now_ms)
            told.setdefault(outcome.incident_id, set()).update(
                a.fingerprint for a in notification.alerts)
            # After the incident's own: the dispatcher sees where its page goes first.
            self._enqueue_joined(s, outcome, now_ms)
        # One read for the whole evaluation (not one per incident, each flushing the
        # session first): a storm's thousand new incidents are marked together.
        ids = sorted(told)
        for i in range(0, len(ids), opening.CHUNK):
            for row in s.scalars(select(IncidentAlert).where(
                    IncidentAlert.incident_id.in_(ids[i:i + opening.CHUNK]))):
                if row.fingerprint in told[row.incident_id]:
                    _mark_notified(row, now)

    def _enqueue_joined(self, s: Session, outcome: _Outcome, now_ms: int) -> None:
        """Joined alerts that fired: intents, so their own routes are told (issue 48: a
        joined alert paged nothing, and a route only it matched stayed silent). They are
        marked told: they fire no intent again, and the incident's end announces them."""
        joined = outcome.joined_fired + (outcome.fired if outcome.joined else [])
        if not joined or outcome.closed:
            return
        assert self.outbox is not None
        self.outbox.enqueue(s, Notification(outcome.incident_id, NotificationKind.FIRING,
                                            tuple(joined), outcome.key.labels), now_ms)
        fps = [a.fingerprint for a in joined]
        for row in s.scalars(select(IncidentAlert).where(
                IncidentAlert.incident_id == outcome.incident_id,
                IncidentAlert.fingerprint.in_(fps))):
            _mark_notified(row, ms_to_dt(now_ms))

    def record_notification(
        self,
        incident_id: int,
        receiver: str,
        kind: NotificationKind,
        ok: bool,
        detail: str,
        now_ms: int,
        fingerprints: Iterable[str] = (),
    ) -> None:
        """Record a delivery attempt on the timeline; when ok, mark the alerts notified.

        Of the given fingerprints, rows that fire get `notified_firing_at` and
        resolved rows get `notified_resolved_at` (each only if not yet set).
        """
        now = ms_to_dt(now_ms)
        fps = sorted(set(fingerprints))
        with self.db.session() as s:
            if ok and fps:
                rows = s.scalars(select(IncidentAlert).where(
                    IncidentAlert.incident_id == incident_id,
                    IncidentAlert.fingerprint.in_(fps)))
                for row in rows:
                    _mark_notified(row, now)
                    self._announced.discard((incident_id, row.fingerprint, dt_to_ms(row.fired_at)))
            outcome = "sent" if ok else "failed"
            s.add(TimelineEvent(
                incident_id=incident_id, at=now,
                kind=TimelineKind.NOTIFICATION_SENT if ok else TimelineKind.NOTIFICATION_FAILED,
                message=f"{kind} notification to {receiver} {outcome}: {detail}".rstrip(": "),
                data={"receiver": receiver, "kind": str(kind), "fingerprints": fps,
                      "detail": detail},
            ))

    def save_alert_states(self, alerts: Sequence[Alert]) -> None:
        """Replace the persisted rule-engine alerts with these, in one transaction."""
        alert_states.save(self.db, alerts)

    def load_alert_states(self) -> list[Alert]:
        """The persisted rule-engine alerts, for `RuleManager.restore`."""
        return alert_states.load(self.db)

    # -- one incident -------------------------------------------------------

    def _process_key(
        self, s: Session, key: GroupKey, alerts: list[Alert], now: datetime,
        known: dict[str, tuple[Incident, dict[str, IncidentAlert]]] | None = None,
    ) -> list[_Outcome]:
        """Resolutions first (closing the incident when all resolved), then firings.

        `known`: the open incidents of the evaluation's keys and their rows,
        loaded up front (`_preload`); without it they are queried here.
        """
        firing = [a for a in alerts if a.state is AlertState.FIRING]
        resolved = [a for a in alerts if a.state is not AlertState.FIRING]
        out: list[_Outcome] = []
        rows: dict[str, IncidentAlert] | None = None
        if known is None:
            incident = _open_incident(s, key)
        else:
            incident, rows = known.get(key.text, (None, None))
        joined = False
        if incident is None and key.alertname in self._joins:
            incident = joined_incident(s, key.target, [a.fingerprint for a in alerts])
            joined = incident is not None
        if incident is not None:
            if rows is None:
                rows = _rows(s, incident)
            ended = resolved + [_superseded(rows[a.fingerprint], a, now) for a in firing
                                if _is_superseded(rows.get(a.fingerprint), a)]
            if ended:
                outcome = self._apply(s, incident, rows, key, [], ended, now)
                outcome.joined = joined
                out.append(outcome)
                if outcome.closed:
                    if firing:  # the closed incident leaves the partial unique index first
                        s.flush()  # (only then: a flush per incident was most of a recovery)
                    incident, joined = None, False
        else:
            for alert in resolved:
                if alert.fired_at_ms is not None and not _recorded(s, key, alert):
                    out.append(self._missed(s, key, alert, now))
                    s.flush()
        if incident is None:  # a crash's alert outlives the verified recovery that ended it
            firing = [a for a in firing
                      if ended_by_recovery(s, key.target, a, now) is None]
        if not firing:
            return out
        if incident is None:
            incident = incident_to_join(s, key.target, key.alertname, self._joins,
                                        self._join_window_ms, now)
            if incident is not None:
                joined, rows = True, None
                _note_join(s, incident, key, now, self._join_window_ms)
        opened = incident is None
        if incident is None:
            incident = _insert_incident(s, key, firing[0], now)
            s.flush()
            attach_recent(s, incident, key.target, ms_to_dt(firing[0].active_at_ms))
            if incident.evidence_at is None:  # new, not a concurrent writer's
                _clock_from_evidence(s, incident, firing[0])
            rows = None
        if rows is None:
            rows = _rows(s, incident)
        outcome = self._apply(s, incident, rows, key, firing, [], now)
        outcome.opened, outcome.joined = opened, joined
        out.append(outcome)
        return out

    def _missed(self, s: Session, key: GroupKey, alert: Alert, now: datetime) -> _Outcome:
        """An occurrence that fired and resolved while the database was away (issue 39).

        The rule engine kept its resolution until it was committed, but its firing never
        reached the database: it opens and resolves an incident with both times, and is
        announced firing (timed when it fired), then resolved, saying why it comes late.
        """
        alert = replace(alert, annotations=labels_of({**dict(alert.annotations),
                                                      OUTAGE_ANNOTATION: OUTAGE_NOTE}))
        fired = replace(alert, state=AlertState.FIRING, resolved_at_ms=None)
        incident = _insert_incident(s, key, fired, now)
        s.flush()
        attach_recent(s, incident, key.target, ms_to_dt(alert.active_at_ms))
        _clock_from_evidence(s, incident, alert)
        rows: dict[str, IncidentAlert] = {}
        self._fire(s, incident, rows, fired, now)
        self._resolve(s, incident, rows, alert, now)
        _close(s, incident, list(rows.values()), now)
        _event(s, incident, now, TimelineKind.NOTE,
               f"{_subject(incident)}: {OUTAGE_NOTE}; recorded when it returned",
               {"fingerprint": alert.fingerprint, "outage": True})
        return _Outcome(incident.id, key, [], [alert], closed=True, now=now, opened=True,
                        missed=True)

    def _apply(
        self, s: Session, incident: Incident, rows: dict[str, IncidentAlert], key: GroupKey,
        firing: list[Alert], resolved: list[Alert], now: datetime,
    ) -> _Outcome:
        """Record firing and resolved alerts on one open incident."""
        outcome = _Outcome(incident.id, key, [], [], closed=False, now=now)
        for alert in firing:
            if self._fire(s, incident, rows, alert, now):
                outcome.fired.append(alert)
        for alert in resolved:
            if self._resolve(s, incident, rows, alert, now):
                outcome.resolved.append(alert)
        if resolved and rows:
            self._settle(s, incident, rows, outcome, now)
        return outcome

    # -- the end of an incident (ending.py; the notice core's rule) ---------------------

    def _settle(self, s: Session, incident: Incident, rows: dict[str, IncidentAlert],
                outcome: _Outcome, now: datetime) -> None:
        """Close the incident if it is over; else its page outlives the alert that resolved.

        A resolution is announced while another announced alert of the incident still
        fires (the page goes on); the last one's waits for the incident's end, so no
        resolved reaches anyone while a joined alert fires or the target is down.
        """
        if ending.ends(incident, rows.values(), self._joins, self.serving):
            self._end(s, incident, rows, outcome, now)
            return
        # A joined alert's end is told with the incident's (its own routes were told only
        # of it: its end alone would be a false resolve there); nor does it hold up another's.
        outcome.resolved = [a for a in outcome.resolved if a.name == incident.alertname]
        if outcome.resolved and not any(
                r.state == IncidentAlertState.FIRING and self._told_firing(incident, r)
                and ending.alertname(r) == incident.alertname for r in rows.values()):
            for alert in outcome.resolved:
                _event(s, incident, now, TimelineKind.NOTE,
                       f"{_subject(incident, alert.name)} resolved; the incident stays open "
                       "(and nobody is told it resolved) until its other alerts resolve and "
                       "its target serves again", {"fingerprint": alert.fingerprint,
                                                   "withheld": True})
            outcome.resolved = []
        lasting = [r for r in rows.values() if r.state == IncidentAlertState.FIRING
                   and ending.alertname(r) not in ending.EVENT_ALERTS]
        if self.serving is not None and incident.target and not lasting:
            self._waiting(s)[incident.id] = incident.target

    def _end(self, s: Session, incident: Incident, rows: dict[str, IncidentAlert],
             outcome: _Outcome, now: datetime) -> None:
        """Close the incident: a crash counter still firing ends with it (its target serves
        again), and every resolution held back is announced now, once."""
        counters = [r for r in rows.values() if r.state == IncidentAlertState.FIRING]
        for row in counters:
            alert = row_alert(row, dt_to_ms(now))
            if self._resolve(s, incident, rows, alert, now):
                outcome.resolved.append(alert)
        told = {a.fingerprint for a in outcome.resolved}
        for row in rows.values():
            if row.fingerprint not in told and row.notified_resolved_at is None \
                    and self._told_firing(incident, row):
                outcome.resolved.append(row_alert(row, dt_to_ms(row.resolved_at or now)))
        _close(s, incident, list(rows.values()), now,
               {RECOVERED: True, "serving_again": True} if counters else None)
        outcome.closed = True
        outcome.key = GroupKey(incident.alertname, incident.target)  # the incident's own
        self._waiting(s).pop(incident.id, None)

    def _told_firing(self, incident: Incident, row: IncidentAlert) -> bool:
        return row.notified_firing_at is not None or (
            (incident.id, row.fingerprint, dt_to_ms(row.fired_at)) in self._announced)

    def _waiting(self, s: Session) -> dict[int, str]:
        """The incidents waiting for their target to serve (loaded once after a start)."""
        if self._awaiting is None:
            firing = select(IncidentAlert.incident_id).where(
                IncidentAlert.incident_id == Incident.id,
                IncidentAlert.state == IncidentAlertState.FIRING)
            self._awaiting = {i: t for i, t in s.execute(select(Incident.id, Incident.target)
                              .where(Incident.status == _OPEN, Incident.target != "",
                                     ~firing.exists()))}
        return self._awaiting

    def _serving_again(self, s: Session, now: datetime) -> list[_Outcome]:
        """Close the waiting incidents whose target serves again (checked cheaply first)."""
        if self.serving is None:
            return []
        out = []
        waiting = self._waiting(s)
        for incident_id, target in sorted(waiting.items()):
            if not self.serving(target):
                continue
            incident = s.get(Incident, incident_id)
            if incident is None or incident.status != IncidentStatus.OPEN:
                waiting.pop(incident_id, None)
                continue
            rows = _rows(s, incident)
            if not ending.ends(incident, rows.values(), self._joins, self.serving):
                continue
            outcome = _Outcome(incident.id, GroupKey(incident.alertname, incident.target),
                               [], [], closed=False, now=now)
            self._end(s, incident, rows, outcome, now)
            out.append(outcome)
        return out

    def _fire(
        self, s: Session, incident: Incident, rows: dict[str, IncidentAlert], alert: Alert,
        now: datetime,
    ) -> bool:
        """Record a firing alert; True when it is to be announced."""
        row = rows.get(alert.fingerprint)
        if row is None:
            row = rows[alert.fingerprint] = _new_row(incident.id, alert, now)
            s.add(row)
            _fired_events(s, incident, alert, now)
            incident.updated_at = now
            return True
        if row.state == IncidentAlertState.RESOLVED:
            _refire(row, alert, now)
            _fired_events(s, incident, alert, now)
            incident.updated_at = now
            return True
        self._maybe_value_event(s, incident, row, alert, now)
        return row.notified_firing_at is None and (
            (incident.id, row.fingerprint, dt_to_ms(row.fired_at)) not in self._announced)

    def _resolve(
        self, s: Session, incident: Incident, rows: dict[str, IncidentAlert], alert: Alert,
        now: datetime,
    ) -> bool:
        """Record a resolved alert; True when its firing had been announced."""
        row = rows.get(alert.fingerprint)
        if row is None or row.state == IncidentAlertState.RESOLVED:
            return False
        row.state = IncidentAlertState.RESOLVED
        row.resolved_at = ms_to_dt(alert.resolved_at_ms or dt_to_ms(now))
        _event(s, incident, row.resolved_at, TimelineKind.RESOLVED,
               f"{_row_subject(incident, row)}: resolved", {"fingerprint": row.fingerprint})
        incident.updated_at = now
        announced = (incident.id, row.fingerprint, dt_to_ms(row.fired_at)) in self._announced
        return row.notified_firing_at is not None or announced

    def _maybe_value_event(
        self, s: Session, incident: Incident, row: IncidentAlert, alert: Alert, now: datetime
    ) -> None:
        last_at = row.value_recorded_at or row.fired_at
        if (now - last_at).total_seconds() * 1000 < self._value_interval_ms:
            return
        if not _significant(row.value, alert.value, self._value_change):
            return
        row.value = value_to_db(alert.value)
        row.value_recorded_at = now
        row.annotations = labels_to_json(alert.annotations)  # templated with $value
        _event(s, incident, now, TimelineKind.VALUE,
               f"{_subject(incident, alert.name)}: value {format_value(alert.value)}",
               {"fingerprint": row.fingerprint, "value": value_to_json(alert.value)})
        incident.updated_at = now

    def _after_commit(self, outcome: _Outcome) -> Notification | None:
        _tell(outcome)
        if outcome.closed:
            self._announced = {a for a in self._announced if a[0] != outcome.incident_id}
        for alert in outcome.fired if not outcome.joined else ():  # joined: not announced
            fired_ms = dt_to_ms(_fired_at(alert, outcome.now))
            self._announced.add((outcome.incident_id, alert.fingerprint, fired_ms))
        return _notification(outcome)


def _tell(outcome: _Outcome) -> None:
    """The story in Sentinel's own log, once committed: transitions, incidents opened/closed."""
    key, i = outcome.key, outcome.incident_id
    fields = {"incident": i, "alertname": key.alertname, "target": key.target}
    if outcome.opened:
        log.info("incident %d opened: %s on %s", i, key.alertname, key.target,
                 extra={**fields, "state": "open"})
    for _ in outcome.fired:
        log.info("alert %s firing on %s (incident %d)", key.alertname, key.target, i,
                 extra={**fields, "state": "firing"})
    for _ in outcome.resolved:
        log.info("alert %s resolved on %s (incident %d)", key.alertname, key.target, i,
                 extra={**fields, "state": "resolved"})
    if outcome.closed:
        log.info("incident %d resolved: %s on %s", i, key.alertname, key.target,
                 extra={**fields, "state": "resolved"})


def _merge_outcome(outcomes: dict[int, _Outcome], outcome: _Outcome) -> None:
    """At most one notification per incident per call: merge a second pass into the first."""
    known = outcomes.get(outcome.incident_id)
    if known is None:
        outcomes[outcome.incident_id] = outcome
        return
    if outcome.joined != known.joined:
        # The incident's own alerts announce; joined ones only help close it.
        own, other = (known, outcome) if outcome.joined else (outcome, known)
        own.closed = own.closed or other.closed
        own.joined_fired += other.fired + other.joined_fired
        # A joined alert's end may end the incident: the resolutions it announced (only
        # alerts whose firing was announced) go with the incident's own.
        own.resolved += [a for a in other.resolved if a not in own.resolved]
        outcomes[outcome.incident_id] = own
        return
    known.fired += outcome.fired
    known.resolved += outcome.resolved
    known.closed = known.closed or outcome.closed
    known.opened = known.opened or outcome.opened


def _rows(s: Session, incident: Incident) -> dict[str, IncidentAlert]:
    return {r.fingerprint: r for r in s.scalars(
        select(IncidentAlert).where(IncidentAlert.incident_id == incident.id))}


def _is_superseded(row: IncidentAlert | None, alert: Alert) -> bool:
    """The row fires for an occurrence that fired before this alert even became active."""
    return (row is not None and row.state == IncidentAlertState.FIRING
            and row.fired_at < ms_to_dt(alert.active_at_ms))


def _superseded(row: IncidentAlert, alert: Alert, now: datetime) -> Alert:
    """The lost end of the row's occurrence: resolved, at the latest, when the new one began."""
    return replace(row_alert(row, dt_to_ms(now)), group=alert.group, rule=alert.rule,
                   resolved_at_ms=min(alert.active_at_ms, dt_to_ms(now)))


def _recorded(s: Session, key: GroupKey, alert: Alert) -> bool:
    """Whether an incident of the key holds this occurrence (fired when it did, or later)."""
    assert alert.fired_at_ms is not None
    fired = s.scalar(select(IncidentAlert.fired_at).join(Incident).where(
        Incident.target == key.target, IncidentAlert.fingerprint == alert.fingerprint)
        .order_by(Incident.id.desc()).limit(1))
    return fired is not None and dt_to_ms(fired) >= alert.fired_at_ms


def _note_join(s: Session, incident: Incident, key: GroupKey, now: datetime,
               window_ms: int) -> None:
    """Say on the timeline why an alert joined this incident instead of opening its own."""
    _event(s, incident, now, TimelineKind.NOTE,
           f"{key.alertname} on {key.target} joined this incident: the same target, within "
           f"{window_ms // 60_000} min of {incident.alertname} (one failure, one incident; "
           "it pages nothing where the incident's page goes; its own routes are told)",
           {"joined": key.alertname, "target": key.target, "window_ms": window_ms})


def _notification(outcome: _Outcome) -> Notification | None:
    if outcome.joined and not outcome.closed:
        return None  # joined alerts' intents are _enqueue_joined's; their end may end it
    announced = tuple(outcome.fired + outcome.resolved)
    if not announced:
        return None
    kind = NotificationKind.RESOLVED if outcome.closed else NotificationKind.FIRING
    return Notification(outcome.incident_id, kind, announced, outcome.key.labels)


def _preload(s: Session, keys: list[str]
             ) -> dict[str, tuple[Incident, dict[str, IncidentAlert]]]:
    """The open incidents of these group keys, each with its rows by fingerprint."""
    found: dict[str, tuple[Incident, dict[str, IncidentAlert]]] = {}
    for i in range(0, len(keys), 500):
        for incident in s.scalars(select(Incident).where(
                Incident.group_key.in_(keys[i:i + 500]), Incident.status == _OPEN)):
            found[incident.group_key] = (incident, {})
    by_id = {incident.id: rows for incident, rows in found.values()}
    ids = list(by_id)
    for i in range(0, len(ids), 500):
        for row in s.scalars(select(IncidentAlert).where(
                IncidentAlert.incident_id.in_(ids[i:i + 500]))):
            by_id[row.incident_id][row.fingerprint] = row
    return found


def _open_incident(s: Session, key: GroupKey) -> Incident | None:
    return s.scalars(select(Incident).where(
        Incident.group_key == key.text, Incident.status == _OPEN)).one_or_none()


def _insert_incident(s: Session, key: GroupKey, alert: Alert, now: datetime) -> Incident:
    """Open an incident; if another writer opened one for the key meanwhile, use that."""
    incident = opening.new_incident(key, alert, now)
    try:
        with s.begin_nested():
            s.add(incident)
    except IntegrityError:
        # The partial unique index caught a concurrent open (two daemons).
        existing = _open_incident(s, key)
        if existing is None:
            raise
        return existing
    return incident


def _clock_from_evidence(s: Session, incident: Incident, alert: Alert) -> None:
    """Start the incident's clock at its first evidence: the crash line's own time when the
    target logged one, else when the alert went active (the first failed scrape or probe,
    to an evaluation interval). Time to detect runs from it to the opening."""
    active_at = ms_to_dt(alert.active_at_ms)
    line_at = first_evidence(s, incident.target, active_at, incident.opened_at)
    incident.evidence_at = min(active_at, line_at) if line_at is not None else active_at
    incident.detect_ms = max(0, dt_to_ms(incident.opened_at) - dt_to_ms(incident.evidence_at))


def _new_row(incident_id: int, alert: Alert, now: datetime) -> IncidentAlert:
    return IncidentAlert(
        incident_id=incident_id, fingerprint=alert.fingerprint,
        labels=labels_to_json(alert.labels), annotations=labels_to_json(alert.annotations),
        state=IncidentAlertState.FIRING, value=value_to_db(alert.value),
        value_recorded_at=_fired_at(alert, now), active_at=ms_to_dt(alert.active_at_ms),
        fired_at=_fired_at(alert, now), resolved_at=None,
        notified_firing_at=None, notified_resolved_at=None,
    )


def _refire(row: IncidentAlert, alert: Alert, now: datetime) -> None:
    row.state = IncidentAlertState.FIRING
    row.labels = labels_to_json(alert.labels)
    row.annotations = labels_to_json(alert.annotations)
    row.value = value_to_db(alert.value)
    row.active_at = ms_to_dt(alert.active_at_ms)
    row.fired_at = row.value_recorded_at = _fired_at(alert, now)
    row.resolved_at = row.notified_firing_at = row.notified_resolved_at = None


def _fired_events(s: Session, incident: Incident, alert: Alert, now: datetime) -> None:
    fired_at = _fired_at(alert, now)
    active_at = ms_to_dt(alert.active_at_ms)
    data: dict[str, Any] = {"fingerprint": alert.fingerprint}
    # Under the alert's own name: a joined alert is not the incident's first (issue 48).
    subject = _subject(incident, alert.name)
    if active_at < fired_at:
        _event(s, incident, active_at, TimelineKind.PENDING, f"{subject}: pending", data)
    _event(s, incident, fired_at, TimelineKind.FIRING,
           f"{subject}: value {format_value(alert.value)}",
           {**data, "value": value_to_json(alert.value), "labels": labels_to_json(alert.labels)})


def _close(s: Session, incident: Incident, rows: list[IncidentAlert], now: datetime,
           data: dict[str, Any] | None = None) -> None:
    resolved_at = max(r.resolved_at or now for r in rows)
    incident.status = IncidentStatus.RESOLVED
    incident.resolved_at = resolved_at
    incident.resolve_ms = max(0, dt_to_ms(resolved_at) - dt_to_ms(incident.opened_at))
    incident.updated_at = now
    n = len(rows)
    why = ", its target serves again" if data and data.get("serving_again") else ""
    _event(s, incident, resolved_at, TimelineKind.INCIDENT_RESOLVED,
           f"incident resolved: {n} alert{'s' if n != 1 else ''} resolved{why}", data)


def _mark_notified(row: IncidentAlert, now: datetime) -> None:
    # A delivery that names a resolved alert announced its resolution (the
    # tracker only puts resolved alerts in a notification after their firing).
    row.notified_firing_at = row.notified_firing_at or now
    if row.state == IncidentAlertState.RESOLVED:
        row.notified_resolved_at = row.notified_resolved_at or now


def _event(
    s: Session, incident: Incident, at: datetime, kind: TimelineKind, message: str,
    data: dict[str, Any] | None,
) -> None:
    s.add(TimelineEvent(incident_id=incident.id, at=at, kind=kind, message=message, data=data))


def _subject(incident: Incident, alertname: str | None = None) -> str:
    """`VLLMRequestsQueued on gemma-26b`, as timeline lines start: the alert's own name (a
    joined alert's differs from the incident's), else the incident's."""
    name = alertname or incident.alertname
    return f"{name} on {incident.target}" if incident.target else name


def _row_subject(incident: Incident, row: IncidentAlert) -> str:
    return _subject(incident, label_value(labels_from_json(row.labels), "alertname") or None)


def _fired_at(alert: Alert, now: datetime) -> datetime:
    return opening.fired_at(alert, now)


def _significant(last: float | None, value: float, change: float) -> bool:
    """Whether `value` differs enough from the last recorded value to note it."""
    if last is None or math.isnan(value):
        return (last is None) != math.isnan(value)
    if value == last:
        return False
    if last == 0 or math.isinf(last):
        return True
    return abs(value - last) / abs(last) > change
