"""The daemon's side of `query_backend:`: which backend rules read, and what changes with it.

Without `query_backend`, rules read the embedded engine and nothing here
matters. With one:

- rules go through a `RoutedBackend` (rules/backend.py): Sentinel's own
  series from the embedded store, everything else from the remote API;
- recording rules that read the remote API are left to the backend's ruler;
- Sentinel scrapes its targets only with `scrape: true` (the backend's
  Prometheus scrapes them); probes, log sources and remediation still use them;
- a restored alert may be resolved by absence at the first successful
  evaluation: the backend held the data while Sentinel was down, and a failed
  query keeps alerts as they were anyway (rules/alerting.py).
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry

from sentinel.config import Config
from sentinel.rules.backend import LocalEngine, QueryBackend, RoutedBackend
from sentinel.rules.loader import RecordingRule
from sentinel.rules.prometheus_api import BackendMetrics, PrometheusAPI

log = logging.getLogger(__name__)


class DaemonBackend:
    """The query backend of one daemon and the hooks the App calls."""

    def __init__(self, config: Config, engine: LocalEngine, registry: CollectorRegistry
                 ) -> None:
        qb = config.query_backend
        self.remote: PrometheusAPI | None = None
        self.routed: RoutedBackend | None = None
        self.backend: QueryBackend = engine
        if qb is not None:
            self.remote = PrometheusAPI(qb, BackendMetrics(registry))
            self.routed = RoutedBackend(engine, self.remote)
            self.backend = self.routed
        self.scrapes = qb is None or qb.scrape

    def learn(self, groups: Any) -> None:
        """Before (re)loading rules: remember their expression texts for the remote API."""
        if self.routed is not None:
            self.routed.learn(groups)

    def attach(self, rules: Any, groups: Any) -> None:
        """Tell the rule manager which recording rules Sentinel evaluates itself."""
        if self.routed is None:
            return
        rules.evaluates_recording = self.routed.evaluates_recording
        left = [r.name for g in groups for r in g.rules
                if isinstance(r, RecordingRule) and not self.routed.evaluates_recording(r.expr)]
        if left:
            log.info("recording rules left to the query backend's ruler (load the same rule "
                     "files there): %s", ", ".join(left))

    def scraped_targets(self, targets: Any) -> list[Any]:
        """The targets Sentinel scrapes itself: all, or none with a remote backend."""
        return list(targets) if self.scrapes else []

    def series_reader(self) -> Any:
        """Diagnosis evidence from the backend when it holds the data (None: the store)."""
        if self.remote is None or self.scrapes:
            return None
        from sentinel.respond.diagnose.gather_remote import remote_series

        return remote_series(self.remote)

    def write_metrics(self, store: Any, now_ms: int) -> None:
        """The backend's `up` and error counters into the store, for the self-alert."""
        if self.remote is not None:
            from sentinel.daemon.selfstore import write_to_store

            m = self.remote.metrics
            write_to_store((m.up, m.errors), store, now_ms)

    def close(self) -> None:
        """Close the remote client's connections."""
        if self.remote is not None:
            self.remote.close()
