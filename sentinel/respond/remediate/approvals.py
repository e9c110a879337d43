"""Approval mode: park an allowed action, then run it only if a person approves it in time.

    park          the guards allowed the action and its check passed, but the
                  policy says `approval: required`: write a `pending` approval
                  with its expiry; one live approval per incident, policy and
                  step (pending, approved, running; denied and expired ones end
                  the step), and a new one once the last is `done`: its attempt
                  failed, was abandoned or was refused at the claim, and the
                  guards offered the step again (a retry needs a person again)
    decide        approve or deny; a conditional UPDATE on `status = 'pending'
                  AND expires_at > now`, so a second approval (or a late one)
                  changes nothing; approving needs the incident still open
    expire_due    pending approvals past their expiry, or whose incident
                  resolved, become `expired`
    claim         `approved` → `running` (conditional UPDATE, rowcount 1): the
                  one worker that wins runs the action through the engine; the
                  claimer (owner, time) is noted in `detail`, and `started`
                  links the attempt it claimed as soon as it has one
    finish        `running` → `done` with the attempt that ran
    abandon_orphans  `running` → `done` ("abandoned: ...") when its action was
                  abandoned: the attempt was failed by a reaper (its owner died
                  or stopped renewing its lease), or the claimer died before it
                  claimed an attempt; the step then goes back through the guards

Every change is an ACTION event on the incident's timeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentStatus
from sentinel.incidents.models_api import Approval, ApprovalStatus
from sentinel.incidents.models_remediation import AttemptStatus, RemediationAttempt
from sentinel.respond.remediate.state import add_event

# An approval whose action is abandoned: marked `done` with this prefix in `detail` (and an
# `approval_abandoned` timeline event), so the step is offered again.
ABANDONED = "abandoned"
# Statuses that keep (incident, policy, step) from being parked again.
_LIVE_OR_DECIDED = frozenset({ApprovalStatus.PENDING, ApprovalStatus.APPROVED,
                              ApprovalStatus.RUNNING, ApprovalStatus.DENIED,
                              ApprovalStatus.EXPIRED})

AWAITING = "SentinelRemediationAwaitingApproval"


@dataclass(frozen=True, slots=True)
class Parked:
    """What `park` found or wrote: the approval and its status."""

    approval_id: int
    status: str
    new: bool


@dataclass(frozen=True, slots=True)
class Decided:
    """The outcome of approve/deny: whether it changed anything, and the approval's status now."""

    approval_id: int
    changed: bool
    status: str
    message: str
    incident_id: int


def park(db: Database, *, incident_id: int, target: str, policy: str, step: int, action: str,
         plan: str, alertname: str, labels: dict[str, str], active_at_ms: int, now_ms: int,
         expiry_ms: int) -> Parked:
    """The approval for (incident, policy, step): the live (or denied, expired) one, or a new
    pending one, also after a `done` one (the guards offered the step again)."""
    with db.session() as s:
        existing = s.scalars(select(Approval).where(
            Approval.incident_id == incident_id, Approval.policy == policy,
            Approval.step == step).order_by(Approval.id.desc()).limit(1)).first()
        if existing is not None and existing.status in _LIVE_OR_DECIDED:
            return Parked(existing.id, existing.status, False)
        again = (f"; again after approval #{existing.id}: {existing.detail}"
                 if existing is not None else "")
        row = Approval(incident_id=incident_id, target=target, policy=policy, step=step,
                       action=action, plan=plan, alertname=alertname, labels=labels,
                       active_at=ms_to_dt(active_at_ms), status=ApprovalStatus.PENDING,
                       requested_at=ms_to_dt(now_ms), expires_at=ms_to_dt(now_ms + expiry_ms),
                       detail="")
        s.add(row)
        s.flush()
        add_event(s, incident_id, now_ms,
                  f"awaiting approval #{row.id}: {action} on {target} ({plan}); "
                  f"expires in {expiry_ms // 1000}s{again}"[:2000],
                  {"phase": "awaiting_approval", "approval": row.id, "action": action,
                   "target": target, "policy": policy, "step": step, "plan": plan,
                   "expires_at_ms": now_ms + expiry_ms,
                   "after": existing.id if existing is not None else None})
        return Parked(row.id, row.status, True)


