"""Sentinel's own metrics, served on its /metrics for the Prometheus that watches the watcher."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from sentinel.buildinfo import build_info
from sentinel.daemon.threadcpu import ThreadCPUCollector


class SelfMetrics:
    """Counters and gauges about Sentinel itself, on a registry of its own (not the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # process_* (CPU, RSS, open fds, start time) and python_info, as every exporter has.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        r.register(ThreadCPUCollector())  # which thread the CPU goes to (I/O loop, rules, ...)
        info = build_info()
        Gauge("sentinel_build_info", "Always 1; the labels say which build is running.",
              ["version", "commit", "python"], registry=r,
              ).labels(info["version"], info["commit"], info["python"]).set(1)
        self.scrapes = Counter(
            "sentinel_scrapes_total", "Scrapes by target and outcome.", ["target", "outcome"],
            registry=r,
        )
        self.scrape_seconds = Histogram(
            "sentinel_scrape_duration_seconds", "Time to fetch, parse and store one scrape.",
            ["target"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.evaluations = Counter(
            "sentinel_rule_group_evaluations_total", "Rule group evaluations.", ["group"],
            registry=r,
        )
        self.evaluation_failures = Counter(
            "sentinel_rule_group_evaluation_failures_total",
            "Rule group evaluations that raised (the loop went on).", ["group"], registry=r,
        )
        # Prometheus's prometheus_rule_evaluation_failures_total: one per rule whose query
        # (or output) failed in an evaluation; the group's other rules still ran.
        self.rule_failures = Counter(
            "sentinel_rule_evaluation_failures_total",
            "Rule evaluations that failed (the rule's health is err), by group.", ["group"],
            registry=r,
        )
        self.evaluation_seconds = Histogram(
            "sentinel_rule_group_duration_seconds", "Time to evaluate a rule group and record it.",
            ["group"], registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.notifications = Counter(
            "sentinel_notifications_total", "Notifications by receiver and outcome.",
            ["receiver", "outcome"], registry=r,
        )
        self.alerts = Gauge(
            "sentinel_alerts", "Active alerts by state.", ["state"], registry=r,
        )
        # Collect workers (sentinel/collect/workerpool.py), when collect_workers > 1.
        self.collect_workers = Gauge(
            "sentinel_collect_workers",
            "Collect worker processes configured (0: scrapes run in the daemon's process).",
            registry=r,
        )
        self.collect_worker_restarts = Counter(
            "sentinel_collect_worker_restarts_total",
            "Collect worker processes that exited or hung and were restarted.", registry=r,
        )
        self.series = Gauge(
            "sentinel_store_series", "Series held in the embedded store.", registry=r,
        )
        self.samples = Gauge(
            "sentinel_store_samples", "Samples held in the embedded store.", registry=r,
        )
        self.store_bytes = Gauge(
            "sentinel_store_bytes", "Bytes of samples held in the embedded store.", registry=r,
        )
        # Issue 49: one series for the fleet (a starved daemon is late everywhere at once).
        self.scrapes_late = Counter(
            "sentinel_scrapes_late_total",
            "Scrapes that did not finish because Sentinel was behind (their deadline was "
            "reached late): not counted as the target failing, `up` not written.", registry=r,
        )
        self.samples_dropped = Counter(
            "sentinel_store_samples_dropped_total",
            "Scraped samples not stored because no loaded rule reads their series.", registry=r,
        )
        # As Prometheus's prometheus_target_scrapes_exceeded_sample_limit_total, per target.
        self.sample_limit_exceeded = Counter(
            "sentinel_scrapes_exceeded_sample_limit_total",
            "Scrapes that hit the target's sample_limit and were rejected.", ["target"],
            registry=r,
        )
        self.label_limit_exceeded = Counter(
            "sentinel_scrapes_exceeded_label_limit_total",
            "Scrapes that hit the target's label_limit and were rejected.", ["target"],
            registry=r,
        )
        self.log_source_up = Gauge(
            "sentinel_log_source_up", "Whether a log source's last poll worked.",
            ["target", "source"], registry=r,
        )
        self.log_events = Counter(
            "sentinel_log_events_total", "Crash signatures matched in logs.",
            ["target", "category"], registry=r,
        )
        self.job_failures = Counter(
            "sentinel_job_failures_total", "Scheduled jobs that raised unexpectedly.", ["job"],
            registry=r,
        )
        # The notify stage (outcome: success, retry, failure).
        self.outbox_depth = Gauge(
            "sentinel_notify_outbox_depth", "Messages waiting in the outbox (incl. retrying).",
            registry=r,
        )
        self.outbox_oldest_age = Gauge(
            "sentinel_notify_outbox_oldest_age_seconds",
            "Age of the oldest message waiting in the outbox (0 when empty).", registry=r,
        )
        self.intents_pending = Gauge(
            "sentinel_notify_intents_pending", "Alert intents not yet routed into groups.",
            registry=r,
        )
        self.notify_failures = Counter(
            "sentinel_notify_run_failures_total",
            "Dispatcher or sender runs that raised (the worker went on).", ["stage"], registry=r,
        )

    def log_sources(self) -> dict[str, dict[str, float]]:
        """Each log source's last poll, {target: {source: 1.0 ok or 0.0 failed}}."""
        out: dict[str, dict[str, float]] = {}
        for family in self.log_source_up.collect():
            for sample in family.samples:
                out.setdefault(sample.labels["target"], {})[sample.labels["source"]] = (
                    sample.value)
        return out
