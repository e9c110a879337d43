"""Issue 48, part of 50: Sentinel killed during a restart checks what the restart did before
anything is redone. A warm restart that serves is recorded verified (once, no second restart);
one that never serves within the verify deadline fails as before."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fixtures_e2e import wait_for
from sqlalchemy import update
from test_remediate_engine import Clock, candidate, open_incident, remediation

from sentinel.incidents import queries
from sentinel.incidents.db import Database
from sentinel.incidents.models_remediation import RemediationAttempt
from sentinel.respond.remediate import lease, state
from sentinel.respond.remediate.base import TargetInfo
from sentinel.respond.remediate.dispatch import Remediator
from sentinel.respond.remediate.engine import Engine, Prepared
from sentinel.respond.remediate.guards import Reason
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration

T0 = 1_800_000_000_000
DEAD_OWNER = f"{socket.gethostname()}:999999:1"  # a pid of this host that is not running


class Pager:
    """Records pages, recoveries and not-fixed calls."""

    def __init__(self) -> None:
        self.pages: list[tuple[int, str]] = []
        self.recovered_: list[tuple[int, str]] = []
        self.not_fixed_: list[tuple[int, str]] = []

    def page(self, incident_id: int, title: str, reason: str, labels: Mapping[str, str]) -> None:
        self.pages.append((incident_id, title))

    def recovered(self, incident_id: int, why: str, data: dict[str, Any]) -> None:
        self.recovered_.append((incident_id, why))

    def not_fixed(self, incident_id: int, why: str) -> None:
        self.not_fixed_.append((incident_id, why))


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


def _killed_mid_restart(db: Database, cfg: Any, targets: dict[str, TargetInfo],
                        incident: int) -> int:
    """The Sentinel that dies: it claimed, began to act (stop, start) and was killed before
    the server served, so nothing verified or finished the attempt."""
    first = Engine(cfg, targets, db, Pager(), clock=Clock(T0))
    prepared = first.prepare(candidate(cfg, incident))
    assert isinstance(prepared, Prepared), prepared
    state.mark_acting(db, prepared.attempt_id, T0)
    outcome = prepared.action.run(prepared.ctx)  # stop, start: the server is loading now
    assert outcome.ok, outcome.detail
    Engine.drop(prepared)  # this process plays the dead one: it runs nothing any more
    with db.session() as s:  # ...whose pid is gone
        s.execute(update(RemediationAttempt).where(RemediationAttempt.id == prepared.attempt_id)
                  .values(owner=DEAD_OWNER))
    return prepared.attempt_id


def _adopted(db: Database) -> list[RemediationAttempt]:
    """The attempts no longer running, once the adopting thread is done with them: it records
    the end first and tells the pager after (a starved machine showed the gap, issue 53), and
    leaves `lease.RUNNING` last."""
    done = [a for a in state.attempts(db) if a.status != "running"]
    return done if done and not any(a.id in lease.RUNNING for a in done) else []


def test_a_restart_left_running_is_verified_not_redone(incident_db: Database, tmp_path: Path,
                                                       sock_dir: Path) -> None:
    cache = tmp_path / "xla"
    cache.mkdir()
    (cache / "graph.bin").write_bytes(b"\0" * 64)
    sim = start_sim()
    # A warm restart that takes a few seconds to serve (25 s in the field).
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), release_s=0,
                                              warm_start_s=3.0), str(sock_dir / "d.sock"))
    cfg = remediation(str(sock_dir / "d.sock"))
    cfg = cfg.model_copy(update={"policies": (cfg.policies[0].model_copy(update={"steps": (
        cfg.policies[0].steps[0].model_copy(update={"verify_deadline_ms": 120_000}),)}),)})
    targets = {"tpu-a": TargetInfo("tpu-a", sim.url)}
    remediator = None
    try:
        incident = open_incident(incident_db, "tpu-a")
        attempt_id = _killed_mid_restart(incident_db, cfg, targets, incident)
        assert not sim.container.times("serving")  # killed before the server served

        pager = Pager()
        engine = Engine(cfg, targets, incident_db, pager, clock=Clock(T0 + 6_000))
        remediator = Remediator(engine).start()  # Sentinel comes back
        # The crash's alert still fires: the restarted Sentinel is asked again, and waits.
        again = engine.prepare(candidate(cfg, incident))
        assert not isinstance(again, Prepared) and again.decision.reason is Reason.IN_PROGRESS
        (attempt,) = wait_for(lambda: _adopted(incident_db), 120, "the adopted attempt")
        assert attempt.id == attempt_id and attempt.status == "succeeded"
        assert attempt.data["adopted"] is True and attempt.data["served_after_s"] >= 3.0
        assert len(sim.container.times("POST start")) == 1  # never restarted a second time
        assert pager.recovered_ and pager.recovered_[0][0] == incident
        assert pager.pages == [] and pager.not_fixed_ == []
        phases = [e.data.get("phase") for e in queries.get_incident(incident_db, incident)
                  .timeline if e.kind == "action"]
        assert "adopted" in phases and "verify" in phases
        assert not any(e.data.get("abandoned") for e in queries.get_incident(
            incident_db, incident).timeline if e.kind == "action")
    finally:
        if remediator is not None:
            remediator.stop(2)
        sock.stop()
        sim.stop()


def test_a_restart_left_running_that_never_serves_fails_after_its_verify_deadline(
        incident_db: Database, tmp_path: Path, sock_dir: Path) -> None:
    cache = tmp_path / "xla"
    cache.mkdir()
    (cache / "graph.bin").write_bytes(b"\0" * 64)
    sim = start_sim()
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), release_s=0,
                                              warm_start_s=600), str(sock_dir / "d.sock"))
    cfg = remediation(str(sock_dir / "d.sock"))  # verify_deadline: 300ms
    targets = {"tpu-a": TargetInfo("tpu-a", sim.url)}
    remediator = None
    try:
        incident = open_incident(incident_db, "tpu-a")
        _killed_mid_restart(incident_db, cfg, targets, incident)
        pager = Pager()
        engine = Engine(cfg, targets, incident_db, pager, clock=Clock(T0 + 6_000))
        remediator = Remediator(engine).start()
        (attempt,) = wait_for(lambda: _adopted(incident_db), 120, "the adopted attempt")
        assert attempt.status == "failed" and "not recovered" in attempt.detail
        assert pager.not_fixed_ and "left running when Sentinel stopped" in pager.not_fixed_[0][1]
        assert state.target_state(incident_db, "tpu-a").consecutive_failures == 1
        assert attempt.id not in lease.RUNNING
    finally:
        if remediator is not None:
            remediator.stop(2)
        sock.stop()
        sim.stop()
