"""The dispatcher: intents → routes → aggregation groups → one outbox message per group flush.

One `run(now_ms)` is one transaction:

1. Unprocessed intents (written by the tracker with the incident change) are
   routed, except those of an incident whose first page waits while Sentinel
   acts (actfirst.py); each matched route puts the alert into its group (a row in
   `notify_groups`, created with its first flush at now + group_wait).
2. Groups due to flush decide, as Alertmanager does: alerts muted by a
   silence or an inhibition rule are left out (the change is written on the
   incident timeline once, with the reason), and `grouping.needs_update`
   says whether the rest makes a message (a mere repeat of incidents a
   person acknowledged is not sent: incidents/operator.py). A message is an outbox row; the
   sender delivers it. Resolved alerts leave the group after its flush; an
   empty group is deleted.

Group state lives in the database, so a restart neither loses a waiting
group nor re-sends what a group already sent. Intents are timed as they were
written, and a change that meets a due, unsent state of the same alert
flushes that state first: a run that comes late (the daemon was restarted
between an evaluation and its dispatch) sends what the skipped runs would have.
On PostgreSQL rows are locked with SKIP LOCKED, so two daemons never dispatch
the same intent.
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
from sentinel.incidents.db import Database
from sentinel.incidents.models import (
    Incident,
    IncidentAlert,
    IncidentAlertState,
    IncidentStatus,
    TimelineEvent,
    TimelineKind,
)
from sentinel.incidents.models_notify import NotifyGroup, NotifyIntent
from sentinel.incidents.operator import acknowledged
from sentinel.model import (
    Alert,
    AlertState,
    Labels,
    Notification,
    NotificationKind,
    label_value,
    labels_of,
)
from sentinel.respond.notify import actfirst, amfeed
from sentinel.respond.notify.cause import lead_with_cause
from sentinel.respond.notify.codec import alert_from_json, alert_to_json
from sentinel.respond.notify.grouping import idempotency_key, needs_update
from sentinel.respond.notify.joined import UPDATE, JoinedRoutes
from sentinel.respond.notify.mute import (
    InhibitRule,
    MuteReason,
    Silence,
    inhibited_by,
    silenced_by,
)
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import Route, match_routes, time_muted
from sentinel.respond.notify.silences import active_silences
from sentinel.timeintervals import TimeInterval

log = logging.getLogger(__name__)

BATCH = 5_000
# A group with nothing new is still looked at this often (mute changes, repeats)
# when its route's group_interval is 0 (send every change at once).
IDLE_RECHECK_MS = 60_000
WATCHDOG = "Watchdog"
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


@dataclass(frozen=True, slots=True)
class DispatchStats:
    """What one run did."""

    intents: int
    messages: int
    pushed: int = 0  # changes of what Alertmanager receivers hold (the resender posts them)


def watchdog_alert(now_ms: int) -> Alert:
    """The always-firing alert of the dead man's switch (route it to a receiver that expects it)."""
    labels = labels_of({"alertname": WATCHDOG, "severity": "none"})
    annotations = labels_of({"summary": "Sentinel's notification pipeline is working. "
                             "This alert always fires; page when it stops arriving."})
    return Alert(group="sentinel", rule=WATCHDOG, labels=labels, annotations=annotations,
                 state=AlertState.FIRING, value=1.0, active_at_ms=0, last_eval_ms=now_ms,
                 fired_at_ms=0)


