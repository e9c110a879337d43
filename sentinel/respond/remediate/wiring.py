"""Build the remediation engine from a Config (the daemon and `sentinel remediate` share it)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sentinel.config import Config
from sentinel.config.timeintervals import interval_table
from sentinel.incidents.db import Database
from sentinel.respond.remediate.base import TargetInfo
from sentinel.respond.remediate.engine import Engine, Pager
from sentinel.respond.remediate.metrics import RemediationMetrics


def target_infos(config: Config) -> dict[str, TargetInfo]:
    """What actions may know of each configured target."""
    return {t.name: TargetInfo(t.name, t.url, t.xla_cache_path, t.tpu, dict(t.labels),
                                 t.accelerator)
            for t in config.targets}


def build_engine(config: Config, db: Database, pager: Pager,
                 metrics: RemediationMetrics | None = None,
                 clock: Callable[[], float] = time.time) -> Engine:
    """The engine for the config's `remediation:` section."""
    return Engine(config.remediation, target_infos(config), db, pager, metrics, clock,
                  intervals=interval_table(config.time_intervals))