def decide(db: Database, approval_id: int, approve: bool, who: str, now_ms: int) -> Decided:
    """Approve or deny a pending approval; anything else is a no-op that says why."""
    now = ms_to_dt(now_ms)
    with db.session() as s:
        row = s.get(Approval, approval_id)
        if row is None:
            raise LookupError(f"no approval {approval_id}")
        incident_open = s.scalar(select(Incident.status).where(
            Incident.id == row.incident_id)) == IncidentStatus.OPEN.value
        if approve and not incident_open and row.status == ApprovalStatus.PENDING:
            _expire(s, row, now_ms, "the incident resolved before the approval")
            return Decided(row.id, False, row.status, "incident already resolved: not run",
                           row.incident_id)
        new = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        changed = s.execute(update(Approval).where(
            Approval.id == approval_id, Approval.status == ApprovalStatus.PENDING.value,
            Approval.expires_at > now).values(
            status=new.value, decided_at=now, decided_by=who)
        ).rowcount == 1  # type: ignore[attr-defined]
        s.refresh(row)
        if not changed:
            if row.status == ApprovalStatus.PENDING:  # past its expiry, not yet swept
                _expire(s, row, now_ms, "approval arrived after the expiry")
            return Decided(row.id, False, row.status,
                           f"approval #{row.id} is {row.status}: nothing done", row.incident_id)
        verb = "approved" if approve else "denied"
        add_event(s, row.incident_id, now_ms, f"approval #{row.id} {verb} by {who}: "
                  f"{row.action} on {row.target}" + ("" if approve else " will not run"),
                  {"phase": f"approval_{verb}", "approval": row.id, "by": who,
                   "action": row.action, "target": row.target, "policy": row.policy})
        return Decided(row.id, True, row.status, f"approval #{row.id} {verb}", row.incident_id)


def expire_due(db: Database, now_ms: int) -> list[Approval]:
    """Expire pending approvals past their expiry or whose incident resolved; returns them."""
    now = ms_to_dt(now_ms)
    with db.session() as s:
        rows = s.scalars(select(Approval).where(
            Approval.status == ApprovalStatus.PENDING.value)).all()
        out = []
        for row in rows:
            status = s.scalar(select(Incident.status).where(Incident.id == row.incident_id))
            if row.expires_at <= now:
                why = "not approved before it expired"
            elif status != IncidentStatus.OPEN.value:
                why = "the incident resolved before an approval"
            else:
                continue
            if _expire(s, row, now_ms, why):
                out.append(row)
        return out


def _expire(s: object, row: Approval, now_ms: int, why: str) -> bool:
    changed = s.execute(update(Approval).where(  # type: ignore[attr-defined]
        Approval.id == row.id, Approval.status == ApprovalStatus.PENDING.value).values(
        status=ApprovalStatus.EXPIRED.value, decided_at=ms_to_dt(now_ms), detail=why)
    ).rowcount == 1
    if changed:
        row.status, row.detail = ApprovalStatus.EXPIRED, why
        add_event(s, row.incident_id, now_ms,  # type: ignore[arg-type]
                  f"approval #{row.id} expired: {row.action} on {row.target} not run: {why}",
                  {"phase": "approval_expired", "approval": row.id, "action": row.action,
                   "target": row.target, "policy": row.policy, "detail": why})
    return changed


def claim(db: Database, approval_id: int, owner: str = "", now_ms: int = 0) -> bool:
    """approved → running; True for the one caller that wins. `owner` (lease.owner_id) and
    `now_ms` say who runs it since when, so `abandon_orphans` can tell a dead claimer."""
    with db.session() as s:
        return s.execute(update(Approval).where(
            Approval.id == approval_id, Approval.status == ApprovalStatus.APPROVED.value
        ).values(status=ApprovalStatus.RUNNING.value,
                 detail=f"claimed by {owner} at {now_ms}" if owner else "")
        ).rowcount == 1  # type: ignore[attr-defined]


def started(db: Database, approval_id: int, attempt_id: int) -> bool:
    """The running approval's action claimed its attempt (before any side effect); False
    when the approval is no longer running (swept as abandoned): then do not act."""
    with db.session() as s:
        return s.execute(update(Approval).where(
            Approval.id == approval_id, Approval.status == ApprovalStatus.RUNNING.value
        ).values(attempt_id=attempt_id)).rowcount == 1  # type: ignore[attr-defined]


def approved_ids(db: Database) -> list[int]:
    """Approvals waiting for a worker to run them."""
    with db.session() as s:
        return list(s.scalars(select(Approval.id).where(
            Approval.status == ApprovalStatus.APPROVED.value).order_by(Approval.id)))


