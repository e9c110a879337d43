"""Post to Alertmanager receivers what they are to hold: changes at once, all every minute.

This is Prometheus's notifier for Sentinel's alerts. The dispatcher's flush of
an Alertmanager receiver's group (amfeed.py: no group_wait, no group_interval,
no outbox message) records in each entry what Alertmanager is to hold; this job
posts it:

- every alert whose pushed state differs from what the receiver was last told,
  at the run that took the change in (`run(changed=True)`), resolved ones with
  their end (issue 48: a new alert waited Sentinel's group_wait; a resolve
  reached Alertmanager 90 s after Sentinel resolved it);
- everything pushed, every `resend_interval` (1 m), firing alerts with endsAt 4
  intervals ahead, so Alertmanager never expires an alert Sentinel still has
  firing, and resolved ones for 15 minutes after their end;
- after a failed post, everything again `RETRY_MS` later, not a whole interval
  later, so a returning Alertmanager hears at once what it missed.

What to post is read from the database, so a restart or an HA failover resumes
at once: the first run after start posts everything. Posting goes straight to
the receiver, not through the outbox: a queued post of an old state, delivered
late, would undo a newer one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.convert import labels_from_json
from sentinel.incidents.db import Database
from sentinel.incidents.models_notify import NotifyGroup
from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify import amfeed
from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
from sentinel.respond.notify.base import DeliveryResult
from sentinel.respond.notify.codec import alert_from_json

log = logging.getLogger(__name__)

RETRY_MS = 5_000  # after a failed post: Alertmanager back from an outage hears it soon

Annotations = Callable[[Session, int], dict[str, str]]


class AlertmanagerResender:
    """Every resend interval, posts each Alertmanager receiver's firing alerts again."""

    def __init__(self, db: Database, receivers: Iterable[object],
                 annotations: Annotations | None = None) -> None:
        self.db = db
        # Only Alertmanager receivers are re-sent to; the others repeat on their routes.
        self.receivers = {r.name: r for r in receivers if isinstance(r, AlertmanagerReceiver)}
        self.annotations = annotations
        self._next_ms: dict[str, int] = {}  # empty after a start: the first run sends
        # What each receiver was last told of each alert (fingerprint → state), by posts
        # that succeeded: a change from it is posted at once.
        self._told: dict[str, dict[str, str]] = {}

    def run(self, now_ms: int, changed: bool = False) -> dict[str, list[DeliveryResult]]:
        """Re-send for every receiver that is due, and (`changed`: the dispatcher took in new
        alert states) post every change at once; returns the results per receiver."""
        due = [n for n in self.receivers if now_ms >= self._next_ms.get(n, 0)]
        if not due and not changed:
            return {}
        names = list(self.receivers) if changed else due
        with self.db.session() as s:
            notes = {name: self._notifications(s, name, self.receivers[name].send_resolved)
                     for name in names}
        out: dict[str, list[DeliveryResult]] = {}
        for name, batch in notes.items():
            if name not in due:
                batch = self._changes(name, batch)
                if not batch:
                    continue
            rx = self.receivers[name]
            results = [rx.send(n, now_ms) for n in batch]
            out[name] = results
            # A full resend names every alert still told of: the others are forgotten.
            told = {} if name in due else self._told.get(name, {})
            self._told[name] = told
            for n, r in zip(batch, results, strict=True):
                if r.ok:
                    told.update((a.fingerprint, a.state.value) for a in n.alerts)
            failed = [r for r in results if not r.ok]
            if failed:
                self._next_ms[name] = now_ms + RETRY_MS
                log.warning("alertmanager %s: resend failed (%d of %d groups): %s", name,
                            len(failed), len(batch), failed[0].detail)
            elif name in due:
                self._next_ms[name] = now_ms + rx.resend_interval_ms
        return out

    def _changes(self, receiver: str, batch: list[Notification]) -> list[Notification]:
        """The alerts of each notification whose state Alertmanager was not told yet."""
        told = self._told.get(receiver, {})
        out = []
        for n in batch:
            pairs = [(a, i) for a, i in zip(n.alerts, n.incident_ids, strict=True)
                     if told.get(a.fingerprint) != a.state.value]
            if pairs:
                firing = any(a.state is AlertState.FIRING for a, _ in pairs)
                out.append(replace(n, alerts=tuple(a for a, _ in pairs),
                                   kind=NotificationKind.FIRING if firing
                                   else NotificationKind.RESOLVED,
                                   incident_ids=tuple(i for _, i in pairs)))
        return out

    def _notifications(self, s: Session, receiver: str, send_resolved: bool
                       ) -> list[Notification]:
        groups = s.scalars(select(NotifyGroup).where(NotifyGroup.receiver == receiver)
                           .order_by(NotifyGroup.id)).all()
        out = []
        for g in groups:
            alerts = [(a, i) for a, i in self._alerts(s, g.alerts)
                      if send_resolved or a.state is AlertState.FIRING]
            if not alerts:
                continue
            firing = any(a.state is AlertState.FIRING for a, _ in alerts)
            out.append(Notification(
                incident_id=next((i for _, i in alerts if i), 0),
                kind=NotificationKind.FIRING if firing else NotificationKind.RESOLVED,
                alerts=tuple(a for a, _ in alerts), group_labels=labels_from_json(g.group_labels),
                group_key=g.key, incident_ids=tuple(i for _, i in alerts)))
        return out

    def _alerts(self, s: Session, entries: Mapping[str, dict]) -> list[tuple[Alert, int]]:
        """What the group's last flush said Alertmanager is to hold (amfeed.py)."""
        out = []
        for _, entry in sorted(entries.items()):
            pushed = amfeed.told(entry)
            if pushed is None:
                continue  # not pushed yet, or muted since
            incident_id = int(entry["incident_id"])
            out.append((self._annotated(s, alert_from_json(pushed), incident_id), incident_id))
        return out

    def _annotated(self, s: Session, alert: Alert, incident_id: int) -> Alert:
        """With the extra annotations the dispatcher's messages carry (the runbook), so a
        resend does not take them away in Alertmanager."""
        if self.annotations is None or not incident_id:
            return alert
        try:
            with s.begin_nested():
                extra = self.annotations(s, incident_id)
        except Exception:
            log.exception("annotations for incident %s failed", incident_id)
            return alert
        if not extra:
            return alert
        return replace(alert, annotations=labels_of({**dict(alert.annotations), **extra}))
