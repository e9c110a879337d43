"""A remediation decision is written once per change of reason, also across a failover
(issue 39, item 9: "after a failover 3 remediation decisions were written twice").

The engine remembered the last reason it wrote per (incident, policy) in memory only: a new
leader (or the same daemon leading again: a fresh engine each term) wrote the refusal the
old leader had written already, and paged again when the reason pages.
"""

from __future__ import annotations

from test_remediate_engine import T0, Clock, Pages, candidate, open_incident, remediation

from sentinel.incidents.db import Database
from sentinel.incidents.models import TimelineEvent
from sentinel.respond.remediate import state
from sentinel.respond.remediate.engine import Engine, Result
from sentinel.respond.remediate.guards import Decision, Reason


def _decisions(db: Database, incident_id: int) -> list[str]:
    with db.session() as s:
        rows = s.query(TimelineEvent).filter(TimelineEvent.incident_id == incident_id).order_by(
            TimelineEvent.id).all()
        return [str(r.data.get("reason")) for r in rows
                if r.data and r.data.get("phase") == "decision"]


def test_the_next_leader_does_not_write_or_page_the_same_refusal_again(
        incident_db: Database) -> None:
    cfg = remediation(policy_extra="max_per_hour: 1", backoff={"initial": "1s"})
    incident = open_incident(incident_db, "tpu-a")
    claim = state.Claim(incident, "tpu-a", "restart", 1)
    allow = Decision(True, Reason.ALLOWED)
    _, attempt = state.claim(incident_db, claim, lambda *_: allow, T0, "docker_restart", False,
                             {})
    assert attempt is not None
    state.finish(incident_db, attempt, False, "failed", T0 + 1000,
                 Engine(cfg, {}, incident_db, Pages()).limits)
    clock = Clock(T0 + 60_000)  # backoff over; the hour's budget is spent
    old_pages, new_pages = Pages(), Pages()
    old = Engine(cfg, {}, incident_db, old_pages, clock=clock)
    first = old.prepare(candidate(cfg, incident))
    assert isinstance(first, Result) and first.decision.reason is Reason.RATE_LIMITED
    assert _decisions(incident_db, incident) == ["rate_limited"] and len(old_pages.sent) == 1
    # Failover: a new engine (the new leader's) meets the same refusal.
    new = Engine(cfg, {}, incident_db, new_pages, clock=clock)
    again = new.prepare(candidate(cfg, incident))
    assert isinstance(again, Result) and again.decision.reason is Reason.RATE_LIMITED
    assert _decisions(incident_db, incident) == ["rate_limited"], "written twice"
    assert new_pages.sent == [], "paged twice"
