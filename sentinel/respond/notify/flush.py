"""One aggregation group's flush: what it says, to whom, and who is not told and why.

A due group decides as Alertmanager does: alerts muted by a silence or an
inhibition rule are left out (the change is written on the incident timeline
once, with the reason: notes.py), a route in a mute time interval sends nothing
yet, and `grouping.needs_update` says whether the rest makes a message (a mere
repeat of incidents a person acknowledged is not sent: incidents/operator.py).
A message is an outbox row; the sender delivers it. Resolved alerts leave the
group after its flush; an empty group is deleted. An Alertmanager receiver's
group makes no message: its flush records what Alertmanager is to hold
(amfeed.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents import notice
from sentinel.incidents.convert import dt_to_ms, labels_from_json, ms_to_dt
from sentinel.incidents.models import Incident, IncidentAlert, IncidentAlertState, IncidentStatus
from sentinel.incidents.models_notify import NotifyGroup, OutboxMessage
from sentinel.incidents.operator import acknowledged
from sentinel.incidents.prefetch import prefetch
from sentinel.model import (
    Alert,
    AlertState,
    Labels,
    Notification,
    NotificationKind,
    label_value,
    labels_of,
)
from sentinel.respond.notify import amfeed
from sentinel.respond.notify.cause import lead_with_cause
from sentinel.respond.notify.codec import alert_from_json, notification_to_json
from sentinel.respond.notify.grouping import idempotency_key, needs_update
from sentinel.respond.notify.joined import UPDATE
from sentinel.respond.notify.mute import (
    InhibitionSources,
    InhibitRule,
    MuteReason,
    Silence,
    silenced_by,
)
from sentinel.respond.notify.notes import note, note_mute, note_route_muted
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import Route, time_muted
from sentinel.respond.notify.silences import active_silences
from sentinel.timeintervals import TimeInterval

log = logging.getLogger(__name__)

# A group with nothing new is still looked at this often (mute changes, repeats)
# when its route's group_interval is 0 (send every change at once).
IDLE_RECHECK_MS = 60_000
NO_REPEAT_MS = 1 << 62  # a repeat_interval that never comes due


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """What the dispatcher needs from the config, resolved."""

    route: Route | None
    inhibit_rules: tuple[InhibitRule, ...] = ()
    send_resolved: Mapping[str, bool] = field(default_factory=dict)
    watchdog: bool = False
    # Extra annotations per incident (the runbook, when diagnosis is on), read
    # when a message is built, so it carries the newest runbook on record.
    annotations: Callable[[Session, int], dict[str, str]] | None = None
    # The config's named time intervals, for routes' mute/active_time_intervals.
    intervals: Mapping[str, tuple[TimeInterval, ...]] = field(default_factory=dict)
    # Receivers fed as Prometheus feeds Alertmanager (amfeed.py): every change at the
    # run that takes it in, no group_wait or group_interval of Sentinel's, no outbox.
    direct: frozenset[str] = frozenset()


class GroupFlusher:
    """Flushes due groups for one dispatcher (its settings, outbox and routes)."""

    def __init__(self, outbox: Outbox, settings: DispatchSettings,
                 routes: Mapping[str, Route]) -> None:
        self.outbox = outbox
        self.settings = settings
        self._routes = routes
        self.pushed = 0  # changes of what Alertmanager receivers hold, since the caller reset it
        # Messages made since the last `annotate`: their incidents' annotations are read
        # together, once per incident (issue 49: a storm's read, and savepoint, per alert).
        self._unannotated: list[tuple[OutboxMessage, Notification]] = []

    def flush(self, s: Session, g: NotifyGroup, silences: Sequence[Silence],
              firing_now: InhibitionSources, now_ms: int) -> int:
        """Decide and record one due group's flush; how many messages it made (0 or 1)."""
        route = self._routes.get(g.route) or self.settings.route
        assert route is not None
        alerts = {fp: dict(e) for fp, e in g.alerts.items()}
        firing: list[str] = []
        resolved: list[str] = []
        for fp, entry in sorted(alerts.items()):
            alert = alert_from_json(entry["alert"])
            reason, kept = self._mute_reason(alert, int(entry["incident_id"]), silences,
                                             firing_now, now_ms)
            text = reason.text if reason else None
            if text != entry.get("muted"):
                entry["muted"] = text
                note_mute(s, entry["incident_id"], g.receiver, fp, reason, now_ms)
            if kept != entry.get("kept"):
                entry["kept"] = kept
                if kept is not None:
                    note(s, entry["incident_id"], g.receiver, fp, now_ms,
                          f"{g.receiver}: notified though {kept}", {"kept": kept})
            if reason is None:
                (firing if alert.state is AlertState.FIRING else resolved).append(fp)
        if g.receiver in self.settings.direct:
            return self._push(s, g, route, alerts, now_ms)
        sent = 0
        send_resolved = notice.resolved_to(self.settings.send_resolved.get(
            g.receiver, True)) is notice.Reason.RESOLVED
        # A route in a mute window (or outside its active ones) sends nothing and keeps
        # what it would have said for the first flush after the window (Alertmanager).
        muted_route = time_muted(route, self.settings.intervals, now_ms)
        note_route_muted(s, g.receiver, alerts, muted_route, now_ms)
        why = self._decide(s, g, alerts, firing, resolved, send_resolved,
                           route.repeat_interval_ms, now_ms, muted_route is not None)
        if why is notice.Reason.MUTED_INTERVAL:
            # Resolved alerts stay too: a page sent before the window is resolved after it.
            log.debug("group %s: not sent, %s", g.key, muted_route)
            g.alerts = alerts
            g.next_flush_at = ms_to_dt(now_ms) + timedelta(
                milliseconds=route.group_interval_ms or IDLE_RECHECK_MS)
            return 0
        if why in (notice.Reason.CHANGED, notice.Reason.REPEATED):
            shown = firing + (resolved if send_resolved else [])
            if shown:
                g.seq += 1
                message = self._message(g, alerts, shown, firing)
                row = self.outbox.add_message(s, g.receiver, message, now_ms)
                if self.settings.annotations is not None:
                    self._unannotated.append((row, message))
                sent = 1
            g.sent_firing, g.sent_resolved = firing, resolved if send_resolved else []
            g.last_sent_at = ms_to_dt(now_ms)
        alerts = {fp: e for fp, e in alerts.items() if e["alert"]["state"] == "firing"}
        if not alerts:
            s.delete(g)
            return sent
        g.alerts = alerts
        interval = route.group_interval_ms or IDLE_RECHECK_MS
        g.next_flush_at = ms_to_dt(now_ms) + timedelta(milliseconds=interval)
        return sent

    def _push(self, s: Session, g: NotifyGroup, route: Route,
              alerts: dict[str, dict[str, Any]], now_ms: int) -> int:
        """An Alertmanager receiver's flush: what it is to hold now (amfeed.py), no message."""
        muted_route = time_muted(route, self.settings.intervals, now_ms)
        note_route_muted(s, g.receiver, alerts, muted_route, now_ms)
        kept, changed = amfeed.push(alerts, muted_route is None, now_ms)
        self.pushed += changed
        if not kept:
            s.delete(g)
            return 0
        g.alerts = kept
        g.next_flush_at = ms_to_dt(now_ms) + timedelta(milliseconds=IDLE_RECHECK_MS)
        return 0

    def _mute_reason(self, alert: Alert, incident_id: int, silences: Sequence[Silence],
                     sources: InhibitionSources, now_ms: int,
                     ) -> tuple[MuteReason | None, str | None]:
        """What mutes the alert; and, when an inhibition matched but mutes nothing (its
        source is of the same incident, or the alert's incident is critical: the notice
        core's rule), the line that says so."""
        silenced = silenced_by(alert.labels, silences, now_ms)
        outside = found = None
        if silenced is None and self.settings.inhibit_rules:
            outside = sources.inhibited_by(alert.labels, lambda i: i != incident_id)
            found = outside or sources.inhibited_by(alert.labels, lambda i: i == incident_id)
        why = notice.mute(silenced is not None, found is not None, by_own=outside is None,
                          critical=label_value(alert.labels, "severity") == "critical")
        if why is None:
            return None, None
        if notice.muted(why):
            return silenced or found, None
        assert found is not None
        return None, f"{found.text} ({why.value})"

    @staticmethod
    def _decide(s: Session, g: NotifyGroup, alerts: Mapping[str, dict[str, Any]],
                firing: list[str], resolved: list[str], send_resolved: bool, repeat_ms: int,
                now_ms: int, route_muted: bool) -> notice.Reason:
        """The core's `group_flush`, with Alertmanager's needs_update saying what changed
        (a mere repeat of acknowledged incidents is not sent: they have it already)."""
        def needs(repeat: int) -> bool:
            return bool(firing or resolved) and needs_update(
                sent_firing=g.sent_firing, sent_resolved=g.sent_resolved, firing=firing,
                resolved=resolved, send_resolved=send_resolved,
                last_sent_ms=dt_to_ms(g.last_sent_at) if g.last_sent_at else None,
                now_ms=now_ms, repeat_ms=repeat)
        if route_muted:
            return notice.group_flush(True, False, False, False)
        changed = needs(NO_REPEAT_MS)  # acknowledged or not, it is news
        repeat_due = not changed and needs(repeat_ms)
        ack = repeat_due and acknowledged(s, [int(alerts[fp]["incident_id"]) for fp in firing])
        return notice.group_flush(False, changed, repeat_due, ack)

    def _message(self, g: NotifyGroup, alerts: Mapping[str, dict[str, Any]],
                 shown: list[str], firing: list[str]) -> Notification:
        resolved = [fp for fp in shown if fp not in firing]
        ordered = [fp for fp in shown if fp in firing] + resolved
        ids = tuple(int(alerts[fp]["incident_id"]) for fp in ordered)
        kind = NotificationKind.FIRING if firing else NotificationKind.RESOLVED
        if firing and all(alerts[fp].get(UPDATE) for fp in firing):
            kind = NotificationKind.UPDATE  # joined warnings only: no page (joined.py)
        return Notification(
            incident_id=next((i for i in ids if i), 0),
            kind=kind,
            alerts=tuple(alert_from_json(alerts[fp]["alert"]) for fp in ordered),
            group_labels=labels_from_json(g.group_labels), group_key=g.key,
            idempotency_key=idempotency_key(g.key, dt_to_ms(g.created_at), g.seq, firing,
                                            resolved),
            incident_ids=ids)

    def annotate(self, s: Session) -> None:
        """Add the incidents' extra annotations (the runbook, the excerpt, what Sentinel
        tried) to the messages made since the last call, in the same transaction.

        Each incident's are read once, for all its alerts, after one `prefetch` of the
        timeline rows they come from; in one savepoint, so a failed lookup does not undo
        the dispatch. When that fails, each incident is tried in its own savepoint and an
        alert whose lookup failed goes without (as a lookup per alert did).
        """
        pending, self._unannotated = self._unannotated, []
        lookup = self.settings.annotations
        if lookup is None or not pending:
            return
        ids = sorted({i for _, m in pending for i in m.incident_ids if i})
        try:
            with s.begin_nested():
                prefetch(s, ids)
                extra = {i: lookup(s, i) for i in ids}
        except Exception:
            log.exception("annotations for %d incident(s) failed; trying each", len(ids))
            extra = {}
            for i in ids:
                try:
                    with s.begin_nested():
                        extra[i] = lookup(s, i)
                except Exception:
                    log.exception("annotations for incident %s failed", i)
        for row, message in pending:
            alerts = tuple(_annotated(a, extra.get(i)) for a, i in
                           zip(message.alerts, message.incident_ids, strict=True))
            row.notification = notification_to_json(dataclasses.replace(message, alerts=alerts))


