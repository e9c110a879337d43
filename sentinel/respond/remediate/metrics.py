"""Remediation's own metrics: decisions by reason, actions by outcome and verdict, actions in
flight."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RemediationMetrics:
    """Registered on the daemon's registry (SelfMetrics.registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "sentinel_remediation_decisions_total",
            "Remediation decisions by policy and reason (allowed, cooldown, dry_run, ...).",
            ["policy", "reason"], registry=registry)
        self.actions = Counter(
            "sentinel_remediation_actions_total", "Actions taken, by action and outcome.",
            ["action", "outcome"], registry=registry)
        self.in_flight = Gauge(
            "sentinel_remediation_in_flight", "Actions running now (this daemon).",
            registry=registry)
        self.verdicts = Counter(
            "sentinel_remediation_verdicts_total",
            "Remediations judged some time after (remediation.verdicts.after): fixed, "
            "recurred, failed, overridden; by policy and action.",
            ["policy", "action", "verdict"], registry=registry)
        self.abandoned = Counter(
            "sentinel_remediation_abandoned_total",
            "Running attempts failed because their owner stopped renewing the lease or is gone.",
            registry=registry)