class Dispatcher:
    """Routes intents into groups and turns group flushes into outbox messages."""

    def __init__(self, db: Database, outbox: Outbox, settings: DispatchSettings) -> None:
        self.db = db
        self.outbox = outbox
        self.settings = settings
        self._routes = _by_path(settings.route)
        self._pushed = 0  # of the run in progress

    def run(self, now_ms: int) -> DispatchStats:
        """Route new intents, flush due groups; one transaction."""
        now = ms_to_dt(now_ms)
        self._pushed = 0
        with self.db.session() as s:
            groups: dict[str, NotifyGroup] = {}
            muting = _Muting(s, now_ms, bool(self.settings.inhibit_rules))
            query = select(NotifyIntent).where(NotifyIntent.dispatched_at.is_(None))
            held = actfirst.held_incidents(s)
            if held:  # their first page waits while Sentinel acts (actfirst.py)
                query = query.where(NotifyIntent.incident_id.not_in(held))
            intents = s.scalars(_locked(query.order_by(NotifyIntent.id).limit(BATCH),
                                        self.db)).all()
            messages = 0
            joins = JoinedRoutes(s)
            for it in intents:
                it.dispatched_at = now
                # Timed as when it was written: a run late by a restart acts as the runs
                # it stands in for would have.
                at_ms = min(now_ms, dt_to_ms(it.created_at))
                messages += self._ingest(s, groups, alert_from_json(it.alert), it.incident_id,
                                         at_ms, now_ms, muting, joins)
            if self.settings.watchdog:
                self._ingest(s, groups, watchdog_alert(now_ms), 0, now_ms, now_ms, muting,
                             only_if_absent=True)
            s.flush()
            due = s.scalars(_locked(select(NotifyGroup).where(
                NotifyGroup.next_flush_at <= now).order_by(NotifyGroup.id), self.db)).all()
            messages += sum(self._flush(s, g, *muting.get(), now_ms) for g in due)
        return DispatchStats(len(intents), messages, self._pushed)

    # -- ingest ------------------------------------------------------------

    def _ingest(self, s: Session, groups: dict[str, NotifyGroup], alert: Alert,
                incident_id: int, at_ms: int, now_ms: int, muting: _Muting,
                joins: JoinedRoutes | None = None, only_if_absent: bool = False) -> int:
        """Put the alert into its routes' groups; returns how many messages that sent."""
        if self.settings.route is None:
            return 0
        sent = 0
        for route in match_routes(self.settings.route, alert.labels):
            direct = route.receiver in self.settings.direct
            # A joined alert: nothing of its own where the incident's page went (joined.py);
            # Alertmanager hears every alert and groups them itself.
            why = None if joins is None or direct else joins.decide(alert, incident_id,
                                                                     route.receiver)
            if why is notice.Reason.JOINED:
                continue
            key = route.group_key(alert.labels)
            group = groups.get(key) or s.scalars(
                select(NotifyGroup).where(NotifyGroup.key == key)).one_or_none()
            fp = alert.fingerprint
            if why is None and joins is not None and not direct \
                    and joins.unheard_end(alert, incident_id, group):
                continue
            if group is not None and _due_before_change(group, fp, alert, at_ms):
                # The group was due before this change of the alert came (a dispatcher
                # that was not restarted in between would have sent it): send it now, or
                # replacing the entry loses a firing (or resolve) nobody was told of.
                s.flush()  # a group begun in this run is written first: _flush may delete it
                sent += self._flush(s, group, *muting.get(), now_ms)
                if group in s.deleted:
                    s.flush()  # the key is free for the group that follows
                    group = None
            if group is None:
                group = _new_group(key, route, alert.labels, at_ms, direct)
                s.add(group)
            groups[key] = group
            if only_if_absent and fp in group.alerts:
                continue
            alerts = dict(group.alerts)
            before = alerts.get(fp, {})
            alerts[fp] = {"alert": alert_to_json(alert), "incident_id": incident_id,
                          "muted": before.get("muted")}
            if "pushed" in before:  # what Alertmanager holds stands until the flush
                alerts[fp]["pushed"] = before["pushed"]
            if why is notice.Reason.JOINED_TOLD:  # a joined warning: told as an update
                alerts[fp][UPDATE] = True
            elif joins is not None and alert.state is AlertState.FIRING:
                joins.told(incident_id, route.receiver)
            group.alerts = alerts
            # A change is sent no sooner than group_interval after the last message.
            last = dt_to_ms(group.last_sent_at) if group.last_sent_at else at_ms
            wake = at_ms if direct else max(at_ms, last + route.group_interval_ms)
            if wake < dt_to_ms(group.next_flush_at):
                group.next_flush_at = ms_to_dt(wake)
        return sent

    # -- flush -------------------------------------------------------------

    def _flush(self, s: Session, g: NotifyGroup, silences: Sequence[Silence],
               firing_now: Sequence[tuple[Labels, int]], now_ms: int) -> int:
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
                _note_mute(s, entry["incident_id"], g.receiver, fp, reason, now_ms)
            if kept != entry.get("kept"):
                entry["kept"] = kept
                if kept is not None:
                    _note(s, entry["incident_id"], g.receiver, fp, now_ms,
                          f"{g.receiver}: notified though {kept}", {"kept": kept})
            if reason is None:
                (firing if alert.state is AlertState.FIRING else resolved).append(fp)
        if g.receiver in self.settings.direct:
            return self._push(s, g, route, alerts, now_ms)
        sent = 0
        send_resolved = self.settings.send_resolved.get(g.receiver, True)
        # A route in a mute window (or outside its active ones) sends nothing and keeps
        # what it would have said for the first flush after the window (Alertmanager).
        muted_route = time_muted(route, self.settings.intervals, now_ms)
        _note_route_muted(s, g.receiver, alerts, muted_route, now_ms)
        if muted_route is not None:
            # Resolved alerts stay too: a page sent before the window is resolved after it.
            log.debug("group %s: not sent, %s", g.key, muted_route)
            g.alerts = alerts
            g.next_flush_at = ms_to_dt(now_ms) + timedelta(
                milliseconds=route.group_interval_ms or IDLE_RECHECK_MS)
            return 0
        if (firing or resolved) and self._sends(s, g, alerts, firing, resolved, send_resolved,
                                                route.repeat_interval_ms, now_ms):
            shown = firing + (resolved if send_resolved else [])
            if shown:
                g.seq += 1
                self.outbox.add_message(s, g.receiver,
                                        self._message(s, g, alerts, shown, firing), now_ms)
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
        _note_route_muted(s, g.receiver, alerts, muted_route, now_ms)
        kept, changed = amfeed.push(alerts, muted_route is None, now_ms)
        self._pushed += changed
        if not kept:
            s.delete(g)
            return 0
        g.alerts = kept
        g.next_flush_at = ms_to_dt(now_ms) + timedelta(milliseconds=IDLE_RECHECK_MS)
        return 0

    def _mute_reason(self, alert: Alert, incident_id: int, silences: Sequence[Silence],
                     sources: Sequence[tuple[Labels, int]], now_ms: int,
                     ) -> tuple[MuteReason | None, str | None]:
        """What mutes the alert; and, when an inhibition matched but mutes nothing (its
        source is of the same incident, or the alert's incident is critical: the notice
        core's rule), the line that says so."""
        silenced = silenced_by(alert.labels, silences, now_ms)
        if silenced is not None or not self.settings.inhibit_rules:
            return silenced, None
        rules = self.settings.inhibit_rules
        outside = inhibited_by(alert.labels, rules, [lb for lb, i in sources if i != incident_id])
        found = outside or inhibited_by(alert.labels, rules,
                                        [lb for lb, i in sources if i == incident_id])
        if found is None:
            return None, None
        rule = notice.inhibition(label_value(alert.labels, "severity") == "critical",
                                 by_own=outside is None)
        if rule is notice.Reason.INHIBITED:
            return found, None
        return None, f"{found.text} ({rule.value})"

    @staticmethod
    def _sends(s: Session, g: NotifyGroup, alerts: Mapping[str, dict[str, Any]],
               firing: list[str], resolved: list[str], send_resolved: bool, repeat_ms: int,
               now_ms: int) -> bool:
        """needs_update, except that a mere repeat of acknowledged incidents is not sent."""
        def needs(repeat: int) -> bool:
            return needs_update(
                sent_firing=g.sent_firing, sent_resolved=g.sent_resolved, firing=firing,
                resolved=resolved, send_resolved=send_resolved,
                last_sent_ms=dt_to_ms(g.last_sent_at) if g.last_sent_at else None,
                now_ms=now_ms, repeat_ms=repeat)
        if not needs(repeat_ms):
            return False
        if needs(NO_REPEAT_MS):
            return True  # something changed: acknowledged or not, it is news
        # Only the repeat_interval is due: a person who acknowledged has it already.
        return not acknowledged(s, [int(alerts[fp]["incident_id"]) for fp in firing])

    def _message(self, s: Session, g: NotifyGroup, alerts: Mapping[str, dict[str, Any]],
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
            alerts=tuple(self._annotated(s, alert_from_json(alerts[fp]["alert"]), incident)
                         for fp, incident in zip(ordered, ids, strict=True)),
            group_labels=labels_from_json(g.group_labels), group_key=g.key,
            idempotency_key=idempotency_key(g.key, dt_to_ms(g.created_at), g.seq, firing,
                                            resolved),
            incident_ids=ids)


    def _annotated(self, s: Session, alert: Alert, incident_id: int) -> Alert:
        if self.settings.annotations is None or not incident_id:
            return alert
        try:
            with s.begin_nested():  # a failed lookup must not undo the dispatch
                extra = self.settings.annotations(s, incident_id)
        except Exception:
            log.exception("annotations for incident %s failed", incident_id)
            return alert
        if not extra:
            return alert
        merged = lead_with_cause({**dict(alert.annotations), **extra}, dict(alert.labels))
        return dataclasses.replace(alert, annotations=labels_of(merged))


