"""The daemon's remediation: started when this daemon acts, stopped when it stops acting.

Without `ha:` it starts once with the daemon. With `ha:` it starts at every
takeover and stops at every demotion (daemon/takeover.py), as many times as
the daemon leads. What lives as long as the process (the metrics on its one
registry, the pager) is made here once; what lives as long as one term (the
engine with its memory of written refusals, the dispatcher, the approval
runner) is made afresh by each `start`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry

from sentinel.config import Config, TargetConfig
from sentinel.incidents.db import Database
from sentinel.respond.remediate.approval_runner import ApprovalRunner
from sentinel.respond.remediate.base import TargetInfo
from sentinel.respond.remediate.dispatch import Remediator
from sentinel.respond.remediate.engine import Pager
from sentinel.respond.remediate.metrics import RemediationMetrics
from sentinel.respond.remediate.wiring import build_engine

log = logging.getLogger(__name__)


class DaemonRemediation:
    """Starts and stops the remediator and the approval runner; owns the process-wide parts."""

    def __init__(self, config: Config, registry: CollectorRegistry, pager: Pager,
                 may_act: Callable[[], bool], clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.pager = pager
        self.may_act = may_act
        self.clock = clock
        # Registered once per process: a second registration raises DuplicateTimeseries
        # (issue 39: every re-election failed on it).
        self.registry = registry
        self.metrics = RemediationMetrics(registry) if config.remediation.policies else None
        self.remediator: Remediator | None = None
        self.approvals: ApprovalRunner | None = None
        # A target's tokens/s at a time (respond/remediate/throughput.py), set by the App once
        # its query backend exists: the verdicts compare it before and after a fix.
        self.throughput: Callable[[str, int], float | None] | None = None

    @property
    def configured(self) -> bool:
        """Whether a response policy names anything to do."""
        return bool(self.config.remediation.policies)

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config; the next `start` runs its policies (see `App` reload)."""
        self.config = config
        if config.remediation.policies and self.metrics is None:
            self.metrics = RemediationMetrics(self.registry)

    def start(self, db: Database, discovered: Iterable[TargetConfig] = ()) -> Remediator | None:
        """A fresh engine, dispatcher and approval runner on `db`; None when nothing is
        configured. Targets discovered so far join the configured ones (static names win)."""
        self.stop(1.0)  # never two of each: a start without a stop replaces them
        if not self.configured or self.metrics is None:
            return None
        engine = build_engine(self.config, db, self.pager, self.metrics, self.clock)
        engine.external_url = self.config.external_url
        engine.may_act = self.may_act
        engine.throughput = self.throughput
        found = {t.name: TargetInfo(t.name, t.url, t.xla_cache_path, labels=dict(t.labels),
                                    accelerator=t.accelerator) for t in discovered}
        if found:
            engine.targets = {**found, **engine.targets}
        remediator = Remediator(engine).start()
        try:
            self.approvals = ApprovalRunner(engine).start()
        except Exception:
            remediator.stop(1.0)
            raise
        self.remediator = remediator
        return remediator

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop starting actions (those running finish within their own timeouts)."""
        remediator, self.remediator = self.remediator, None
        approvals, self.approvals = self.approvals, None
        if remediator is not None:
            remediator.stop(timeout_s)
        if approvals is not None:
            approvals.stop(timeout_s)
