"""Fleet incidents as the API shows them (incidents/fleet.py, issue 49).

A fleet incident has no alert rows of its own: its members are. So the list
marks it with its member count (`fleet`), and the detail adds, for a fleet
incident, the members now, at peak and ever joined, the size of its group and
the breakdown by label as its last message told them, and the members
themselves (a bounded list, the current ones first, each with its own
incident's id to link to); for a member, the fleet incident it joined.

The peak is the most members at once, swept from the members' join and leave
times, or the highest count a message told, whichever is larger (a member that
left and came back has one row, so the sweep alone can count it once too few).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from sentinel.api.timefmt import iso
from sentinel.incidents.models import Incident, TimelineKind
from sentinel.incidents.models_fleet import FleetMember

MEMBERS_SHOWN = 200  # members listed in a fleet incident's detail (the rest are counted)


def list_marks(s: Session, ids: list[int]) -> dict[int, dict[str, Any]]:
    """For a page of incidents: each fleet incident's `fleet` mark ({members, joined}),
    and each member's `fleet_incident_id`, keyed by id. Two queries over the page's ids."""
    if not ids:
        return {}
    out: dict[int, dict[str, Any]] = {}
    now = func.sum(case((FleetMember.left_at.is_(None), 1), else_=0))
    for fid, joined, current in s.execute(
            select(FleetMember.fleet_incident_id, func.count(), now)
            .where(FleetMember.fleet_incident_id.in_(ids))
            .group_by(FleetMember.fleet_incident_id)):
        out.setdefault(int(fid), {})["fleet"] = {"members": int(current or 0),
                                                 "joined": int(joined)}
    for member, fid in s.execute(select(FleetMember.incident_id, FleetMember.fleet_incident_id)
                                 .where(FleetMember.incident_id.in_(ids))
                                 .order_by(FleetMember.fleet_incident_id)):
        if member is not None:
            out.setdefault(int(member), {})["fleet_incident_id"] = int(fid)
    return out


def detail(s: Session, inc: Incident, timeline: Iterable[dict[str, Any]]
           ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the `fleet` section of a fleet incident or None, the fleet a member joined or None)."""
    rows = s.execute(select(FleetMember.target, FleetMember.incident_id, FleetMember.quiet,
                            FleetMember.joined_at, FleetMember.left_at)
                     .where(FleetMember.fleet_incident_id == inc.id)).all()
    member_of = _member_of(s, inc.id)
    if not rows:
        return None, member_of
    told = [t["data"] for t in timeline
            if t["kind"] == TimelineKind.NOTE and (t["data"] or {}).get("fleet")]
    last: dict[str, Any] = next((d for d in reversed(told) if d.get("fleet") != "resolved"), {})
    current = sum(1 for r in rows if r.left_at is None)
    peak = max(_sweep_peak((r.joined_at, r.left_at) for r in rows),
               max((int(d.get("count") or 0) for d in told), default=0), current)
    ranked = sorted(rows, key=lambda r: (r.left_at is not None, r.target))
    shown = ranked[:MEMBERS_SHOWN]
    statuses = dict(s.execute(select(Incident.id, Incident.status).where(
        Incident.id.in_([r.incident_id for r in shown if r.incident_id]))).all())
    return {
        "members_now": current, "members_peak": peak, "members_joined": len(rows),
        "size": int(last.get("size") or 0), "breakdown": last.get("breakdown") or {},
        "members": [{"target": r.target, "incident_id": r.incident_id, "quiet": r.quiet,
                     "status": statuses.get(r.incident_id) if r.incident_id else None,
                     "joined_at": iso(r.joined_at), "left_at": iso(r.left_at)}
                    for r in shown],
        "members_more": max(0, len(rows) - len(shown)),
    }, member_of


def _member_of(s: Session, incident_id: int) -> dict[str, Any] | None:
    """The newest fleet incident this incident joined, as a link: id, status, summary."""
    row = s.execute(select(Incident.id, Incident.status, Incident.summary, FleetMember.quiet)
                    .join(FleetMember, FleetMember.fleet_incident_id == Incident.id)
                    .where(FleetMember.incident_id == incident_id)
                    .order_by(Incident.id.desc()).limit(1)).one_or_none()
    if row is None:
        return None
    return {"incident_id": row.id, "status": row.status, "summary": row.summary,
            "quiet": row.quiet}


def _sweep_peak(spans: Iterable[tuple[datetime, datetime | None]]) -> int:
    """The most spans open at one instant (a leave at t before a join at t)."""
    events: list[tuple[datetime, int]] = []
    for joined, left in spans:
        events.append((joined, 1))
        if left is not None:
            events.append((left, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


__all__ = ["MEMBERS_SHOWN", "detail", "list_marks"]
