"""Which fixes work: remediation verdicts per policy and action over a window, and the policy
steps demoted to approval (GET /api/v1/remediation/verdicts; the stats page shows it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select

from sentinel.api.errors import ApiError
from sentinel.api.history import iso
from sentinel.api.params import time_param
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models_remediation import RemediationAttempt, RemediationStep, Verdict

DEFAULT_WINDOW_MS = 30 * 86_400_000
PARAMS = ("since", "until")
VERDICTS = tuple(str(v) for v in Verdict)


def verdicts(db: Database, params: Mapping[str, str], now_ms: int) -> dict[str, Any]:
    """{"since", "until", "by_policy": [{policy, action, fixed, recurred, failed, overridden,
    total, fixed_share}], "steps": [{policy, step, demoted, demoted_at, reason, ...}]}."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (known: {', '.join(PARAMS)})",
                       unknown[0])
    since = time_param(params, "since", now_ms)
    until = time_param(params, "until", now_ms)
    since = now_ms - DEFAULT_WINDOW_MS if since is None else since
    until = now_ms if until is None else until
    if until <= since:
        raise ApiError(400, "bad parameter 'until': must be after since", "until")
    with db.session() as s:
        rows = s.execute(select(RemediationAttempt.policy, RemediationAttempt.action,
                                RemediationAttempt.verdict, func.count())
                         .where(RemediationAttempt.verdict.is_not(None),
                                RemediationAttempt.verdict_at >= ms_to_dt(since),
                                RemediationAttempt.verdict_at < ms_to_dt(until))
                         .group_by(RemediationAttempt.policy, RemediationAttempt.action,
                                   RemediationAttempt.verdict)).all()
        steps = s.scalars(select(RemediationStep).order_by(RemediationStep.policy,
                                                           RemediationStep.step)).all()
        by: dict[tuple[str, str], dict[str, Any]] = {}
        for policy, action, verdict, n in rows:
            row = by.setdefault((policy, action), {"policy": policy, "action": action,
                                                   **dict.fromkeys(VERDICTS, 0)})
            row[str(verdict)] = int(n)
        out = []
        for row in sorted(by.values(), key=lambda r: (r["policy"], r["action"])):
            total = sum(row[v] for v in VERDICTS)
            out.append({**row, "total": total,
                        "fixed_share": round(row["fixed"] / total, 3) if total else None})
        return {"since": iso(ms_to_dt(since)), "until": iso(ms_to_dt(until)), "by_policy": out,
                "steps": [step_view(st) for st in steps]}


def step_view(st: RemediationStep) -> dict[str, Any]:
    """A demoted (or promoted back) policy step for the API and the page."""
    return {"policy": st.policy, "step": st.step + 1, "demoted": st.demoted_at is not None,
            "demoted_at": iso(st.demoted_at) if st.demoted_at else None,
            "reason": st.demoted_reason,
            "promoted_at": iso(st.promoted_at) if st.promoted_at else None,
            "promoted_by": st.promoted_by}