def _annotated(alert: Alert, extra: Mapping[str, str] | None) -> Alert:
    if not extra:
        return alert
    merged = lead_with_cause({**dict(alert.annotations), **extra}, dict(alert.labels))
    return dataclasses.replace(alert, annotations=labels_of(merged))


class Muting:
    """The silences and inhibition sources of one run, read from the database when first
    needed (most runs flush nothing)."""

    def __init__(self, s: Session, now_ms: int, rules: Sequence[InhibitRule]) -> None:
        self._s, self._now_ms, self._rules = s, now_ms, rules
        self._got: tuple[Sequence[Silence], InhibitionSources] | None = None

    def get(self) -> tuple[Sequence[Silence], InhibitionSources]:
        """(silences, inhibition sources), read once."""
        if self._got is None:
            self._got = (active_silences(self._s, self._now_ms), InhibitionSources(
                self._rules, firing_labels(self._s) if self._rules else []))
        return self._got


def firing_labels(s: Session) -> list[tuple[Labels, int]]:
    """Labels (and incident) of every alert firing in an open incident: the sources
    inhibition looks at. A source of the alert's own incident mutes nothing."""
    rows = s.execute(select(IncidentAlert.labels, IncidentAlert.incident_id).join(Incident)
                     .where(Incident.status == IncidentStatus.OPEN,
                            IncidentAlert.state == IncidentAlertState.FIRING))
    return [(labels_from_json(labels), int(i)) for labels, i in rows]
