"""Discovered targets in the daemon: runs the config's `kubernetes_sd` blocks.

The daemon hands two hooks: `add(target)` (a new target, or one whose pod
changed: schedule or reschedule its scrape) and `remove(name)` (stop
scraping, mark its series stale), and optionally `death(target, line)`
(a container of the pod died: a line for the target's log stream). This
module only keeps discovery honest against the static targets: a
discovered name that a static target already has is ignored (logged once
per name), so a config entry always wins. The
remediation engine learns each discovered target's address too, so a pod
action and its verification know where the pod is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from sentinel.collect.kubernetes_sd import KubernetesDiscovery, SDMetrics
from sentinel.config import Config, TargetConfig

log = logging.getLogger(__name__)


class DiscoveredTargets:
    """Every `kubernetes_sd` block of a config, feeding one pair of hooks."""

    def __init__(self, config: Config, add: Callable[[TargetConfig], None],
                 remove: Callable[[str], None],
                 registry: CollectorRegistry | None = None,
                 death: Callable[[str, str], None] | None = None,
                 since_ms: int | None = None) -> None:
        self._static = {t.name for t in config.targets}
        self._add, self._remove = add, remove
        self._ignored: set[str] = set()
        self._lock = threading.Lock()
        metrics = SDMetrics(registry)
        self.discoveries = [
            KubernetesDiscovery(sd, self._on_add, self._on_remove,
                                interval_ms=config.scrape_interval_ms,
                                timeout_ms=config.scrape_timeout_ms, metrics=metrics,
                                on_death=death, since_ms=since_ms)
            for sd in config.kubernetes_sd]

    def start(self) -> DiscoveredTargets:
        """Start every discovery's list-and-watch."""
        for d in self.discoveries:
            d.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching; the targets stay scheduled until the daemon stops."""
        for d in self.discoveries:
            d.stop(timeout_s)

    def targets(self) -> list[TargetConfig]:
        """Every discovered target now (static names excluded)."""
        return [t for d in self.discoveries for t in d.targets() if t.name not in self._static]

    def not_synced(self) -> list[str]:
        """The discoveries that have not listed every namespace yet."""
        return [d.sd.name for d in self.discoveries if not d.synced]

    def _on_add(self, target: TargetConfig) -> None:
        if target.name in self._static:
            with self._lock:
                if target.name not in self._ignored:
                    self._ignored.add(target.name)
                    log.warning("discovered target %r has the name of a configured target; "
                                "ignored", target.name)
            return
        self._add(target)

    def _on_remove(self, name: str) -> None:
        if name not in self._static:
            self._remove(name)
