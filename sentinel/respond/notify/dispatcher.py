"""The dispatcher: intents → routes → aggregation groups; due groups flush (flush.py).

One `run(now_ms)` is one transaction, bounded (issue 49: a storm's 5,000 intents in
one transaction held SQLite's one writer for minutes, and every evaluation behind it):

1. Unprocessed intents (written by the tracker with the incident change) are
   routed, except those of an incident whose first page waits while Sentinel
   acts (actfirst.py); each matched route puts the alert into its group (a row in
   `notify_groups`, created with its first flush at now + group_wait; at once for
   an Alertmanager receiver, amfeed.py). A joined alert goes only where the
   incident's page did not (joined.py).
2. Groups due to flush decide and record what they say (flush.py): one outbox
   message per flush at most, and the timeline lines of who was not told.

A run takes in at most CHUNK intents, and flushes (at most CHUNK) due groups only
when no intent is left waiting; `DispatchStats.more` says there is more, and the
notify worker runs again at once, beating its heartbeat between runs. Each chunk
reads the groups its intents touch in one query and marks its intents in one
UPDATE, so its cost is proportional to its intents, not to the groups on record.

Group state lives in the database, so a restart neither loses a waiting
group nor re-sends what a group already sent. Intents are timed as they were
written, and a change that meets a due, unsent state of the same alert
flushes that state first: a run that comes late (the daemon was restarted
between an evaluation and its dispatch) sends what the skipped runs would have.
On PostgreSQL rows are locked with SKIP LOCKED, so two daemons never dispatch
the same intent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sentinel.incidents import notice
from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models_notify import NotifyGroup, NotifyIntent
from sentinel.model import Alert, AlertState, Labels, labels_of
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.codec import alert_from_json, alert_to_json
from sentinel.respond.notify.flush import DispatchSettings, GroupFlusher, Muting
from sentinel.respond.notify.joined import UPDATE, JoinedRoutes
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import Route, match_routes

__all__ = ["DispatchSettings", "DispatchStats", "Dispatcher", "watchdog_alert"]

log = logging.getLogger(__name__)

# Intents taken in (and due groups flushed) per transaction: on SQLite an evaluation's
# write waits for at most one chunk, and the worker beats between chunks (issue 49).
CHUNK = 500
IN_CHUNK = 500  # keys or ids per IN (...) list
WATCHDOG = "Watchdog"


@dataclass(frozen=True, slots=True)
class DispatchStats:
    """What one run did."""

    intents: int
    messages: int
    pushed: int = 0  # changes of what Alertmanager receivers hold (the resender posts them)
    more: bool = False  # the run stopped at a chunk: intents or due groups are left for the next


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

    chunk = CHUNK  # intents (and due groups) per run; a test may set its own

    def __init__(self, db: Database, outbox: Outbox, settings: DispatchSettings) -> None:
        self.db = db
        self.outbox = outbox
        self.settings = settings

    @property
    def settings(self) -> DispatchSettings:
        """Routing, timing and muting; the flusher follows a replacement (a test or a
        caller that swaps the settings must not leave the flush on the old ones)."""
        return self._settings

    @settings.setter
    def settings(self, value: DispatchSettings) -> None:
        self._settings = value
        self._routes = _by_path(value.route)
        self._flusher = GroupFlusher(self.outbox, value, self._routes)

    def run(self, now_ms: int) -> DispatchStats:
        """Route new intents, flush due groups: one bounded transaction (`more`: call again).

        At most CHUNK intents are taken in, and due groups are flushed (CHUNK at most)
        only once no intent waits: a group then says what the whole backlog put in it,
        as one unbounded run would have, and an evaluation's write waits one chunk.
        """
        now = ms_to_dt(now_ms)
        self._flusher.pushed = 0
        more = False
        # No autoflush: the intake reads its groups up front, and a statement per intent
        # that first writes the session's changes costs a storm seconds (issue 49).
        with self.db.session() as s, s.no_autoflush:
            muting = Muting(s, now_ms, self.settings.inhibit_rules)
            rows = self._pending(s)
            more = len(rows) > self.chunk
            rows = rows[:self.chunk]
            messages = self._take_in(s, rows, now_ms, muting, last=not more)
            if not more:
                s.flush()
                due = s.scalars(_locked(select(NotifyGroup).where(
                    NotifyGroup.next_flush_at <= now).order_by(NotifyGroup.id)
                    .limit(self.chunk + 1), self.db)).all()
                more = len(due) > self.chunk
                messages += sum(self._flusher.flush(s, g, *muting.get(), now_ms)
                                for g in due[:self.chunk])
            self._flusher.annotate(s)
        return DispatchStats(len(rows), messages, self._flusher.pushed, more)

    def _pending(self, s: Session) -> list[Any]:
        """Up to chunk + 1 undispatched intents, oldest first (the extra one says `more`);
        those of an incident whose first page waits while Sentinel acts stay (actfirst.py)."""
        query = select(NotifyIntent.id, NotifyIntent.incident_id, NotifyIntent.alert,
                       NotifyIntent.created_at).where(
            NotifyIntent.dispatched_at.is_(None),
            NotifyIntent.incident_id.not_in(actfirst.held_query()))
        return list(s.execute(_locked(query.order_by(NotifyIntent.id).limit(self.chunk + 1),
                                      self.db)).all())

    def _take_in(self, s: Session, rows: Sequence[Any], now_ms: int, muting: Muting,
                 last: bool) -> int:
        """Route the intents into their groups, in order; how many messages that sent.
        The last chunk of a backlog also puts the Watchdog alert in (after the intents,
        as one unbounded run did: its group is created, and flushed, after theirs).

        The groups they touch are read in one query and the joined-alert facts once
        per run (not a SELECT per intent); the intents are marked in one UPDATE.
        """
        now = ms_to_dt(now_ms)
        # Timed as when it was written: a run late by a restart acts as the runs it stands
        # in for would have.
        intents = [(alert_from_json(alert), int(incident_id),
                    min(now_ms, dt_to_ms(created_at)))
                   for _, incident_id, alert, created_at in rows]
        watchdog = watchdog_alert(now_ms) if self.settings.watchdog and last else None
        alerts = [a for a, _, _ in intents] + ([watchdog] if watchdog else [])
        groups = self._groups_for(s, alerts)
        joins = JoinedRoutes(s)
        joins.preload({i for _, i, _ in intents})
        messages = 0
        for alert, incident_id, at_ms in intents:
            messages += self._ingest(s, groups, alert, incident_id, at_ms, now_ms, muting,
                                     joins)
        if watchdog is not None:
            self._ingest(s, groups, watchdog, 0, now_ms, now_ms, muting, only_if_absent=True)
        ids = [r[0] for r in rows]
        for i in range(0, len(ids), IN_CHUNK):
            s.execute(update(NotifyIntent).where(NotifyIntent.id.in_(ids[i:i + IN_CHUNK]))
                      .values(dispatched_at=now))
        return messages

    def _groups_for(self, s: Session, alerts: Sequence[Alert]) -> dict[str, NotifyGroup | None]:
        """The groups these alerts' routes put them in, read in one query per IN_CHUNK keys
        (None: no such group yet)."""
        if self.settings.route is None:
            return {}
        keys = sorted({route.group_key(a.labels) for a in alerts
                       for route in match_routes(self.settings.route, a.labels)})
        groups: dict[str, NotifyGroup | None] = dict.fromkeys(keys)
        for i in range(0, len(keys), IN_CHUNK):
            for g in s.scalars(select(NotifyGroup).where(
                    NotifyGroup.key.in_(keys[i:i + IN_CHUNK]))):
                groups[g.key] = g
        return groups

    # -- ingest ------------------------------------------------------------

    def _ingest(self, s: Session, groups: dict[str, NotifyGroup | None], alert: Alert,
                incident_id: int, at_ms: int, now_ms: int, muting: Muting,
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
            # Read up front (_groups_for); a key not read there (a caller of its own) is
            # looked up here.
            group = groups[key] if key in groups else s.scalars(
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
                sent += self._flusher.flush(s, group, *muting.get(), now_ms)
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