class _Muting:
    """The silences and inhibition sources of one run, read from the database when first
    needed (most runs flush nothing)."""

    def __init__(self, s: Session, now_ms: int, inhibits: bool) -> None:
        self._s, self._now_ms, self._inhibits = s, now_ms, inhibits
        self._got: tuple[Sequence[Silence], Sequence[tuple[Labels, int]]] | None = None

    def get(self) -> tuple[Sequence[Silence], Sequence[tuple[Labels, int]]]:
        if self._got is None:
            self._got = (active_silences(self._s, self._now_ms),
                         _firing_labels(self._s) if self._inhibits else [])
        return self._got


def _due_before_change(group: NotifyGroup, fp: str, alert: Alert, at_ms: int) -> bool:
    """Whether the group holds `fp` in another state and was due to flush by `at_ms`."""
    entry = group.alerts.get(fp)
    if entry is None or dt_to_ms(group.next_flush_at) > at_ms:
        return False
    return bool((entry["alert"]["state"] == "firing") != (alert.state is AlertState.FIRING))


def _new_group(key: str, route: Route, labels: Labels, now_ms: int, direct: bool
               ) -> NotifyGroup:
    now = ms_to_dt(now_ms)
    wait_ms = 0 if direct else route.group_wait_ms
    return NotifyGroup(
        key=key, receiver=route.receiver, route=route.path,
        group_labels=dict(route.group_labels(labels)), alerts={}, sent_firing=[],
        sent_resolved=[], seq=0, created_at=now,
        next_flush_at=now + timedelta(milliseconds=wait_ms), last_sent_at=None)


