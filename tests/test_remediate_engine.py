"""The engine over a real database (SQLite and PostgreSQL): budgets, backoff and the breaker
survive a restart of Sentinel; a fleet of 20 never has more than 2 actions in flight; dry runs
and `sentinel remediate` go through the same guards."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.cli import main
from sentinel.config.remediation import RemediationConfig
from sentinel.incidents import queries
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.remediate import state
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TargetInfo
from sentinel.respond.remediate.dispatch import Remediator
from sentinel.respond.remediate.engine import Candidate, Engine, Prepared
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.verify import Verification
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration

T0 = 1_800_000_000_000


class Pages:
    """A Pager that remembers what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str, str, dict[str, str]]] = []

    def page(self, incident_id: int, title: str, reason: str, labels: Mapping[str, str]) -> None:
        self.sent.append((incident_id, title, reason, dict(labels)))


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def open_incident(db: Database, target: str, alertname: str = "VLLMHBMOutOfMemory") -> int:
    with db.session() as s:
        inc = Incident(group_key=f"{alertname}/{target}", alertname=alertname, target=target,
                       status="open", severity="critical", summary="", labels={},
                       opened_at=ms_to_dt(T0), resolved_at=None, updated_at=ms_to_dt(T0))
        s.add(inc)
        s.flush()
        return inc.id


def close_incident(db: Database, incident_id: int) -> None:
    with db.session() as s:
        inc = s.get(Incident, incident_id)
        inc.status, inc.resolved_at = "resolved", ms_to_dt(T0)


def remediation(sock: str = "/nonexistent.sock", policy_extra: str = "",
                verify_deadline: str = "300ms", **top: object) -> RemediationConfig:
    """One restart policy. The short verify deadline keeps a test of a restart that never
    serves short; a test that needs the restart to serve passes a generous one (verification
    ends as soon as the server serves, so it costs nothing unless the machine is starved)."""
    import yaml
    data = yaml.safe_load(f"""
policies:
  - name: restart
    alerts: [VLLMHBMOutOfMemory]
    {policy_extra}
    steps:
      - docker_restart: {{container: vllm, socket: '{sock}', settle: 100ms}}
        timeout: 10s
        verify_deadline: {verify_deadline}
        attempts: 5
""")
    return RemediationConfig.model_validate({**data, **top})


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


def candidate(cfg: RemediationConfig, incident_id: int, target: str = "tpu-a") -> Candidate:
    return Candidate(incident_id, "VLLMHBMOutOfMemory", target,
                     {"alertname": "VLLMHBMOutOfMemory", "target": target},
                     cfg.policies[0], T0)


def test_flapping_target_budget_and_breaker_survive_a_restart(incident_db: Database, tmp_path,
                                                              sock_dir) -> None:
    # A cold cache (allowed) that never finishes compiling: every restart fails verification.
    (tmp_path / "xla").mkdir()
    sim = start_sim()
    sock = serve_container(sim, ContainerSpec(xla_cache=str(tmp_path / "xla"), release_s=0,
                                              cold_start_s=600), str(sock_dir / "d.sock"))
    cfg = remediation(str(sock_dir / "d.sock"), "max_per_hour: 2\n    allow_cold: true",
                      breaker_failures=3, backoff={"initial": "10s", "reset_after": "2h"})
    targets = {"tpu-a": TargetInfo("tpu-a", sim.url)}
    clock, pages = Clock(T0), Pages()

    def engine() -> Engine:  # a fresh Sentinel: nothing in memory, all state in the database
        return Engine(cfg, targets, incident_db, pages, clock=clock)

    def attempt(e: Engine, incident: int, at_s: float) -> Reason:
        clock.ms = T0 + int(at_s * 1000)
        prepared = e.prepare(candidate(cfg, incident))
        if isinstance(prepared, Prepared):
            result = e.execute(prepared)
            assert result.ok is False and "not recovered" in result.detail
            return Reason.ALLOWED
        return prepared.decision.reason

    try:
        incidents = [open_incident(incident_db, "tpu-a", f"VLLMHBMOutOfMemory{i}")
                     for i in range(4)]
        e = engine()
        assert attempt(e, incidents[0], 0) is Reason.ALLOWED       # failure 1
        assert attempt(e, incidents[1], 1) is Reason.BACKOFF       # 10 s after a failure
        assert attempt(e, incidents[1], 15) is Reason.ALLOWED      # failure 2
        assert attempt(e, incidents[2], 60) is Reason.RATE_LIMITED  # budget: 2 an hour
        assert pages.sent[-1][3]["reason"] == "rate_limited"

        e = engine()  # Sentinel restarts: the budget is still spent
        assert attempt(e, incidents[2], 61) is Reason.RATE_LIMITED
        assert attempt(e, incidents[2], 3700) is Reason.ALLOWED    # failure 3: breaker opens
        incident, title, reason, labels = pages.sent[-1]
        assert (incident, title, labels["reason"]) == (
            incidents[2], "SentinelRemediationGaveUp", "breaker_open")
        assert "3 failed attempts in a row" in reason

        e = engine()  # and again: the breaker stays open, days later
        assert attempt(e, incidents[3], 90_000) is Reason.BREAKER_OPEN
        assert len(sim.container.times("POST stop")) == 3  # no more restarts than allowed
        persisted = state.target_state(incident_db, "tpu-a")
        assert persisted.consecutive_failures == 3 and persisted.breaker_opened_ms is not None
        assert [a.status for a in state.attempts(incident_db)] == ["failed"] * 3
    finally:
        sock.stop()
        sim.stop()


