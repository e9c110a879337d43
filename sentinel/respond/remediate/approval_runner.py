"""The daemon's side of approval mode: expire, escalate, and run what people approved.

Approvals may arrive through the API, the page, MCP or `sentinel approvals
approve` in another process, so the runner reads them from the database: each
tick expires due approvals, pages on-call once about every denial or expiry
(as a refusal pages), marks running approvals whose action was abandoned (the
owner died: its attempt was reaped), and claims approved ones (`approved →
running`, one winner) to run through the engine with the guards checked again
at the claim. An approval that ends `done` (failed, abandoned, refused at the
claim) hands the step back to the guards: the next offer re-parks it (a new
approval, paged) or, with the ladder used up, pages that remediation gave up,
as without approvals.
`kick()` makes the next tick start now, so an approval runs within
milliseconds when it came in through this daemon.
"""

from __future__ import annotations

import logging
import threading

from sentinel.quietlog import QuietFailure
from sentinel.respond.remediate import approvals, lease, state
from sentinel.respond.remediate.engine import REFUSED, Candidate, Engine, Prepared

log = logging.getLogger(__name__)

TICK_S = 1.0


class ApprovalRunner:
    """Runs approved actions and escalates denied or expired ones."""

    def __init__(self, engine: Engine, tick_s: float = TICK_S) -> None:
        self.engine = engine
        self.tick_s = tick_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sentinel-approvals",
                                        daemon=True)
        # A database away (or this daemon no longer leading) fails every tick: log it once.
        self._failure = QuietFailure(log, "approval tick")

    def start(self) -> ApprovalRunner:
        """Tick in a background thread."""
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop ticking (an action already running finishes within its own timeout)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_s)

    def kick(self) -> None:
        """Tick now rather than at the next interval."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.tick_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception:  # one bad row must not stop the runner
                self._failure.failed()
            else:
                self._failure.ok()

    def tick(self) -> None:
        """Expire, escalate, run: one pass."""
        db, now = self.engine.db, self.engine.now_ms()
        approvals.expire_due(db, now)
        for row in approvals.abandon_orphans(db, now, self.engine.config.lease_ms,
                                             lease.owner_gone):
            log.warning("approval #%d abandoned (%s on %s): %s", row.id, row.action, row.target,
                        row.detail)
        for row in approvals.claim_escalations(db, now):
            why = (f"approval #{row.id} {row.status}" + (f" by {row.decided_by}"
                   if row.decided_by else "") + f": {row.action} on {row.target} not run"
                   + (f" ({row.detail})" if row.detail else ""))
            try:
                self.engine.pager.page(row.incident_id, REFUSED, why, {
                    "target": row.target, "policy": row.policy,
                    "reason": f"approval_{row.status}", "alert": row.alertname})
            except Exception:
                log.exception("paging about approval %d failed", row.id)
        for approval_id in approvals.approved_ids(db):
            if approvals.claim(db, approval_id, lease.owner_id(), self.engine.now_ms()):
                self._run(approval_id)

    def _run(self, approval_id: int) -> None:
        row = approvals.get(self.engine.db, approval_id)
        assert row is not None
        policy = next((p for p in self.engine.config.policies if p.name == row.policy), None)
        if policy is None:
            approvals.finish(self.engine.db, approval_id, None,
                             f"policy {row.policy} no longer configured: not run")
            return
        c = Candidate(row.incident_id, row.alertname, row.target,
                      {str(k): str(v) for k, v in row.labels.items()}, policy,
                      approvals.active_at_ms(row))
        prepared = self.engine.prepare(c, approved=True)
        if not isinstance(prepared, Prepared):
            approvals.finish(self.engine.db, approval_id, None,
                             f"refused when run: {prepared.decision.reason}: "
                             f"{prepared.decision.detail}")
            return
        if not approvals.started(self.engine.db, approval_id, prepared.attempt_id):
            # Swept as abandoned while this runner was slow: another offer re-parks it.
            Engine.drop(prepared)
            state.finish(self.engine.db, prepared.attempt_id, False,
                         "not run: its approval was marked abandoned", self.engine.now_ms(),
                         self.engine.limits)
            return
        result = self.engine.execute(prepared)
        approvals.finish(self.engine.db, approval_id, result.attempt_id,
                         f"{'succeeded' if result.ok else 'failed'}: {result.detail}")
