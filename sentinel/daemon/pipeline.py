"""One tick of each pipeline stage, as the scheduler's jobs run them.

collect (scrape a target) ──► store ──► rules (evaluate a group) ──►
incidents (open, resolve, timeline) ──► respond (notify receivers)

Each method takes `now_ms` from its caller and never raises: a failing
target, rule group or receiver is recorded and counted, and the loop goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sentinel.collect.scrape import Scraper, ScrapeResult, ScrapeTarget
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, Notification
from sentinel.respond.diagnose.annotations import annotate
from sentinel.respond.notify.base import Receiver
from sentinel.rules.manager import RuleManager
from sentinel.store import MemoryStore

log = logging.getLogger(__name__)


@dataclass
class Pipeline:
    """The stages wired together; the App schedules its methods."""

    store: MemoryStore
    scraper: Scraper
    rules: RuleManager
    tracker: IncidentTracker
    receivers: Sequence[Receiver]
    metrics: SelfMetrics
    # Extra annotations for an incident's notifications (the runbook), when diagnosis is on.
    annotations: Callable[[int], dict[str, str]] | None = None
    # With the outbox (the daemon), the tracker queued the notifications in
    # its transaction: wake the notify worker instead of sending here.
    on_queued: Callable[[], None] | None = None
    # sentinel.respond.remediate.dispatch.Remediator, when a response policy is configured.
    remediator: Any = None
    # Serialises the incident/DB side of evaluations (groups evaluate in parallel threads).
    record_lock: threading.Lock = field(default_factory=threading.Lock)
    _saved: frozenset[tuple[Any, ...]] | None = field(default=None, init=False, repr=False)

    def scrape(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target into the store and count the outcome (blocking form)."""
        return self._count(self.scraper.scrape(target, now_ms))

    async def scrape_async(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target into the store and count the outcome, on the I/O loop."""
        return self._count(await self.scraper.scrape_async(target, now_ms))

    def _count(self, result: ScrapeResult) -> ScrapeResult:
        # The scraper logs a failure when its reason changes, not at every scrape.
        name = result.target.name
        self.metrics.scrapes.labels(name, "success" if result.up else "failure").inc()
        self.metrics.scrape_seconds.labels(name).observe(result.duration_s)
        if result.dropped:
            self.metrics.samples_dropped.inc(result.dropped)
        if result.limit == "sample_limit":
            self.metrics.sample_limit_exceeded.labels(name).inc()
        elif result.limit == "label_limit":
            self.metrics.label_limit_exceeded.labels(name).inc()
        return result

    def evaluate(self, group: str, now_ms: int) -> list[Notification]:
        """Evaluate one rule group, update incidents, send what they ask for."""
        self.metrics.evaluations.labels(group).inc()
        with self.metrics.evaluation_seconds.labels(group).time():
            try:
                # Queries run concurrently across groups (a slow group delays only
                # itself); recording the outcome in the database is one at a time.
                alerts = self.rules.evaluate_group(group, now_ms)
                with self.record_lock:
                    notifications = self.tracker.process(alerts, now_ms)
                    self._save_alert_states()
                    if self.remediator is not None:
                        # Only matches and queues: actions run off this thread.
                        self.remediator.offer(alerts, now_ms)
            except Exception:
                # The database may be gone for a moment: keep the rule state in
                # memory and try again at the next evaluation.
                self.metrics.evaluation_failures.labels(group).inc()
                log.exception("evaluation of rule group %s failed", group)
                return []
        self._count_alerts()
        if self.on_queued is not None:
            if notifications:
                self.on_queued()
            return notifications
        for notification in notifications:
            self.notify(notification, now_ms)
        return notifications

    def _save_alert_states(self) -> None:
        """Persist the active alerts when their states changed (what a restart restores).

        The saved set is replaced whole; rewriting it at every evaluation of
        every group cost most of the evaluation time with 1,000 firing
        alerts. Values and annotations are as of the last change; the first
        evaluation after a restart refreshes them.
        """
        active = self.rules.active_alerts()
        key = frozenset((a.group, a.rule, a.fingerprint, a.state, a.active_at_ms,
                         a.fired_at_ms, a.keep_firing_since_ms) for a in active)
        if key != self._saved:
            self.tracker.save_alert_states(active)
            self._saved = key

    def notify(self, notification: Notification, now_ms: int) -> None:
        """Deliver one notification to every receiver and record each outcome on the incident."""
        fingerprints = [a.fingerprint for a in notification.alerts]
        notification = self._annotated(notification)
        for receiver in self.receivers:
            try:
                result = receiver.send(notification, now_ms)
            except Exception as exc:  # a receiver must never stop the others
                log.exception("receiver %s raised", receiver.name)
                ok, detail = False, f"receiver raised {type(exc).__name__}"
            else:
                ok, detail = result.ok, result.detail
            self.metrics.notifications.labels(receiver.name, "success" if ok else "failure").inc()
            try:
                self.tracker.record_notification(
                    notification.incident_id, receiver.name, notification.kind, ok, detail,
                    now_ms, fingerprints,
                )
            except Exception:
                log.exception("could not record notification on incident %s",
                              notification.incident_id)

    def _annotated(self, notification: Notification) -> Notification:
        if self.annotations is None:
            return notification
        try:
            return annotate(notification, self.annotations(notification.incident_id))
        except Exception:  # a missing runbook must never hold a page back
            log.exception("runbook annotations for incident %s failed",
                          notification.incident_id)
            return notification

    def _count_alerts(self) -> None:
        active: list[Alert] = self.rules.active_alerts()
        for state in (AlertState.PENDING, AlertState.FIRING):
            self.metrics.alerts.labels(state.value).set(
                sum(1 for a in active if a.state == state)
            )

    def housekeeping(self, now_ms: int) -> None:
        """Drop samples past retention and report store size."""
        self.store.gc(now_ms)
        self.metrics.series.set(self.store.series_count())
        self.metrics.samples.set(self.store.sample_count())
        self.metrics.store_bytes.set(self.store.sample_bytes())
