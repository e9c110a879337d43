"""The restart-cost guard between an action's check and its claim: read the target's past
verified restarts, judge the expected time to serve against the policy (restart_cost.py).

A refusal has the reason `cold_cache` for every accelerator, and the same
words: "expected time to serve X (basis; what the check saw) is more than
policy P allows (Y)".
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select

from sentinel.config.remediation import WARM_KINDS, PolicyConfig, RemediationConfig
from sentinel.incidents.db import Database
from sentinel.incidents.models_remediation import AttemptStatus, RemediationAttempt
from sentinel.respond.remediate.base import Check
from sentinel.respond.remediate.guards import Decision, Reason
from sentinel.respond.remediate.restart_cost import Judgement, PastRestart, Warmth, judge

# Past attempts read per decision: enough for learn_from warm and cold ones together.
_SCAN = 200


def past_restarts(db: Database, target: str, limit: int = _SCAN) -> list[PastRestart]:
    """The target's verified restarts (any incident, any policy), newest first."""
    with db.session() as s:
        rows = s.scalars(select(RemediationAttempt.data).where(
            RemediationAttempt.target == target,
            RemediationAttempt.status == AttemptStatus.SUCCEEDED.value,
            RemediationAttempt.action.in_(WARM_KINDS),
        ).order_by(RemediationAttempt.id.desc()).limit(limit)).all()
    out = []
    for data in rows:
        served = (data or {}).get("served_after_s")
        if isinstance(served, int | float) and not isinstance(served, bool):
            warm = (data or {}).get("warm")
            out.append(PastRestart(int(served * 1000), warm if isinstance(warm, bool) else None))
    return out


def judge_restart(db: Database, config: RemediationConfig, policy: PolicyConfig, target: str,
                  check: Check) -> Judgement:
    """The judgement of one restart whose check saw `check.data`."""
    return judge(Warmth.of(check.data), past_restarts(db, target), config.restart_cost,
                 policy.restart_limit_ms(config.restart_cost), policy.name)


def gate(db: Database, config: RemediationConfig, policy: PolicyConfig, target: str,
         kind: str, step: int, check: Check) -> tuple[Check, Decision | None]:
    """The check with the expectation in its data, and a refusal when the policy does not
    allow the cost (None: go on). Only restarts are judged: other actions cost no serving."""
    if kind not in WARM_KINDS:
        return check, None
    j = judge_restart(db, config, policy, target, check)
    data = {**check.data, "expected_serve_ms": j.expected.ms, "expected_basis": j.expected.basis,
            "expected_learned_from": j.expected.learned, "limit_serve_ms": j.limit_ms}
    check = replace(check, summary=f"{check.summary}; {j.detail}", data=data)
    if j.allowed:
        return check, None
    return check, Decision(False, Reason.COLD_CACHE, step, j.detail)