def finish(db: Database, approval_id: int, attempt_id: int | None, detail: str) -> None:
    """running → done, with the attempt that ran (None when the guards refused at the claim).

    Conditional: an approval already marked abandoned (its owner was thought dead while
    the database was away) keeps what the sweep wrote.
    """
    with db.session() as s:
        s.execute(update(Approval).where(
            Approval.id == approval_id, Approval.status == ApprovalStatus.RUNNING.value
        ).values(status=ApprovalStatus.DONE.value, attempt_id=attempt_id, detail=detail[:2000]))


def abandon_orphans(db: Database, now_ms: int, lease_ms: int,
                    owner_gone: Callable[[str], bool]) -> list[Approval]:
    """Mark running approvals whose action was abandoned, and return them.

    Abandoned: the attempt it claimed was failed by a reaper (its detail says
    "abandoned": the owner died or stopped renewing its lease), or no attempt was
    claimed and the claimer is gone (`owner_gone`) or claimed more than a lease ago.
    """
    with db.session() as s:
        rows = s.scalars(select(Approval).where(
            Approval.status == ApprovalStatus.RUNNING.value)).all()
        out = []
        for row in rows:
            why = _abandoned_why(s, row, now_ms, lease_ms, owner_gone)
            if why is None:
                continue
            detail = f"{ABANDONED}: {why}"[:2000]
            if s.execute(update(Approval).where(
                    Approval.id == row.id, Approval.status == ApprovalStatus.RUNNING.value
            ).values(status=ApprovalStatus.DONE.value, detail=detail)
            ).rowcount != 1:  # type: ignore[attr-defined]
                continue
            row.status, row.detail = ApprovalStatus.DONE, detail
            add_event(s, row.incident_id, now_ms,
                      f"approval #{row.id} abandoned: {row.action} on {row.target}: {why}; "
                      "the step goes back through the guards",
                      {"phase": "approval_abandoned", "approval": row.id,
                       "attempt": row.attempt_id, "action": row.action, "target": row.target,
                       "policy": row.policy, "detail": why})
            out.append(row)
        return out


def _abandoned_why(s: Any, row: Approval, now_ms: int, lease_ms: int,
                   owner_gone: Callable[[str], bool]) -> str | None:
    if row.attempt_id is not None:
        attempt = s.get(RemediationAttempt, row.attempt_id)
        if attempt is None:
            return f"attempt #{row.attempt_id} is gone"
        if attempt.status == AttemptStatus.FAILED and attempt.detail.startswith(ABANDONED):
            return f"attempt #{attempt.id} {attempt.detail}"
        return None  # running, or finished normally (its runner records it now)
    owner, _, at = row.detail.removeprefix("claimed by ").rpartition(" at ")
    if not row.detail.startswith("claimed by ") or not at.isdigit():
        return None  # claimed by an older version: its runner finishes it
    if owner_gone(owner):
        return f"its runner {owner} is gone before it claimed an attempt"
    if now_ms - int(at) > lease_ms * 2:
        return f"its runner {owner} claimed no attempt within two leases"
    return None


def claim_escalations(db: Database, now_ms: int) -> list[Approval]:
    """Denied or expired approvals nobody paged about yet, each claimed by one caller."""
    with db.session() as s:
        rows = s.scalars(select(Approval).where(
            Approval.status.in_((ApprovalStatus.DENIED.value, ApprovalStatus.EXPIRED.value)),
            Approval.escalated_at.is_(None))).all()
        return [r for r in rows if s.execute(update(Approval).where(
            Approval.id == r.id, Approval.escalated_at.is_(None)).values(
            escalated_at=ms_to_dt(now_ms))).rowcount == 1]  # type: ignore[attr-defined]


def get(db: Database, approval_id: int) -> Approval | None:
    """One approval row."""
    with db.session() as s:
        return s.get(Approval, approval_id)


def listing(db: Database, status: str | None = None, limit: int = 200) -> list[Approval]:
    """Approvals newest first, optionally of one status."""
    q = select(Approval).order_by(Approval.id.desc()).limit(limit)
    if status is not None:
        q = q.where(Approval.status == status)
    with db.session() as s:
        return list(s.scalars(q))


def active_at_ms(row: Approval) -> int:
    """The alert's active time the approval was parked for."""
    return dt_to_ms(row.active_at)


def expires_in_s(row: Approval, now: datetime) -> float:
    """Seconds left before the approval expires (negative when past)."""
    return (row.expires_at - now).total_seconds()
