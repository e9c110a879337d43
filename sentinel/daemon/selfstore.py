"""Sentinel's own metrics written into its own store, so the self-alerts of
rules/sentinel.yaml fire inside Sentinel as well as in a Prometheus scraping /metrics.

Only series a loaded rule reads are written (`MemoryStore.wants`), once per
evaluation interval, by the `self-metrics` job. The collectors are named one
by one (not the whole registry): collecting every per-target histogram of a
1,000-target fleet each interval to keep five names would be waste.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.registry import Collector

from sentinel.model import METRIC_NAME, labels_of
from sentinel.store import MemoryStore


def write_to_store(collectors: Iterable[Collector], store: MemoryStore, now_ms: int) -> int:
    """Add the current samples of `collectors` that a loaded rule reads; returns how many.

    Counters are written as their `_total` series (never `_created`), gauges as they are.
    """
    n = 0
    for collector in collectors:
        for family in collector.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = labels_of({METRIC_NAME: sample.name, **sample.labels})
                if store.wants(labels):
                    store.add(labels, now_ms, sample.value)
                    n += 1
    return n
