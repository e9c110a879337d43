"""Each rule's health on /metrics, read from the rule manager at scrape time.

    sentinel_rule_health{group="vllm",rule="VLLMRequestsQueued",health="err"} 1

One series per rule, labelled with its current health ("ok", "err",
"unknown": not evaluated yet, or a recording rule left to a remote backend's
ruler), as Prometheus reports health and lastError in /api/v1/rules. The last
error itself is logged when a rule turns "err" (rules/manager.py): error
texts do not belong in label values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class RuleHealthCollector(Collector):
    """Collects `sentinel_rule_health` from `rules()` (a RuleManager, or None before start)."""

    def __init__(self, rules: Callable[[], Any]) -> None:
        self.rules = rules

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One sample per rule with its current health."""
        family = GaugeMetricFamily("sentinel_rule_health",
                                   "1 for each rule's current health (ok, err, unknown).",
                                   labels=["group", "rule", "health"])
        manager = self.rules()
        for s in manager.rule_health() if manager is not None else ():
            family.add_metric([s.group, s.rule, str(s.health)], 1.0)
        yield family
