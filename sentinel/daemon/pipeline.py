"""One tick of each pipeline stage, as the scheduler's jobs run them.

collect (scrape a target) ──► store ──► rules (evaluate a group) ──►
incidents (open, resolve, timeline) ──► respond (notify receivers)

Each method takes `now_ms` from its caller and never raises: a failing
target, rule group or receiver is recorded and counted, and the loop goes on.

A transition leaves the rule engine only once the incident stage committed
it: `evaluate` acknowledges resolved alerts after `tracker.process`
returned, so a database outage delays a resolution, never loses it. The
first evaluation (and every one after, until it succeeds) first reconciles
open incidents with the restored alert state. A failure that repeats is
logged once with its traceback, then summarised each minute (quietlog).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sentinel import progress
from sentinel.collect.scrape import Scraper, ScrapeResult, ScrapeTarget
from sentinel.collect.workerpool import ProcessScraper
from sentinel.daemon.malloc import trim
from sentinel.daemon.readiness import DataReadiness
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents.alert_states import AlertStateJournal
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, Notification
from sentinel.quietlog import QuietFailure
from sentinel.respond.diagnose.annotations import annotate
from sentinel.respond.notify.base import Receiver
from sentinel.rules.manager import RuleManager
from sentinel.store import MemoryStore

log = logging.getLogger(__name__)


@dataclass
class Pipeline:
    """The stages wired together; the App schedules its methods."""

    store: MemoryStore
    # In process, or through collect worker processes (`collect_workers`).
    scraper: Scraper | ProcessScraper
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
    # Which targets answered since start: restored alerts wait for it (set by the App).
    readiness: DataReadiness | None = None
    # Open incidents still to be checked against the restored alert state.
    reconcile_pending: bool = False
    # collect/accelerators.py: each alert gets the runbook that fits its target's accelerator.
    accelerators: Any = None
    # What the alert_states table holds, per group, so each evaluation writes only its
    # changes (issue 49). Replace it (a new journal) whenever another process may have
    # written the table: a takeover.
    journal: AlertStateJournal = field(default_factory=AlertStateJournal)
    # Pending and firing alerts per group, for the alert gauges without a walk of every
    # group's alerts at each group's evaluation.
    _alert_counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    _failures: dict[str, QuietFailure] = field(default_factory=dict)

    def scrape(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target into the store and count the outcome (blocking form)."""
        return self._count(self.scraper.scrape(target, now_ms), now_ms)

    async def scrape_async(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target into the store and count the outcome, on the I/O loop."""
        return self._count(await self.scraper.scrape_async(target, now_ms), now_ms)

    def _count(self, result: ScrapeResult, now_ms: int) -> ScrapeResult:
        # The scraper logs a failure when its reason changes, not at every scrape.
        if result.missed:  # counted as missed by the scraper: neither success nor failure
            if result.late:  # Sentinel was behind (issue 49): not the target's failure
                self.metrics.scrapes_late.inc()
            return result
        name = result.target.name
        if self.readiness is not None:
            self.readiness.scraped(name, result.up, now_ms)
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
        failure = self._failure(f"evaluation of rule group {group}")
        reconciled: list[Notification] = []
        with self.metrics.evaluation_seconds.labels(group).time():
            try:
                # Queries run concurrently across groups (a slow group delays only
                # itself); the incident side is recorded one group at a time.
                alerts = self.rules.evaluate_group(group, now_ms)
                if self.accelerators is not None:
                    alerts = self.accelerators.annotate(alerts)
                failed = self.rules.failed_rules(group)
                if failed:  # as prometheus_rule_evaluation_failures_total: per rule
                    self.metrics.rule_failures.labels(group).inc(failed)
                # A group waiting here behind a storm's evaluation is busy, not stuck.
                with progress.turn(self.record_lock):
                    if self.reconcile_pending:
                        reconciled = self._reconcile(now_ms)
                    # The group's changes to the rule state are saved in the same
                    # transaction as the incidents.
                    delta = self.journal.delta(group, alerts, now_ms)
                    try:
                        notifications = self.tracker.process(alerts, now_ms, states=delta)
                    except Exception:
                        # Committed or not, unknown: the group is written whole next time.
                        self.journal.forget(group)
                        raise
                    self.journal.committed(delta)
                    # Committed: only now may resolved alerts leave the rule engine.
                    self.rules.acknowledge(alerts)
            except Exception:
                # The database may be gone for a moment: the rule engine keeps
                # reporting what was not committed, and the next evaluation retries.
                self.metrics.evaluation_failures.labels(group).inc()
                failure.failed()
                if reconciled and self.on_queued is not None:
                    self.on_queued()
                return reconciled
            failure.ok()
            if self.remediator is not None:
                # Only matches and queues: actions run off this thread. A target of a
                # fleet-wide failure is not acted on by itself (incidents/fleet.py).
                # Those are audited as refusals (reason `fleet_wide`), once per incident.
                fleet = getattr(self.tracker, "fleet", None)
                if fleet is None:
                    self.remediator.offer(alerts, now_ms)
                else:
                    offered, withheld = fleet.split(alerts)
                    self.remediator.offer(offered, now_ms, withheld=withheld)
        notifications = reconciled + notifications
        self._count_alerts(group, alerts)
        if self.on_queued is not None:
            if notifications:
                self.on_queued()
            return notifications
        for notification in notifications:
            self.notify(notification, now_ms)
        return notifications

    def reconcile(self, now_ms: int) -> list[Notification]:
        """Resolve open incidents whose alerts the restored rule state does not fire.

        Never raises: on failure it stays pending and the next evaluation runs it first.
        """
        failure = self._failure("reconciling open incidents")
        try:
            notifications = self._reconcile(now_ms)
        except Exception:
            failure.failed()
            return []
        failure.ok()
        if notifications and self.on_queued is not None:
            self.on_queued()
        return notifications

    def _reconcile(self, now_ms: int) -> list[Notification]:
        notifications = self.tracker.reconcile(self.rules.active_alerts(), now_ms)
        self.reconcile_pending = False
        for n in notifications:
            log.warning("incident %d resolved on reconciliation: its alerts no longer fire",
                        n.incident_id)
        return notifications

    def _failure(self, what: str) -> QuietFailure:
        failure = self._failures.get(what)
        if failure is None:
            failure = self._failures.setdefault(what, QuietFailure(log, what))
        return failure

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

    def _count_alerts(self, group: str, alerts: Sequence[Alert]) -> None:
        # Counts this group's alerts only; the others' are remembered from their own
        # evaluations (a group removed by a reload keeps its last count until restart).
        pending = sum(1 for a in alerts if a.state is AlertState.PENDING)
        firing = sum(1 for a in alerts if a.state is AlertState.FIRING)
        self._alert_counts[group] = (pending, firing)
        counts = list(self._alert_counts.values())
        self.metrics.alerts.labels(AlertState.PENDING.value).set(sum(p for p, _ in counts))
        self.metrics.alerts.labels(AlertState.FIRING.value).set(sum(f for _, f in counts))

    def housekeeping(self, now_ms: int) -> None:
        """Drop samples past retention and report store size."""
        self.store.gc(now_ms)
        trim()
        self.metrics.series.set(self.store.series_count())
        self.metrics.samples.set(self.store.sample_count())
        self.metrics.store_bytes.set(self.store.sample_bytes())
