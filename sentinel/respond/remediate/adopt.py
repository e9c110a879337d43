"""An action left running by a Sentinel that stopped (killed, crashed, lost the lead): check
what it did before anything is redone (issue 48).

Sentinel killed 6 s into a 25 s warm restart used to fail the attempt as "outcome
unknown", page, and restart the server a second time over a start that was about
to succeed. Now the reaper hands such an attempt (it began to act; its policy and
step still exist) to this Sentinel instead (lease.reap `adopt`): the attempt stays
running, so the guards say `in_progress` and nothing is redone, while the target is
verified as the engine would (`/health`, then a one-token completion) within the
step's `verify_deadline`. Serving: the attempt is recorded verified and the incident
ends as at any verified recovery; not serving by then: failed, as before.
"""

from __future__ import annotations

import logging
from typing import Any

from sentinel.incidents.convert import opt_dt_to_ms
from sentinel.incidents.models_remediation import AttemptStatus, RemediationAttempt
from sentinel.respond.remediate import state
from sentinel.respond.remediate.lease import RUNNING, Heartbeat

log = logging.getLogger(__name__)


def adoptable(engine: Any) -> Any:
    """The reaper's predicate: an attempt that acted, under a policy step this engine has."""
    def adopt(a: RemediationAttempt) -> bool:
        policy = next((p for p in engine.config.policies if p.name == a.policy), None)
        return a.acting_at is not None and policy is not None and a.step < len(policy.steps) \
            and policy.steps[a.step].verify
    return adopt


def check(engine: Any, attempt_id: int) -> bool | None:
    """Verify the target of an adopted attempt and finish it; its outcome (None: gone)."""
    RUNNING.add(attempt_id)
    try:
        with engine.db.session() as s:
            a = s.get(RemediationAttempt, attempt_id)
            if a is None or a.status != AttemptStatus.RUNNING:
                return None
            incident_id, target, action, step, policy_name = (
                a.incident_id, a.target, a.action, a.step, a.policy)
            began_ms = opt_dt_to_ms(a.acted_at) or opt_dt_to_ms(a.acting_at) or engine.now_ms()
            url = str((a.data or {}).get("verify_url") or "")
        policy = next(p for p in engine.config.policies if p.name == policy_name)
        spec = policy.steps[step]
        if not url:  # a pod action says where the new pod is; else the target's address
            info = engine.targets.get(target)
            url = info.url if info is not None else ""
        checking_ms = engine.now_ms()
        with Heartbeat(engine.db, attempt_id, engine.config.lease_ms, engine.now_ms):
            v = engine.verifier(url, spec.verify_deadline_ms / 1000)
        evidence = state.evidence_ms(engine.db, incident_id)
        recovery_ms = min(max(0, engine.now_ms() - (evidence or began_ms)), 2**31 - 1) \
            if v.ok else None
        # From the action's start, as far as the record tells: the restart-cost history.
        served = None if v.served_after_s is None else round(
            v.served_after_s + max(0, checking_ms - began_ms) / 1000, 3)
        message = (f"verified after Sentinel restarted: serving {served}s after the action "
                   f"began; time to recovery {(recovery_ms or 0) / 1000:.1f}s from the first "
                   "evidence" if v.ok else f"verification FAILED after Sentinel restarted: "
                   f"{v.detail}")
        state.record(engine.db, incident_id, engine.now_ms(), message, {
            "phase": "verify", "attempt": attempt_id, "ok": v.ok, "detail": v.detail,
            "action": action, "target": target, "adopted": True, "served_after_s": served,
            "recovery_ms": recovery_ms})
        data: dict[str, Any] = {"verify": v.detail, "served_after_s": served, "adopted": True}
        if v.ok:
            data["recovered"] = message
        state.finish(engine.db, attempt_id, v.ok, "verified after Sentinel restarted"
                     if v.ok else v.detail, engine.now_ms(), engine.limits, recovery_ms, data)
        _tell(engine, incident_id, attempt_id, action, target, step, policy_name, v.ok,
              message, recovery_ms)
        return bool(v.ok)
    finally:
        RUNNING.discard(attempt_id)


def _tell(engine: Any, incident_id: int, attempt_id: int, action: str, target: str, step: int,
          policy: str, ok: bool, message: str, recovery_ms: int | None) -> None:
    """End the incident at the verified recovery, or let its held page go now."""
    try:
        if ok and hasattr(engine.pager, "recovered"):
            engine.pager.recovered(incident_id, f"{action} on {target} {message}", {
                "attempt": attempt_id, "action": action, "target": target,
                "recovery_ms": recovery_ms, "step": step, "policy": policy})
        elif not ok and hasattr(engine.pager, "not_fixed"):
            engine.pager.not_fixed(incident_id, f"{action} (step {step + 1} of {policy}) on "
                                   f"{target}, left running when Sentinel stopped, did not "
                                   f"hold: {message}")
    except Exception:  # the attempt is on record; telling is the pager's to retry
        log.exception("telling the outcome of adopted attempt %d failed", attempt_id)
