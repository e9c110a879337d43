"""Approval rows follow the step's life (issue 39, item 5), on both databases: a `done`
approval lets the step be parked again; a running approval whose action was abandoned is
marked so; a late finish does not overwrite the mark."""

from __future__ import annotations

from test_durable_transitions import _claim
from test_remediate_engine import T0, open_incident

from sentinel.config.remediation import BackoffConfig
from sentinel.incidents.db import Database
from sentinel.respond.remediate import approvals, lease
from sentinel.respond.remediate.guards import Limits

LEASE_MS = 2_000


def _park(db: Database, incident: int, now: int) -> approvals.Parked:
    return approvals.park(db, incident_id=incident, target="tpu-a", policy="restart", step=0,
                          action="docker_restart", plan="restart", alertname="OOM",
                          labels={}, active_at_ms=T0, now_ms=now, expiry_ms=60_000)


def _running(db: Database, incident: int, owner: str, now: int) -> int:
    a = _park(db, incident, now)
    assert approvals.decide(db, a.approval_id, True, "alice", now).changed
    assert approvals.claim(db, a.approval_id, owner, now)
    return a.approval_id


def _never_gone(_owner: str) -> bool:
    return False


def test_done_parks_again_denied_does_not(incident_db: Database) -> None:
    incident = open_incident(incident_db, "tpu-a")
    first = _running(incident_db, incident, lease.owner_id(), T0)
    assert _park(incident_db, incident, T0 + 1).approval_id == first  # running: the same
    approvals.finish(incident_db, first, None, "failed: exited 1")
    again = _park(incident_db, incident, T0 + 2)
    assert again.new and again.approval_id != first and again.status == "pending"
    assert approvals.decide(incident_db, again.approval_id, False, "bob", T0 + 3).changed
    assert _park(incident_db, incident, T0 + 4).approval_id == again.approval_id  # denied


def test_a_reaped_attempt_abandons_its_approval_and_a_late_finish_keeps_the_mark(
        incident_db: Database) -> None:
    incident = open_incident(incident_db, "tpu-a")
    approval = _running(incident_db, incident, "elsewhere:1:2", T0)
    attempt = _claim(incident_db, "tpu-r", "elsewhere:1:2", LEASE_MS, T0)
    assert approvals.started(incident_db, approval, attempt)
    # The attempt runs (its owner renews): nothing to do.
    assert approvals.abandon_orphans(incident_db, T0 + 1, LEASE_MS, _never_gone) == []
    limits = Limits(False, 2, 100, 3, BackoffConfig())
    (reaped,) = lease.reap(incident_db, lease.owner_id(), T0 + LEASE_MS + 1, limits)
    assert reaped.attempt_id == attempt
    (row,) = approvals.abandon_orphans(incident_db, T0 + LEASE_MS + 2, LEASE_MS, _never_gone)
    assert row.id == approval and row.status == "done" and row.detail.startswith("abandoned")
    approvals.finish(incident_db, approval, attempt, "succeeded: late")  # the owner was alive
    assert approvals.get(incident_db, approval).detail.startswith("abandoned")
    assert not approvals.started(incident_db, approval, attempt)  # not running: do not act
    assert _park(incident_db, incident, T0 + LEASE_MS + 3).new  # the step is offered again


def test_a_claimer_that_died_before_claiming_an_attempt_abandons_the_approval(
        incident_db: Database) -> None:
    gone_owner = f"{lease.owner_id().split(':')[0]}:999999999:1"
    incident = open_incident(incident_db, "tpu-a")
    dead = _running(incident_db, incident, gone_owner, T0)
    (row,) = approvals.abandon_orphans(incident_db, T0 + 1, LEASE_MS, lease.owner_gone)
    assert row.id == dead and "is gone" in row.detail
    other = open_incident(incident_db, "tpu-b")
    slow = _running(incident_db, other, "elsewhere:1:2", T0)
    assert approvals.abandon_orphans(incident_db, T0 + LEASE_MS, LEASE_MS, lease.owner_gone) == []
    (row,) = approvals.abandon_orphans(incident_db, T0 + 3 * LEASE_MS, LEASE_MS,
                                       lease.owner_gone)
    assert row.id == slow and "within two leases" in row.detail
