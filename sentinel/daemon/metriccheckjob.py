"""The daemon's missing-metric check: once targets have been scraped, every rule's names must exist.

Runs at the evaluation interval. Until some target has answered two
scrapes, nothing is judged (a fresh server has not yet created every
series). Then each (rule, metric) no target exposes is logged once, written
to the store as `sentinel_rule_missing_metrics{rule,metric,replacement} 1`
at every run (the shipped `SentinelRuleMetricMissing` alert reads it), and
set on Sentinel's own /metrics. A name that appears later is written as 0.

A down target is not a missing metric (issue 48): its series go stale, and a
server that crashed would otherwise raise a `SentinelRuleMetricMissing` page
for every name only it exposes, beside its real page. So a name some target
has exposed (since Sentinel started) is not judged missing while any target
is down, and while no target is up nothing new is judged at all: the last
judgement stands until a target answers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from prometheus_client import CollectorRegistry, Gauge

from sentinel.model import METRIC_NAME, labels_of
from sentinel.promql import Engine
from sentinel.rules.loader import RuleGroup
from sentinel.rules.metriccheck import MissingMetric, find_missing, rule_requirements, store_has
from sentinel.store import MemoryStore

log = logging.getLogger(__name__)

SERIES = "sentinel_rule_missing_metrics"
# A name counts as exposed when a target reported it within this window (the lookback).
PRESENT_WINDOW_MS = 5 * 60_000
Guard = Callable[[str, Callable[..., None]], Callable[..., None]]


class MetricCheckJob:
    """Checks the loaded rules' metric names against what the targets expose."""

    def __init__(self, groups: Callable[[], list[RuleGroup]], store: MemoryStore,
                 engine: Engine, registry: CollectorRegistry, interval_ms: int,
                 now_ms: Callable[[], int]) -> None:
        self.groups = groups
        self.store = store
        self.engine = engine
        self.interval_ms = interval_ms
        self.now_ms = now_ms
        self.gauge = Gauge(SERIES, "1 when a loaded rule selects a metric no target exposes.",
                           ["rule", "metric", "replacement"], registry=registry)
        self.reported: set[MissingMetric] = set()
        self.missing: list[MissingMetric] = []
        # Names some target has exposed: while a target is down, they may be its alone.
        self.seen: set[str] = set()
        self.judged = False  # once judged, a fleet that went quiet keeps the last judgement

    def schedule(self, sched: BaseScheduler, guard: Guard, first_run: Any) -> None:
        """One interval job."""
        sched.add_job(guard("rule_metrics", self.run), "interval",
                      seconds=self.interval_ms / 1000, next_run_time=first_run,
                      id="rule_metrics")

    def ready(self, now_ms: int) -> bool:
        """Whether some target has answered at least two scrapes recently."""
        vec = self.engine.query("max(sum_over_time(up[10m]))", now_ms)
        return isinstance(vec, list) and bool(vec) and vec[0].value >= 2

    def run(self) -> None:
        """The scheduled job: check now."""
        self.check(self.now_ms())

    def check(self, now: int) -> list[MissingMetric]:
        """Check at `now`; returns what is missing (empty until ready)."""
        if not self.ready(now) and not self.judged:
            return []
        requirements = rule_requirements(self.groups())
        present = store_has(self.store, now, PRESENT_WINDOW_MS)
        up, down = self._targets(now)
        if up == 0:  # nothing answers: no name can be judged; the last judgement stands
            missing = self.missing
        else:
            self.seen.update(x for needed in requirements.values() for names in needed
                             for x in names if present(x))
            missing = find_missing(requirements, present)
            self.judged = True
            if down:
                missing = [m for m in missing if m.metric not in self.seen]
        for m in missing:
            if m not in self.reported:
                log.warning("%s", m.message())
                self.reported.add(m)
        for m in self.reported:
            value = 1.0 if m in missing else 0.0
            self.store.add(labels_of({METRIC_NAME: SERIES, "rule": m.rule, "metric": m.metric,
                                      "replacement": m.replacement}), now, value)
            self.gauge.labels(m.rule, m.metric, m.replacement).set(value)
        self.missing = missing
        return missing

    def _targets(self, now_ms: int) -> tuple[int, int]:
        """How many targets are up and down now (their `up` series)."""
        vec = self.engine.query("count(up == 1) or vector(0)", now_ms)
        up = int(vec[0].value) if isinstance(vec, list) and vec else 0
        vec = self.engine.query("count(up == 0) or vector(0)", now_ms)
        down = int(vec[0].value) if isinstance(vec, list) and vec else 0
        return up, down
