"""Issue 10, units: transitions are durable, restarts restore `for` state as Prometheus does,
an attempt of a dead owner is reaped, one crash gets one action, repeated failures log once.

The end-to-end proofs (PostgreSQL stopped, SQLite on a full disk, SIGKILL chaos, kill -9
during a warm restart, an OOM that takes the target down) are in test_e2e_resilience.py.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from test_incidents_tracker import T0, alert, deliver, resolved
from test_remediate_engine import Clock, open_incident, remediation
from test_remediate_engine import Pages as FakePager

from sentinel.incidents import Database, IncidentTracker, list_incidents
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models_remediation import RemediationAttempt
from sentinel.model import AlertState, NotificationKind
from sentinel.quietlog import QuietFailure
from sentinel.respond.remediate import lease, state
from sentinel.respond.remediate.engine import Candidate, Engine
from sentinel.respond.remediate.guards import Reason
from sentinel.rules.restore import RestoreSettings, restore_for_state

S = 1000
M = 60 * S


# -- the incident stage ---------------------------------------------------------------


def test_fired_again_after_an_orphaned_incident_opens_a_new_incident_and_pages(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    first = alert()
    deliver(tracker, tracker.process([first], T0), T0)
    # Its resolution never reached the database; weeks later it fires again.
    later = T0 + 30 * 24 * 3600 * S
    again = alert(active_at=later, fired_at=later)
    out = tracker.process([again], later)
    kinds = sorted((n.kind, n.incident_id) for n in out)
    assert [k for k, _ in kinds] == [NotificationKind.FIRING, NotificationKind.RESOLVED]
    incidents = sorted(list_incidents(incident_db), key=lambda i: i.id)
    assert [i.status for i in incidents] == ["resolved", "open"]
    resolved_n = next(n for n in out if n.kind is NotificationKind.RESOLVED)
    assert resolved_n.incident_id == incidents[0].id
    assert resolved_n.alerts[0].fired_at_ms == T0  # the old occurrence, not the new one
    firing_n = next(n for n in out if n.kind is NotificationKind.FIRING)
    assert firing_n.incident_id == incidents[1].id and firing_n.alerts == (again,)


def test_resolved_and_fired_again_in_one_call_close_then_open(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    first = alert()
    deliver(tracker, tracker.process([first], T0), T0)
    again = alert(active_at=T0 + 20 * S, fired_at=T0 + 20 * S)
    # What the rule engine reports after an outage: the unacknowledged resolution, and
    # the new occurrence.
    out = tracker.process([again, resolved(first, T0 + 10 * S)], T0 + 20 * S)
    assert sorted(n.kind for n in out) == [NotificationKind.FIRING, NotificationKind.RESOLVED]
    incidents = sorted(list_incidents(incident_db), key=lambda i: i.id)
    assert [i.status for i in incidents] == ["resolved", "open"]
    assert incidents[0].resolved_at == ms_to_dt(T0 + 10 * S)


def test_a_restored_alert_is_not_a_new_occurrence(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert(active_at=T0 - 30 * S, fired_at=T0)
    deliver(tracker, tracker.process([a], T0), T0)
    assert tracker.process([replace(a, last_eval_ms=T0 + 60 * S)], T0 + 60 * S) == []
    assert len(list_incidents(incident_db)) == 1


def test_reconcile_resolves_incidents_whose_alerts_no_longer_fire(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    gone, kept = alert(target="a"), alert(target="b")
    deliver(tracker, tracker.process([gone, kept], T0), T0)
    out = tracker.reconcile([kept], T0 + 60 * S)
    assert [(n.kind, n.alerts[0].fingerprint) for n in out] == [
        (NotificationKind.RESOLVED, gone.fingerprint)]
    status = {i.target: i.status for i in list_incidents(incident_db)}
    assert status == {"a": "resolved", "b": "open"}
    assert tracker.reconcile([kept], T0 + 61 * S) == []  # idempotent


def test_reconcile_does_not_page_resolved_for_a_firing_never_paged(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    deliver(tracker, tracker.process([alert()], T0), T0, ok=False)
    tracker._announced.clear()  # a new process: nothing announced by it
    assert tracker.reconcile([], T0 + S) == []
    assert list_incidents(incident_db)[0].status == "resolved"


def test_process_saves_the_rule_state_in_its_transaction(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    a = alert()
    tracker.process([a], T0, states=[a])
    assert tracker.load_alert_states() == [a]
    tracker.process([resolved(a, T0 + S)], T0 + S, states=[])
    assert tracker.load_alert_states() == []


# -- Prometheus's RestoreForState --------------------------------------------------------

GRACE = RestoreSettings(for_grace_period_ms=10 * M, for_outage_tolerance_ms=30 * M)


@pytest.mark.parametrize(("hold", "state", "active_at", "down_at", "now", "want"), [
    # Rows as prometheus/prometheus rules/manager_test.go TestForStateRestoreHoldDuration.
    (5 * M, AlertState.FIRING, 0, 8 * M, 12 * M, 0),            # firing below grace: kept
    (15 * M, AlertState.FIRING, 0, 18 * M, 22 * M, 0),          # firing above grace: kept
    (5 * M, AlertState.PENDING, 0, 2 * M, 6 * M, None),         # pending below grace: afresh
    (25 * M, AlertState.PENDING, 0, 5 * M, 15 * M, 10 * M),     # downtime not counted
    (25 * M, AlertState.PENDING, 0, 20 * M, 25 * M, 10 * M),    # near hold: grace period
    (5 * M, AlertState.FIRING, 0, 8 * M, 40 * M, None),         # outside outage tolerance
])
def test_restore_for_state_as_prometheus(hold: int, state: AlertState, active_at: int,
                                         down_at: int, now: int, want: int | None) -> None:
    a = replace(alert(active_at=active_at, fired_at=active_at + hold, state=state),
                last_eval_ms=down_at)
    got = restore_for_state(a, hold, now, GRACE)
    assert (got.active_at_ms if got else None) == want
    if got is not None:
        assert got.state is state


def test_restored_alert_is_not_resolved_by_absence_until_its_target_answered() -> None:
    from test_rules_alerting import FakeEngine, manager

    eng = FakeEngine()
    mgr = manager(eng)
    firing = alert(target="a", name="A", active_at=0, fired_at=0)
    mgr.restore([replace(firing, group="g", labels=(("alertname", "A"), ("severity", "page"),
                                                    ("target", "a")))], 0, GRACE)
    answered: dict[str, int] = {}
    mgr.ready = lambda a, now: dict(a.labels).get("target") in answered and \
        now >= answered[dict(a.labels)["target"]]
    # No data yet: held firing, nothing resolved.
    assert [a.state for a in mgr.evaluate_group("g", 15 * S)] == [AlertState.FIRING]
    answered["a"] = 20 * S  # the first scrape landed at 20 s
    assert [a.state for a in mgr.evaluate_group("g", 15 * S)] == [AlertState.FIRING]
    assert [a.state for a in mgr.evaluate_group("g", 30 * S)] == [AlertState.INACTIVE]


# -- leases ----------------------------------------------------------------------------


def _claim(db: Database, target: str, owner: str, lease_ms: int, now: int,
           acting: bool = True) -> int:
    """A claimed attempt; `acting`: its action has begun (the owner died mid-action)."""
    incident = open_incident(db, target)
    c = state.Claim(incident, target, "restart", 3)
    decision, attempt = state.claim(db, c, lambda *_: _allow(), now, "docker_restart", False,
                                    {}, owner, lease_ms)
    assert attempt is not None
    if acting:
        state.mark_acting(db, attempt, now)
    return attempt


def _allow():  # noqa: ANN202
    from sentinel.respond.remediate.guards import Decision
    return Decision(True, Reason.ALLOWED)


def test_reaper_fails_a_dead_owners_attempt_and_counts_it(incident_db: Database) -> None:
    cfg = remediation(breaker_failures=1)
    limits = Engine(cfg, {}, incident_db, FakePager()).limits
    other_host = "elsewhere:123:456"
    attempt = _claim(incident_db, "tpu-a", other_host, 2 * S, T0)
    # Alive (another host, lease running): nothing to do.
    assert lease.reap(incident_db, lease.owner_id(), T0 + S, limits) == []
    # The heartbeat stopped: one lease period later it is failed, the slot free.
    (reaped,) = lease.reap(incident_db, lease.owner_id(), T0 + 2 * S + 1, limits)
    assert reaped.attempt_id == attempt and "stopped renewing" in reaped.why
    with incident_db.session() as s:
        row = s.get(RemediationAttempt, attempt)
        assert row.status == "failed" and "abandoned" in row.detail
    t = state.target_state(incident_db, "tpu-a")
    assert t.consecutive_failures == 1 and t.breaker_opened_ms is not None


def test_reaper_frees_a_gone_owner_on_this_host_at_once(incident_db: Database) -> None:
    cfg = remediation()
    limits = Engine(cfg, {}, incident_db, FakePager()).limits
    host = lease.owner_id().split(":")[0]
    attempt = _claim(incident_db, "tpu-b", f"{host}:999999999:1", 60 * S, T0)
    (reaped,) = lease.reap(incident_db, lease.owner_id(), T0 + 1, limits)
    assert reaped.attempt_id == attempt and "is gone" in reaped.why


def test_own_running_attempt_is_renewed_not_reaped(incident_db: Database) -> None:
    cfg = remediation()
    limits = Engine(cfg, {}, incident_db, FakePager()).limits
    attempt = _claim(incident_db, "tpu-c", lease.owner_id(), 2 * S, T0)
    assert lease.renew(incident_db, attempt, T0 + 10 * S, 2 * S)
    assert lease.reap(incident_db, lease.owner_id(), T0 + 11 * S, limits) == []


# -- one crash, one action -------------------------------------------------------------


def test_a_verified_success_covers_the_other_incident_of_the_same_crash(
        incident_db: Database) -> None:
    cfg = remediation(correlation_window="2m", policy_extra="cooldown: 0s")
    clock = Clock(T0 + 10 * S)
    engine = Engine(cfg, {}, incident_db, FakePager(), clock=clock)
    oom, down = open_incident(incident_db, "tpu-a"), open_incident(incident_db, "tpu-a", "Down")
    c = state.Claim(oom, "tpu-a", "restart", 1)
    _, attempt = state.claim(incident_db, c, lambda *_: _allow(), T0 + S, "docker_restart",
                             False, {})
    assert attempt is not None
    state.finish(incident_db, attempt, True, "verified", T0 + 5 * S, engine.limits)

    def cand(incident: int, active_at: int) -> Candidate:
        return Candidate(incident, "Down", "tpu-a", {"target": "tpu-a"}, cfg.policies[0],
                         active_at)
    # The target-down incident began (3 s) before the target was verified healthy (5 s).
    decision = engine.prepare(cand(down, T0 + 3 * S))
    assert decision.decision.reason is Reason.CORRELATED  # type: ignore[union-attr]
    # A crash that begins after the verification is a new crash.
    later = engine.request(cand(down, T0 + 6 * S))
    assert later is not None
    from sentinel.respond.remediate.guards import decide
    t, f, e = _load(incident_db, down, T0 + 6 * S, cfg)
    assert e.covered_by is None and decide(later, t, f, e, T0 + 10 * S).allowed


def _load(db: Database, incident: int, since: int, cfg):  # noqa: ANN001, ANN202
    with db.session() as s:
        return state.load(s, state.Claim(incident, "tpu-a", "restart", 1, since,
                                         cfg.correlation_window_ms), T0 + 10 * S)


# -- quiet failure -------------------------------------------------------------------------


def test_a_repeated_failure_is_logged_once_then_summarised_each_minute(caplog) -> None:
    now = [0.0]
    quiet = QuietFailure(logging.getLogger("t"), "flushing", clock=lambda: now[0])
    caplog.set_level(logging.INFO, "t")
    for i in range(600):  # ten minutes of failures, one a second
        now[0] = float(i)
        try:
            raise ConnectionError("database is down")
        except ConnectionError:
            quiet.failed()
    quiet.ok()
    records = [r for r in caplog.records if r.name == "t"]
    assert records[0].exc_info is not None and "flushing failed" in records[0].getMessage()
    assert sum(r.exc_info is not None for r in records) == 1
    summaries = [r.getMessage() for r in records if "still failing" in r.getMessage()]
    assert len(summaries) == 9 and "60 more failures" in summaries[0]
    assert "recovered after 600 failures" in records[-1].getMessage()
    assert len(records) == 11


def test_a_running_remediator_reaps_a_dead_owner_within_one_lease(incident_db: Database) -> None:
    from fixtures_e2e import wait_for

    from sentinel.respond.remediate.dispatch import Remediator

    cfg = remediation(lease="1s")
    # Sentinel's clock, driven: the lease runs out when the test says, not when a loaded
    # machine gets round to it (a 1.5 s wall-clock wait failed beside other workers).
    clock = [1_700_000_000.0]
    engine = Engine(cfg, {}, incident_db, FakePager(), clock=lambda: clock[0])
    now = engine.now_ms()
    attempt = _claim(incident_db, "tpu-d", "elsewhere:1:1", 1000, now)
    remediator = Remediator(engine).start()
    try:
        clock[0] += 0.9  # within the lease: the reaper leaves it
        remediator.reap()
        with incident_db.session() as s:
            assert s.get(RemediationAttempt, attempt).status == "running"  # lease still held
        clock[0] += 0.2  # one lease period without renewal: the reaper's next round takes it
        wait_for(lambda: state.attempts(incident_db)[-1].status == "failed", 60,
                 "the attempt reaped once its lease ran out (by the reaper thread)")
    finally:
        remediator.stop(2)


def test_a_job_that_keeps_failing_logs_one_traceback_and_counts_every_failure(
        tmp_path: Path, caplog) -> None:
    """The evidence job failed every 30 s of a PostgreSQL outage, a traceback each time."""
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:0\n"
        "targets: [{name: a, url: 'http://127.0.0.1:9/'}]\n")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    calls = []

    def job() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise ConnectionError("database is down")

    run = app._guard("evidence", job)
    caplog.set_level(logging.INFO, "sentinel.daemon.app")
    for _ in range(4):
        run()
    records = [r for r in caplog.records if r.name == "sentinel.daemon.app"]
    assert [r.exc_info is not None for r in records] == [True, False], \
        [r.getMessage() for r in records]
    assert "evidence job failed" in records[0].getMessage()
    assert "recovered after 3 failures" in records[1].getMessage()
    assert app.metrics.job_failures.labels("evidence")._value.get() == 3
