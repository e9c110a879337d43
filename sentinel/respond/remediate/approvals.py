"""Approval mode: park an allowed action, then run it only if a person approves it in time.

    park          the guards allowed the action and its check passed, but the
                  policy says `approval: required`: write a `pending` approval
                  (one per incident, policy and step) with its expiry
    decide        approve or deny; a conditional UPDATE on `status = 'pending'
                  AND expires_at > now`, so a second approval (or a late one)
                  changes nothing; approving needs the incident still open
    expire_due    pending approvals past their expiry, or whose incident
                  resolved, become `expired`
    claim         `approved` → `running` (conditional UPDATE, rowcount 1): the
                  one worker that wins runs the action through the engine
    finish        `running` → `done` with the attempt that ran

Every change is an ACTION event on the incident's timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update

from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentStatus
from sentinel.incidents.models_api import Approval, ApprovalStatus
from sentinel.respond.remediate.state import add_event

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
    """The approval for (incident, policy, step): the existing one, or a new pending one."""
    with db.session() as s:
        existing = s.scalars(select(Approval).where(
            Approval.incident_id == incident_id, Approval.policy == policy,
            Approval.step == step).order_by(Approval.id.desc()).limit(1)).first()
        if existing is not None:
            return Parked(existing.id, existing.status, False)
        row = Approval(incident_id=incident_id, target=target, policy=policy, step=step,
                       action=action, plan=plan, alertname=alertname, labels=labels,
                       active_at=ms_to_dt(active_at_ms), status=ApprovalStatus.PENDING,
                       requested_at=ms_to_dt(now_ms), expires_at=ms_to_dt(now_ms + expiry_ms),
                       detail="")
        s.add(row)
        s.flush()
        add_event(s, incident_id, now_ms,
                  f"awaiting approval #{row.id}: {action} on {target} ({plan}); "
                  f"expires in {expiry_ms // 1000}s",
                  {"phase": "awaiting_approval", "approval": row.id, "action": action,
                   "target": target, "policy": policy, "step": step, "plan": plan,
                   "expires_at_ms": now_ms + expiry_ms})
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


def claim(db: Database, approval_id: int) -> bool:
    """approved → running; True for the one caller that wins."""
    with db.session() as s:
        return s.execute(update(Approval).where(
            Approval.id == approval_id, Approval.status == ApprovalStatus.APPROVED.value
        ).values(status=ApprovalStatus.RUNNING.value)).rowcount == 1  # type: ignore[attr-defined]


def approved_ids(db: Database) -> list[int]:
    """Approvals waiting for a worker to run them."""
    with db.session() as s:
        return list(s.scalars(select(Approval.id).where(
            Approval.status == ApprovalStatus.APPROVED.value).order_by(Approval.id)))


def finish(db: Database, approval_id: int, attempt_id: int | None, detail: str) -> None:
    """running → done, with the attempt that ran (None when the guards refused at the claim)."""
    with db.session() as s:
        row = s.get(Approval, approval_id)
        if row is not None:
            row.status, row.attempt_id, row.detail = ApprovalStatus.DONE, attempt_id, detail[:2000]


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
