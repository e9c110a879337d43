"""End to end on loopback: the simulator logs an HBM OOM and stops serving → incident →
guarded docker_restart through the simulator's Docker-API socket → verification → resolved.

The daemon runs for real (file log source, rules, incidents, remediation, webhook); the
simulator is a container behind a unix socket. Latency is asserted on recorded timestamps
(the simulator's own event log), not by timing the test.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import bodies_with_status, wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.respond.remediate import state
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: crashes
    interval: 200ms
    rules:
      - alert: VLLMHBMOutOfMemory
        expr: >-
          sum by (target) (increase(sentinel_log_signature_matches_total{category="hbm_oom"}[1m]))
          > 0
        labels: {severity: critical}
        annotations: {summary: "TPU HBM exhausted on {{ $labels.target }}"}
"""


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


def _config(folder: Path, sim: SimServer, sock: str, log: Path, hook: str) -> Path:
    (folder / "rules.yaml").write_text(RULES)
    path = folder / "sentinel.yaml"
    path.write_text(f"""\
database: sqlite:///{folder / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
targets:
  - name: tpu-a
    url: {sim.url}
    scrape_interval: 1s
    logs: {{files: ['{log}'], poll_interval: 100ms}}
receivers:
  - name: oncall
    webhook: {{url: '{hook}', timeout: 2s}}
remediation:
  max_concurrent: 2
  policies:
    - name: restart-on-hbm-oom
      alerts: [VLLMHBMOutOfMemory]
      match: {{severity: critical}}
      cooldown: 1m
      steps:
        - docker_restart: {{container: vllm, socket: '{sock}', settle: 200ms}}
          timeout: 20s
          verify_deadline: 2m  # ends when served; generous for a starved machine
""")
    return path


def _simulated(tmp: Path, sock_dir: Path, warm: bool) -> tuple[SimServer, object, str, Path]:
    cache = tmp / "xla"
    cache.mkdir()
    if warm:
        (cache / "jit_step_fn.bin").write_bytes(b"\0" * 512)
    log = tmp / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    sim = start_sim()
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), log_file=str(log),
                                              release_s=0.2, warm_start_s=0.3), path)
    return sim, sock, path, log


def _incident(app: App, alertname: str = "VLLMHBMOutOfMemory"):  # noqa: ANN202
    db = app.pipeline.tracker.db
    found = [i for i in queries.list_incidents(db) if i.alertname == alertname]
    return queries.get_incident(db, found[0].id) if found else None


def _phases(detail) -> list[str]:  # noqa: ANN001
    return [e.data["phase"] for e in detail.timeline if e.kind == "action"]


def test_hbm_oom_crash_is_restarted_warm_verified_and_resolved(tmp_path, sock_dir, sink) -> None:
    sim, sock, path, log = _simulated(tmp_path, sock_dir, warm=True)
    app = App(load_config(_config(tmp_path, sim, path, log, sink.url)))
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
            60, "the log source to join the file")
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        assert not sim.container.running

        wait_for(lambda: sim.container.times("serving"), 120, "the restarted server to serve")
        detail = wait_for(lambda: (d := _incident(app)) and d.incident.status == "resolved" and d,
                          120, "the incident to resolve")
        # The incident resolves at verification; the attempt's own row is finished in the
        # engine's next write, which a loaded machine may show a moment later.
        (attempt,) = wait_for(lambda: [a for a in state.attempts(
            app.pipeline.tracker.db, detail.incident.id) if a.status != "running"],
            30, "the attempt to be finished")
        assert attempt.status == "succeeded" and attempt.action == "docker_restart"
        assert attempt.recovery_ms is not None and attempt.recovery_ms > 0
        # In Sentinel's own clock, not the machine's: the restart was decided in the very
        # evaluation that fired the alert (the held page's note carries that evaluation's
        # time), and intent, outcome and verification follow in order. How long crash line
        # → restart request takes in seconds is a figure for bench/remediate.py (design
        # target under 2 s), not a bound a loaded machine can be held to (issue 53).
        (alert,) = detail.alerts
        held = next(e for e in detail.timeline if e.kind == "note"
                    and e.message.startswith("page held"))
        assert held.at == alert.fired_at, (held.at, alert.fired_at)
        assert detail.clocks.evidence_at is not None
        assert detail.clocks.evidence_at <= alert.fired_at
        acts = [e.at for e in detail.timeline if e.kind == "action"]
        assert alert.fired_at <= acts[0] and acts == sorted(acts)
        assert sim.container.times("logged") and sim.container.times("POST stop")
        # Stop, then start (no bare /restart: the chip must be free first), warm comeback.
        posts = [w for _, w in sim.container.events if w.startswith("POST")]
        assert posts[:2] == ["POST stop", "POST start"]
        assert any(w.startswith("loading warm") for _, w in sim.container.events)
        assert httpx.get(f"{sim.url}/health").status_code == 200
        # The audit trail: decision (allowed by the claim), intent, outcome, verification.
        assert _phases(detail) == ["intent", "outcome", "verify"]
        verify = next(e for e in detail.timeline if e.kind == "action"
                      and e.data["phase"] == "verify")
        assert verify.data["ok"] is True and verify.data["recovery_ms"] == attempt.recovery_ms
        assert "time to recovery" in verify.message
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()


def test_empty_cache_refuses_the_warm_restart_and_pages(tmp_path, sock_dir, sink) -> None:
    sim, sock, path, log = _simulated(tmp_path, sock_dir, warm=False)
    app = App(load_config(_config(tmp_path, sim, path, log, sink.url)))
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
            60, "the log source to join the file")
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()

        # Act first, then tell once: the crash's own page, held while the policy would act,
        # goes at the refusal and says why; no separate SentinelRemediationRefused page.
        ((_, body),) = wait_for(lambda: bodies_with_status(sink, "firing"), 120, "the page")
        (page,) = body["alerts"]
        assert page["labels"]["alertname"] == "VLLMHBMOutOfMemory"
        assert page["labels"]["target"] == "tpu-a"
        why = page["annotations"]["sentinel_remediation"]
        assert "is empty" in why and "cold_cache" in why and "refused" in why
        # The same words as for any accelerator (restart_cost.py): the expected cost.
        assert "expected time to serve 25m" in why and "is more than policy" in why
        detail = _incident(app)
        refusal = [e for e in detail.timeline if e.kind == "action"]
        assert refusal[0].data["reason"] == "cold_cache" and not refusal[0].data["allowed"]
        # The sender records the delivery just after the receiver got it: wait for the row.
        wait_for(lambda: any(e.kind == "notification_sent" for e in _incident(app).timeline),
                 30, "the page's delivery on the timeline")
        assert state.attempts(app.pipeline.tracker.db) == []
        assert sim.container.times("POST") == []  # nothing was restarted
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()