class Slow:
    """An action that takes a while and counts how many run at once.

    The first run waits (up to `overlap_s`) for a second to start beside it, so a cap of
    two is reached however slowly a loaded machine dispatches; then each run holds its
    slot 0.1 s, the window in which a third, over the cap, would be counted."""

    kind = "docker_restart"

    def __init__(self, overlap_s: float = 0.0) -> None:
        self.lock = threading.Condition()
        self.now = self.peak = self.runs = 0
        self.overlap_s = overlap_s

    def check(self, ctx: ActionContext) -> Check:
        return Check(True, f"restart {ctx.target.name}")

    def run(self, ctx: ActionContext) -> Outcome:
        with self.lock:
            self.now += 1
            self.runs += 1
            self.peak = max(self.peak, self.now)
            self.lock.notify_all()
            if self.runs == 1:
                self.lock.wait_for(lambda: self.peak >= 2, self.overlap_s)
        time.sleep(0.1)
        with self.lock:
            self.now -= 1
        return Outcome(True, "restarted")


def test_fleet_of_20_failing_at_once_never_has_more_than_2_in_flight(incident_db) -> None:
    cfg = remediation(max_concurrent=2)
    names = [f"tpu-{i:02d}" for i in range(20)]
    for name in names:
        open_incident(incident_db, name)
    slow = Slow(overlap_s=30)
    engine = Engine(cfg, {n: TargetInfo(n, "http://127.0.0.1:1") for n in names}, incident_db,
                    Pages(), verifier=lambda url, s: Verification(True, "ok", 0.01, 0.02),
                    actions={"docker_restart": slow})
    remediator = Remediator(engine).start()
    now = int(time.time() * 1000)
    alerts = [Alert("crashes", "VLLMHBMOutOfMemory",
                    labels_of({"alertname": "VLLMHBMOutOfMemory", "target": n}), (),
                    AlertState.FIRING, 1.0, now, now, now) for n in names]

    def all_done() -> bool:
        remediator.offer(alerts, now)  # as every evaluation does while the alerts fire
        done = [a for a in state.attempts(incident_db) if a.status == "succeeded"]
        return len(done) == 20
    try:
        wait_for(all_done, 120, "all 20 targets remediated")
    finally:
        remediator.stop()
    assert slow.runs == 20 and slow.peak == 2
    refused = [e for i in queries.list_incidents(incident_db, limit=20)
               for e in queries.get_incident(incident_db, i.id).timeline
               if e.kind == "action" and e.data.get("reason") == "concurrency"]
    assert refused and "limit 2" in refused[0].message


def test_dry_run_records_the_plan_and_does_nothing(incident_db, tmp_path, sock_dir) -> None:
    (tmp_path / "xla").mkdir()
    (tmp_path / "xla" / "graph.bin").write_bytes(b"g")
    sim = start_sim()
    sock = serve_container(sim, ContainerSpec(xla_cache=str(tmp_path / "xla")),
                           str(sock_dir / "d.sock"))
    cfg = remediation(str(sock_dir / "d.sock"), dry_run=True)
    try:
        incident = open_incident(incident_db, "tpu-a")
        engine = Engine(cfg, {"tpu-a": TargetInfo("tpu-a", sim.url)}, incident_db, Pages())
        result = engine.prepare(candidate(cfg, incident))
        assert not isinstance(result, Prepared) and result.decision.reason is Reason.DRY_RUN
        (event,) = [e for e in queries.get_incident(incident_db, incident).timeline
                    if e.kind == "action"]
        assert event.message.startswith("dry run: would restart container vllm")
        assert "warm: XLA cache" in event.message and event.data["reason"] == "dry_run"
        assert state.attempts(incident_db) == [] and sim.container.times("POST") == []
        assert sim.container.running
    finally:
        sock.stop()
        sim.stop()


