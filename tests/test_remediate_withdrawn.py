"""An attempt that never began to act is withdrawn, not failed.

Found beside stress-ng: an HA leader claimed a restart, lost its lease for a
moment before acting, refused to act (right), and then the reaper failed the
attempt as "outcome unknown". The ladder counted a step nobody ran and paged
"every step failed (1 attempts)" while the target was never restarted. The
leader now writes `acting_at` (fenced) before the action runs; an attempt
reaped without it is withdrawn: nothing counted, the guards decide again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from test_durable_transitions import S, _claim
from test_remediate_engine import Clock, Pages, candidate, open_incident, remediation

from sentinel.config.remediation import RemediationConfig
from sentinel.daemon.leader import NotLeader
from sentinel.incidents.db import Database
from sentinel.incidents.models import TimelineEvent
from sentinel.respond.remediate import lease, state
from sentinel.respond.remediate.base import TargetInfo
from sentinel.respond.remediate.engine import Engine, Prepared

pytestmark = pytest.mark.integration

T0 = 1_800_000_000_000


def _events(db: Database, incident: int) -> list[str]:
    with db.session() as s:
        return list(s.scalars(select(TimelineEvent.message).where(
            TimelineEvent.incident_id == incident).order_by(TimelineEvent.id)))


def _fix_policy(tmp_path: Path) -> tuple[RemediationConfig, Path]:
    ran = tmp_path / "ran"
    script = tmp_path / "fix.sh"
    script.write_text(f'#!/bin/sh\necho "$1" >> {ran}\n')
    script.chmod(0o755)
    cfg = RemediationConfig.model_validate({
        "command_allowlist": [str(script)],
        "lease": "3s",
        "policies": [{"name": "fix", "alerts": ["VLLMHBMOutOfMemory"], "cooldown": "10m",
                      "steps": [{"command": {"argv": [str(script), "{target}"]},
                                 "verify": False, "attempts": 1}]}]})
    return cfg, ran


def _claimed(db: Database, tmp_path: Path
             ) -> tuple[Engine, Clock, RemediationConfig, Path, int, Prepared]:
    """An engine on Sentinel's clock, an open incident on tpu-a, and its claimed attempt."""
    cfg, ran = _fix_policy(tmp_path)
    clock = Clock(T0)
    engine = Engine(cfg, {"tpu-a": TargetInfo("tpu-a", "http://127.0.0.1:9")}, db, Pages(),
                    clock=clock)
    incident = open_incident(db, "tpu-a")
    prepared = engine.prepare(candidate(cfg, incident))
    assert isinstance(prepared, Prepared)
    return engine, clock, cfg, ran, incident, prepared


def test_a_leader_that_lost_the_lead_before_acting_runs_nothing_and_counts_nothing(
        incident_db: Database, tmp_path: Path) -> None:
    engine, clock, cfg, ran, incident, prepared = _claimed(incident_db, tmp_path)
    engine.may_act = lambda: False  # the lease was lost between the claim and the action
    result = engine.execute(prepared)
    assert result.ok is None and "not run" in result.detail
    assert not ran.exists()
    assert state.attempts(incident_db, incident) == []
    t = state.target_state(incident_db, "tpu-a")
    assert t.consecutive_failures == 0 and t.last_attempt_ms is None  # no cooldown started
    assert any("withdrawn before acting" in m for m in _events(incident_db, incident))
    # Leading again: the same step at once, neither "gave up" nor "in cooldown".
    engine.may_act = lambda: True
    clock.ms += 1000
    prepared = engine.prepare(candidate(cfg, incident))
    assert isinstance(prepared, Prepared) and prepared.decision.step == 0
    assert engine.execute(prepared).ok is True
    assert ran.read_text().split() == ["tpu-a"]


def test_a_fenced_start_leaves_the_attempt_to_the_reaper_which_withdraws_it(
        incident_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader check passed, but the lease was taken before `acting_at` was written: the
    fence refuses that write, so nothing runs, and nothing can be recorded either."""
    engine, clock, cfg, ran, incident, prepared = _claimed(incident_db, tmp_path)

    def fenced():  # noqa: ANN202
        raise NotLeader("another Sentinel holds the lease")

    with monkeypatch.context() as m:
        m.setattr(incident_db, "session", fenced)
        result = engine.execute(prepared)
    assert result.ok is None and "not run" in result.detail and not ran.exists()
    [row] = state.attempts(incident_db, incident)
    assert row.status == "running" and row.acting_at is None
    # Any daemon's reaper, once the lease ran out: withdrawn, not failed.
    (reaped,) = lease.reap(incident_db, lease.owner_id(), T0 + 4 * S, engine.limits)
    assert reaped.withdrawn and reaped.attempt_id == prepared.attempt_id
    assert state.attempts(incident_db, incident) == []
    assert state.target_state(incident_db, "tpu-a").consecutive_failures == 0


def test_the_reaper_withdraws_an_unstarted_attempt_and_fails_a_started_one(
        incident_db: Database) -> None:
    limits = Engine(remediation(breaker_failures=1), {}, incident_db, Pages()).limits
    unstarted = _claim(incident_db, "tpu-u", "elsewhere:1:1", 2 * S, T0, acting=False)
    started = _claim(incident_db, "tpu-s", "elsewhere:1:1", 2 * S, T0, acting=True)
    reaped = {r.attempt_id: r for r in lease.reap(incident_db, lease.owner_id(),
                                                  T0 + 2 * S + 1, limits)}
    assert reaped[unstarted].withdrawn and not reaped[started].withdrawn
    assert [a.id for a in state.attempts(incident_db)] == [started]
    assert state.attempts(incident_db)[0].status == "failed"
    assert state.target_state(incident_db, "tpu-u").consecutive_failures == 0
    assert state.target_state(incident_db, "tpu-u").breaker_opened_ms is None
    assert state.target_state(incident_db, "tpu-s").consecutive_failures == 1


def test_a_previous_runs_unstarted_attempt_is_withdrawn_at_start(
        incident_db: Database) -> None:
    """Without a lease (the age rule, at start-up): the same distinction."""
    unstarted = _claim(incident_db, "tpu-v", "elsewhere:1:1", 2 * S, T0, acting=False)
    started = _claim(incident_db, "tpu-w", "elsewhere:1:1", 2 * S, T0, acting=True)
    assert state.abandon_stale(incident_db, T0 + 3600 * S, 60 * S) == 2
    [row] = state.attempts(incident_db)
    assert row.id == started and row.status == "failed" and unstarted != started
