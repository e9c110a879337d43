"""Scheduled probe jobs: one per probed target, samples into the store."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from prometheus_client import CollectorRegistry, Counter

from sentinel.collect.probe import ProbeTarget
from sentinel.collect.probe_runner import ProbeRunner
from sentinel.config import Config
from sentinel.config.probe import effective_probe
from sentinel.model import labels_of
from sentinel.promql import Engine
from sentinel.store import MemoryStore

log = logging.getLogger(__name__)

Guard = Callable[[str, Callable[..., None]], Callable[..., None]]


def build_probe_targets(config: Config) -> list[ProbeTarget]:
    """A ProbeTarget for every target whose effective probe interval is not 0."""
    out = []
    for t in config.targets:
        interval, timeout = effective_probe(t.probe, config.probe_interval_ms)
        if not interval:
            continue
        p = t.probe
        out.append(ProbeTarget(
            name=t.name, url=t.url, labels=labels_of(dict(t.labels)), interval_ms=interval,
            timeout_ms=timeout, canary=p.canary if p else True, expect=p.expect if p else "",
            skip_canary_when_busy=p.skip_canary_when_busy if p else True,
            api_key=p.api_key if p else ""))
    return out


def generation_total_reader(engine: Engine) -> Callable[[str, int], float | None]:
    """Reads `sum(vllm:generation_tokens_total{target=...})` at a time, None when absent."""
    def read(target: str, at_ms: int) -> float | None:
        vec = engine.query(f'sum(vllm:generation_tokens_total{{target="{target}"}})', at_ms)
        if not isinstance(vec, list) or not vec or math.isnan(vec[0].value):
            return None
        return float(vec[0].value)
    return read


class ProbeJobs:
    """Owns the probe runner and its scheduler jobs."""

    def __init__(self, config: Config, store: MemoryStore, engine: Engine,
                 registry: CollectorRegistry, now_ms: Callable[[], int]) -> None:
        self.store = store
        self.now_ms = now_ms
        self.targets = build_probe_targets(config)
        self.runner = ProbeRunner(config.probe_canary_concurrency,
                                  generation_total_reader(engine)) if self.targets else None
        self.probes = Counter("sentinel_probes", "Probes run, by target, probe and outcome.",
                              ["target", "probe", "outcome"], registry=registry)
        self.skipped = Counter(
            "sentinel_probe_canaries_skipped",
            "Canaries skipped because the target's own counters showed tokens flowing.",
            ["target"], registry=registry)
        self._last_error: dict[tuple[str, str], str | None] = {}

    def count(self) -> int:
        """How many jobs `schedule` adds."""
        return len(self.targets)

    def schedule(self, sched: BaseScheduler, guard: Guard, first_run: Any) -> None:
        """One interval job per probed target."""
        for t in self.targets:
            sched.add_job(guard("probe", self.probe), "interval", args=[t],
                          seconds=t.interval_ms / 1000, next_run_time=first_run,
                          id=f"probe:{t.name}")

    def probe(self, t: ProbeTarget) -> None:
        """Probe one target now and store its samples."""
        assert self.runner is not None
        now = self.now_ms()
        samples, results, skipped = self.runner.probe(t, now)
        for labels, value in samples:
            self.store.add(labels, now, value)
        if skipped:
            self.skipped.labels(t.name).inc()
        for r in results:
            self.probes.labels(t.name, r.probe, "success" if r.success else "failure").inc()
            key = (t.name, r.probe)
            if r.error != self._last_error.get(key):
                if r.error:
                    log.warning("%s probe of %s failed: %s", r.probe, t.name, r.error)
                elif self._last_error.get(key):
                    log.info("%s probe of %s succeeds again", r.probe, t.name)
                self._last_error[key] = r.error

    def close(self) -> None:
        """Stop the runner's loop."""
        if self.runner is not None:
            self.runner.close()