def test_sentinel_remediate_by_hand(tmp_path, sock_dir, capsys) -> None:
    (tmp_path / "xla").mkdir()
    (tmp_path / "xla" / "graph.bin").write_bytes(b"g")
    sim = start_sim()
    sock_path = str(sock_dir / "d.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(tmp_path / "xla"), release_s=0,
                                              warm_start_s=0.1), sock_path)
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp_path / 's.db'}
targets: [{{name: tpu-a, url: '{sim.url}'}}]
remediation:
  policies:
    - name: restart
      alerts: [VLLMHBMOutOfMemory]
      steps:
        - docker_restart: {{container: vllm, socket: '{sock_path}', settle: 100ms}}
          verify_deadline: 10s
""")
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    incident = open_incident(db, "tpu-a")
    other = open_incident(db, "tpu-a", "VLLMKVCacheNearlyFull")
    try:
        args = ["remediate", str(incident), "docker_restart", "-c", str(cfg)]
        assert main([*args, "--dry-run"]) == 0
        assert "would restart container vllm" in capsys.readouterr().out
        assert sim.container.times("POST") == []
        # No policy covers this alert: nothing runs.
        assert main(["remediate", str(other), "docker_restart", "-c", str(cfg)]) == 3
        assert "no remediation policy allows" in capsys.readouterr().err
        assert main(args) == 0
        assert "succeeded" in capsys.readouterr().out
        assert sim.container.times("POST stop") and sim.container.times("serving")
        # The same guards hold for a person: the target is now in its cooldown.
        assert main(args) == 1
        assert "cooldown" in capsys.readouterr().out
        close_incident(db, incident)
        assert main(["incidents", "show", str(incident), "--database",
                     f"sqlite:///{tmp_path / 's.db'}"]) == 0
        shown = capsys.readouterr().out
        for text in ("dry run: would restart", "intent: docker_restart", "outcome: ok",
                     "verified: healthy", "refused docker_restart on tpu-a: cooldown"):
            assert text in shown
    finally:
        sock.stop()
        sim.stop()


class Told(Pages):
    """A Pager that also hears when nothing will fix the incident now (act first, issue 33)."""

    def __init__(self) -> None:
        super().__init__()
        self.not_fixed_calls: list[tuple[int, str]] = []

    def not_fixed(self, incident_id: int, why: str) -> None:
        self.not_fixed_calls.append((incident_id, why))


@pytest.mark.parametrize("verified", [True, False])
def test_a_failed_verification_says_not_fixed_and_a_verified_one_does_not(
        incident_db, verified: bool) -> None:
    cfg = remediation()
    incident = open_incident(incident_db, "tpu-a")
    told = Told()
    engine = Engine(cfg, {"tpu-a": TargetInfo("tpu-a", "http://127.0.0.1:1")}, incident_db,
                    told, verifier=lambda url, s: Verification(verified, "probe said so", 0.01,
                                                                0.02),
                    actions={"docker_restart": Slow()}, clock=Clock(T0))
    prepared = engine.prepare(candidate(cfg, incident))
    assert isinstance(prepared, Prepared)
    engine.execute(prepared)
    if verified:
        assert told.not_fixed_calls == []
    else:
        ((which, why),) = told.not_fixed_calls
        assert which == incident and "docker_restart (step 1 of restart) did not hold" in why
    # The next evaluation: after a verified fix the alert's episode is done (nothing to
    # say); after a failure the backoff refuses, and says so again (releasing is idempotent).
    engine.prepare(candidate(cfg, incident))
    assert len(told.not_fixed_calls) == (0 if verified else 2)


def test_a_guard_refusal_says_not_fixed_at_once(incident_db) -> None:
    cfg = remediation(dry_run=True)
    incident = open_incident(incident_db, "tpu-a")
    told = Told()
    engine = Engine(cfg, {"tpu-a": TargetInfo("tpu-a", "http://127.0.0.1:1")}, incident_db,
                    told, actions={"docker_restart": Slow()}, clock=Clock(T0))
    engine.prepare(candidate(cfg, incident))
    ((which, why),) = told.not_fixed_calls
    assert which == incident and "dry_run" in why
