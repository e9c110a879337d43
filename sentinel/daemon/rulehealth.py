"""Each rule's health on /metrics, read from the rule manager at scrape time.

    sentinel_rule_health{group="vllm",rule="VLLMRequestsQueued",health="err"} 1

One series per rule, labelled with its current health ("ok", "err",
"unknown": not evaluated yet, or a recording rule left to a remote backend's
ruler), as Prometheus reports health and lastError in /api/v1/rules. The last
error itself is logged when a rule turns "err" (rules/manager.py): error
texts do not belong in label values.

Beside it, each group's timing: how long its last evaluation took, how many
evaluations overran the group's interval, and the slowest rule of the last
overrun (the log line at the overrun says the same):

    sentinel_rule_group_overruns_total{group="vllm-serving"} 7
    sentinel_rule_group_slowest_rule_seconds{group="vllm-serving",rule="VLLMQueueTimeHigh"} 2.1
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class RuleHealthCollector(Collector):
    """Collects `sentinel_rule_health` from `rules()` (a RuleManager, or None before start)."""

    def __init__(self, rules: Callable[[], Any]) -> None:
        self.rules = rules

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """One sample per rule with its current health."""
        family = GaugeMetricFamily("sentinel_rule_health",
                                   "1 for each rule's current health (ok, err, unknown).",
                                   labels=["group", "rule", "health"])
        manager = self.rules()
        for s in manager.rule_health() if manager is not None else ():
            family.add_metric([s.group, s.rule, str(s.health)], 1.0)
        yield family
        yield from _group_timing(manager)


def _group_timing(manager: Any) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    last = GaugeMetricFamily("sentinel_rule_group_last_duration_seconds",
                             "Duration of the rule group's last evaluation.", labels=["group"])
    overruns = CounterMetricFamily(
        "sentinel_rule_group_overruns",
        "Evaluations of the rule group that took longer than its interval.", labels=["group"])
    slowest = GaugeMetricFamily(
        "sentinel_rule_group_slowest_rule_seconds",
        "The slowest rule of the group's last overrun and its duration.",
        labels=["group", "rule"])
    for t in manager.group_timing() if manager is not None else ():
        last.add_metric([t.group], t.last_duration_s)
        overruns.add_metric([t.group], t.overruns)
        if t.slowest_rule:
            slowest.add_metric([t.group, t.slowest_rule], t.slowest_s)
    yield from (last, overruns, slowest)
