"""The notify worker: a thread that dispatches intents and sends outbox messages.

It runs every `notify.interval` and at once when an evaluation queued
something (`kick()`), so a page leaves within milliseconds of the commit
that asked for it. A failing run is counted and logged; the next run tries
again (everything it needs is in the database). A storm's backlog is dispatched
in bounded chunks, one transaction each, with a heartbeat between them
(`_dispatch`, respond/notify/dispatcher.py).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from sentinel.config import Config
from sentinel.config.timeintervals import interval_table
from sentinel.daemon.heartbeat import Heartbeats
from sentinel.daemon.receivers import build_receivers, receiver_timeouts_ms, send_resolved
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents import notice
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.recovery import end_on_recovery
from sentinel.model import Notification
from sentinel.quietlog import QuietFailure
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
from sentinel.respond.notify.amresend import AlertmanagerResender
from sentinel.respond.notify.depth import outbox_depth
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.mute import InhibitRule
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.page import page_once
from sentinel.respond.notify.routing import build_route
from sentinel.respond.notify.sender import Delivery, RetryPolicy, Sender
from sentinel.respond.remediate.lease import RUNNING

log = logging.getLogger(__name__)

WORKER = "notify"  # its name in the heartbeats (/healthz, sentinel_worker_*{worker})


class Notifier:
    """Owns the Outbox, Dispatcher and Sender of one daemon and the thread that runs them."""

    def __init__(self, config: Config, db: Database, metrics: SelfMetrics,
                 clock_ms: Callable[[], int],
                 annotations: Callable[[Session, int], dict[str, str]] | None = None,
                 heartbeats: Heartbeats | None = None,
                 active: Callable[[], bool] | None = None) -> None:
        n = config.notify
        # HA: only the leader dispatches and sends (standbys' runs are skipped).
        self._active = active or (lambda: True)
        self._may_send = active
        self.outbox = Outbox(n.fallback_receiver)
        # The runbook (when diagnosis is on), for pages, updates and "fixed" messages.
        self._runbook = annotations or (lambda s, i: {})
        self._db = db
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._annotations = annotations
        self._heartbeats = heartbeats
        self.reconfigure(config)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain = True  # one more run at stop (stop(drain=False): none)
        self._ingested = False  # the dispatcher took in alert states since the last resend
        self._thread: threading.Thread | None = None
        self._dispatch_failure = QuietFailure(log, "notify dispatch")
        self._act_first_failure = QuietFailure(log, "notify act-first round")
        self._send_failure = QuietFailure(log, "notify send")
        self._resend_failure = QuietFailure(log, "alertmanager resend")

    def reconfigure(self, config: Config) -> None:
        """Receivers, routes and inhibitions from `config` (at start, and at a reload).

        Each part is replaced whole: a run in progress finishes with the parts it began
        with, the next one reads the new (the worker looks them up once per run).
        """
        n = config.notify
        receivers = build_receivers(config)
        self._act_first_receiver = n.act_first.receiver
        settings = DispatchSettings(
            route=build_route(n.route, [r.name for r in receivers]),
            inhibit_rules=tuple(InhibitRule.from_config(r) for r in n.inhibit_rules),
            send_resolved=send_resolved(config), watchdog=n.watchdog,
            annotations=actfirst.with_act_first(self._annotations),
            intervals=interval_table(config.time_intervals),
            direct=frozenset(r.name for r in receivers if isinstance(r, AlertmanagerReceiver)))
        for r in receivers:  # the counter shows every receiver from the start
            for outcome in ("success", "retry", "failure"):
                self._metrics.notifications.labels(r.name, outcome)
        self.outbox.fallback_receiver = n.fallback_receiver
        self.dispatcher = Dispatcher(self._db, self.outbox, settings)
        self.sender = Sender(
            self._db, {r.name: r for r in receivers}, self.outbox,
            RetryPolicy(n.retry_initial_ms, n.retry_max_ms, n.give_up_after_ms),
            lease_ms=receiver_timeouts_ms(config), on_delivery=self._count,
            may_send=self._may_send)
        # Alertmanager receivers are fed as Prometheus feeds them: changes at once, every
        # alert again each resend interval (amfeed.py, amresend.py), not through the outbox.
        self.resender = AlertmanagerResender(self._db, receivers, self._annotations)
        self._interval_s = n.interval_ms / 1000
        # Its heartbeat interval: one send may take a receiver's whole timeout, so the
        # worker is stuck only after 3 x the longer of that and its own interval.
        self.heartbeat_interval_s = max(
            [n.interval_ms, *receiver_timeouts_ms(config).values()]) / 1000

    def start(self) -> None:
        """Start the worker thread."""
        if self._heartbeats is not None:
            self._heartbeats.expect(WORKER, self.heartbeat_interval_s, time.monotonic())
        self._thread = threading.Thread(target=self._loop, name="sentinel-notify", daemon=True)
        self._thread.start()

    def page(self, notification: Notification, now_ms: int, escalate: bool = False) -> None:
        """A one-off page through the outbox (see respond/notify/page.py), sent at once.

        When the incident's own page is held while Sentinel acts, that page goes now
        instead, carrying this one's reason: one failure, one page (actfirst.py).
        """
        alert = notification.alerts[0] if notification.alerts else None
        reason = dict(alert.annotations).get("summary", "") if alert else ""
        why = dict(alert.labels).get("reason") if alert else None
        if why:
            reason = f"{reason} [{why}]"
        with self._db.session() as s:
            if not actfirst.release(s, notification.incident_id, ms_to_dt(now_ms), reason):
                page_once(s, self.outbox, self.dispatcher.settings.route, notification, now_ms,
                          escalate=escalate)
            elif escalate:  # folded into the held page, but the fallback is still told
                key = hashlib.sha256(f"held|{notification.incident_id}|{reason}".encode())
                self.outbox.escalate(s, replace(notification, idempotency_key=key.hexdigest()[:32]),
                                     reason, now_ms)
        self.kick()

    def not_fixed(self, incident_id: int, now_ms: int, why: str) -> None:
        """Nothing Sentinel does will fix the incident now: a held page goes at once."""
        with self._db.session() as s:
            released = actfirst.release(s, incident_id, ms_to_dt(now_ms), why)
        if released:
            self.kick()

    def recovered(self, incident_id: int, now_ms: int, why: str, data: dict[str, Any]) -> None:
        """End the incident at its verified recovery; its resolution is sent at once.

        If its page was held (act first, then tell once), nobody is paged: one "fixed by
        Sentinel" message goes to `notify.act_first.receiver`, if one is named.
        """
        held = False

        def quiet(s: Session) -> bool:
            nonlocal held
            held = actfirst.fix(s, incident_id, ms_to_dt(now_ms), f"fixed by Sentinel: {why}")
            return held

        def tell(s: Session) -> None:
            if held:
                self._tell_fixed(s, incident_id, now_ms, data)

        end_on_recovery(self._db, self.outbox, incident_id, now_ms, why, data, quiet, tell)
        if not held:  # the incident may have closed with its alerts before the verification
            with self._db.session() as s:
                if actfirst.fix(s, incident_id, ms_to_dt(now_ms), f"fixed by Sentinel: {why}"):
                    self._tell_fixed(s, incident_id, now_ms, data)
        self.kick()

    def _tell_fixed(self, s: Session, incident_id: int, now_ms: int, data: dict[str, Any]
                    ) -> None:
        receiver = self._act_first_receiver
        if notice.fixed_to(receiver) is notice.Reason.FIXED_TIMELINE_ONLY or receiver is None:
            # a documented choice: the timeline alone says it was fixed
            actfirst.note(s, incident_id, ms_to_dt(now_ms), "no notify.act_first.receiver: "
                          "the fix is told on this timeline only", {"act_first": "untold"})
            return
        message = actfirst.fixed_notification(s, incident_id, self._runbook(s, incident_id),
                                              data)
        if message is not None:
            self.outbox.add_message(s, receiver, message, now_ms)

    def kick(self) -> None:
        """Run as soon as possible (an evaluation queued intents)."""
        self._wake.set()

    def stop(self, timeout_s: float, drain: bool = True) -> None:
        """Stop after one more run (bounded); what is still unsent stays in the outbox.

        `drain=False`: no last run. The daemon asks so when jobs still write (past its
        wait for them): on SQLite the run would wait on their lock, and could time out.
        """
        self._drain = drain
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._heartbeats is not None:
            self._heartbeats.forget(WORKER)

    def run_once(self) -> None:
        """One dispatch and one send round, each guarded; then the depth gauges.

        What an evaluation queued is dispatched and sent first: the act-first
        round (held pages whose grace ran out, runbook updates) reads the
        database for tens of milliseconds on a loaded machine, and a new page
        must not wait for it. What that round releases is sent in the same run.
        """
        self._dispatch_and_send()
        try:
            again = self._act_first_round(self._clock_ms())
        except Exception:
            self._metrics.notify_failures.labels("dispatch").inc()
            self._act_first_failure.failed()
        else:
            self._act_first_failure.ok()
            if again:
                self._dispatch_and_send()
        try:
            changed, self._ingested = self._ingested, False
            self.resender.run(self._clock_ms(), changed=changed)
        except Exception:
            self._metrics.notify_failures.labels("resend").inc()
            self._resend_failure.failed()
        else:
            self._resend_failure.ok()
        try:
            depth = outbox_depth(self._db, self._clock_ms())
            self._metrics.outbox_depth.set(depth.pending)
            self._metrics.outbox_oldest_age.set(depth.oldest_age_s)
            self._metrics.intents_pending.set(depth.intents)
        except Exception:
            log.debug("outbox depth unavailable", exc_info=True)

    def _dispatch_and_send(self) -> None:
        try:
            self._dispatch()
        except Exception:
            self._metrics.notify_failures.labels("dispatch").inc()
            self._dispatch_failure.failed()  # logged once, then summarised (database down)
        else:
            self._dispatch_failure.ok()
        try:
            self.sender.run(self._clock_ms)
        except Exception:
            self._metrics.notify_failures.labels("send").inc()
            self._send_failure.failed()
        else:
            self._send_failure.ok()

    def _dispatch(self) -> None:
        """Dispatch until nothing is left: one bounded transaction per chunk of intents or
        due groups (dispatcher.py), with a beat between them. On SQLite an evaluation's
        write waits for one chunk, not for a storm's thousands of intents, and the
        watchdog sees a long dispatch as the progress it is (issue 49)."""
        while True:
            stats = self.dispatcher.run(self._clock_ms())
            # New alert states: Alertmanager receivers hear them this round (amresend.py).
            self._ingested = self._ingested or stats.intents > 0 or stats.pushed > 0
            # Stopping: this chunk is the last; the rest waits in the database for the
            # next start (a drain stays within stop's bound, whatever the backlog).
            if not stats.more or self._stop.is_set():
                return
            self._beat()

    def _act_first_round(self, now_ms: int) -> bool:
        """Held pages whose action's outcome is on record, or whose grace ran out, go now
        (or, verified fixed, are dropped); late model runbooks go as page updates.

        Whether it released or queued anything (then dispatch and send again)."""
        with self._db.session() as s:
            updates = actfirst.updates(s, self._runbook, ms_to_dt(now_ms))
            for receiver, update in updates:
                self.outbox.add_message(s, receiver, update, now_ms)
            # An outcome whose hold nobody decided (HA: the leader that acted lost its
            # lease before it could): decided here, at once, not at the grace's end.
            outcomes = actfirst.outcomes(s, busy=RUNNING.__contains__)
            for o in outcomes:
                if actfirst.ends(o, now_ms) is notice.Reason.RELEASED:
                    actfirst.release(s, o.incident_id, ms_to_dt(now_ms), o.why)
            released = actfirst.expire(s, ms_to_dt(now_ms))
        for o in outcomes:  # FIXED ends the incident, drops the page, tells chat (each once)
            if actfirst.ends(o, now_ms) is notice.Reason.FIXED:
                self.recovered(o.incident_id, o.at_ms, o.why, o.data)
        return bool(updates or released or outcomes)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            if self._active():
                if self._heartbeats is not None:
                    # Busy, not stuck, while its round makes progress: waiting for the
                    # SQLite writer behind an alert storm's transaction is (issue 49).
                    with self._heartbeats.working(WORKER):
                        self.run_once()
                else:
                    self.run_once()
            self._beat()
            self._wake.wait(self._interval_s)
        # Drain: what the last evaluations wrote is sent now (within stop's timeout),
        # not when (or if) the next daemon starts.
        if self._drain and self._active():
            self.run_once()

    def _count(self, d: Delivery) -> None:
        self._metrics.notifications.labels(d.receiver, d.outcome).inc()
        self._beat()  # each delivery is progress: a long run of many sends is not stuck

    def _beat(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.beat(WORKER, time.monotonic())
