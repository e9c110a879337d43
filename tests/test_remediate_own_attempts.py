"""A daemon's own attempt whose run ended unrecorded is reaped (issue 39: leadership is a
state a daemon enters many times).

A leader that lost its lease mid-action cannot record the outcome (the fenced database
refuses the finish); when the same daemon leads again, its own reaper skipped the attempt
as "ours and alive", so the target stayed `in_progress` for as long as the process ran.
"""

from __future__ import annotations

from test_durable_transitions import S, _claim
from test_incidents_tracker import T0
from test_remediate_engine import Pages as FakePager
from test_remediate_engine import remediation

from sentinel.incidents import Database
from sentinel.respond.remediate import lease
from sentinel.respond.remediate.engine import Engine


def test_an_own_attempt_is_reaped_once_its_run_ended_and_its_lease_ran_out(
        incident_db: Database) -> None:
    limits = Engine(remediation(), {}, incident_db, FakePager()).limits
    attempt = _claim(incident_db, "tpu-d", lease.owner_id(), 2 * S, T0)
    lease.RUNNING.add(attempt)
    try:
        # Still running here: a late heartbeat (database away) is not a death.
        assert lease.reap(incident_db, lease.owner_id(), T0 + 5 * S, limits) == []
    finally:
        lease.RUNNING.discard(attempt)
    # Its run ended without recording an outcome: reaped like a dead owner's.
    (reaped,) = lease.reap(incident_db, lease.owner_id(), T0 + 5 * S, limits)
    assert reaped.attempt_id == attempt and "without recording" in reaped.why
    # Before its lease ran out it is left alone (the finish may still land).
    other = _claim(incident_db, "tpu-e", lease.owner_id(), 2 * S, T0 + 10 * S)
    assert lease.reap(incident_db, lease.owner_id(), T0 + 11 * S, limits) == []
    assert [r.attempt_id for r in lease.reap(incident_db, lease.owner_id(), T0 + 13 * S,
                                             limits)] == [other]