def _note_mute(s: Session, incident_id: int, receiver: str, fp: str, reason: MuteReason | None,
               now_ms: int) -> None:
    if not incident_id:
        return
    data: dict[str, Any]
    if reason is None:
        message, data = f"{receiver}: no longer muted", {"muted": None}
    else:
        message = f"{receiver}: not notified, {reason.text}"
        data = {"muted": reason.text, "silence_id": reason.silence_id,
                "inhibited_by": reason.inhibited_by}
    s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                        message=message, data={**data, "receiver": receiver, "fingerprint": fp}))


def _firing_labels(s: Session) -> list[tuple[Labels, int]]:
    """Labels (and incident) of every alert firing in an open incident: the sources
    inhibition looks at. A source of the alert's own incident mutes nothing."""
    rows = s.execute(select(IncidentAlert.labels, IncidentAlert.incident_id).join(Incident)
                     .where(Incident.status == IncidentStatus.OPEN,
                            IncidentAlert.state == IncidentAlertState.FIRING))
    return [(labels_from_json(labels), int(i)) for labels, i in rows]


def _note(s: Session, incident_id: int, receiver: str, fp: str, now_ms: int, message: str,
          data: dict[str, Any]) -> None:
    if incident_id:
        s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(now_ms), kind=TimelineKind.NOTE,
                            message=message,
                            data={**data, "receiver": receiver, "fingerprint": fp}))


def _note_route_muted(s: Session, receiver: str, alerts: Mapping[str, dict[str, Any]],
                      muted: str | None, now_ms: int) -> None:
    """Who was not told because the route is in a mute time interval (once per window per
    alert), and when the window ended (issue 48: a muted route left no line)."""
    for fp, entry in sorted(alerts.items()):
        if entry.get("route_muted") == muted:
            continue
        entry["route_muted"] = muted
        if muted is not None:
            _note(s, entry["incident_id"], receiver, fp, now_ms,
                  f"{receiver}: not notified yet, {muted}", {"route_muted": muted})
        else:
            _note(s, entry["incident_id"], receiver, fp, now_ms,
                  f"{receiver}: its mute time interval is over", {"route_muted": None})


def _locked(query: Any, db: Database) -> Any:
    # SQLite serialises writers (BEGIN IMMEDIATE); PostgreSQL needs row locks.
    return query.with_for_update(skip_locked=True) if db.dialect == "postgresql" else query


def _by_path(route: Route | None) -> dict[str, Route]:
    out: dict[str, Route] = {}
    stack = [route] if route else []
    while stack:
        r = stack.pop()
        out[r.path] = r
        stack.extend(r.children)
    return out
