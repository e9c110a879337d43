"""Issue 33: an incident ends when the failure ends.

A crash line → the crash alert (`increase(...[20s]) > 0`) → a warm restart through the
simulator's Docker socket → verified serving. The incident resolves at the verification,
says so on its timeline, and the alert that keeps firing from the old window afterwards
neither re-opens it nor pages. (Its page was held while Sentinel acted, and the fix came
within the grace: nobody was paged at all; tests/test_e2e_actfirst.py has the rest.)
The daemon runs for real (in process), the simulator and the webhook receiver on loopback.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_e2e import wait_for
from fixtures_http import http

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.incidents.convert import dt_to_ms
from sentinel.respond.remediate import state
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration

WINDOW_S = 20
RULES = f"""\
groups:
  - name: crashes
    interval: 200ms
    rules:
      - alert: VLLMHBMOutOfMemory
        expr: >-
          sum by (target) (increase(
            sentinel_log_signature_matches_total{{category="hbm_oom"}}[{WINDOW_S}s])) > 0
        labels: {{severity: critical}}
"""


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


def _config(folder: Path, sim_url: str, sock: str, log: Path, hook: str) -> Path:
    (folder / "rules.yaml").write_text(RULES)
    path = folder / "sentinel.yaml"
    path.write_text(f"""\
database: sqlite:///{folder / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
probe_interval: 0s
targets:
  - name: tpu-a
    url: {sim_url}
    scrape_interval: 1s
    logs: {{files: ['{log}'], poll_interval: 100ms}}
receivers:
  - name: oncall
    webhook: {{url: '{hook}', timeout: 2s}}
notify: {{interval: 200ms}}
remediation:
  policies:
    - name: restart-on-hbm-oom
      alerts: [VLLMHBMOutOfMemory]
      cooldown: 1m
      steps:
        - docker_restart: {{container: vllm, socket: '{sock}', settle: 200ms}}
          timeout: 20s
          verify_deadline: 10s
""")
    return path


def _statuses(sink) -> list[str]:  # noqa: ANN001
    return [a["status"] for _, body, _ in list(sink.received) for a in body["alerts"]
            if a["labels"].get("alertname") == "VLLMHBMOutOfMemory"]


def test_a_verified_restart_resolves_the_crash_incident_for_good(tmp_path, sock_dir,
                                                                 sink) -> None:
    cache = tmp_path / "xla"
    cache.mkdir()
    (cache / "jit_step_fn.bin").write_bytes(b"\0" * 512)
    log = tmp_path / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    sim = start_sim()
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), log_file=str(log),
                                              release_s=0.2, warm_start_s=0.3), path)
    app = App(load_config(_config(tmp_path, sim.url, path, log, sink.url)))
    app.start()
    db = app.pipeline.tracker.db
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
            30, "the log source to join the file")
        http.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        (incident,) = wait_for(lambda: [i for i in queries.list_incidents(db)
                                        if i.status == "resolved"], 30,
                               "the incident to resolve")
        # Resolved at the verification, just before the attempt is finished as succeeded.
        wait_for(lambda: [a for a in state.attempts(db, incident.id)
                          if a.status == "succeeded"], 10, "the attempt to succeed")
        detail = queries.get_incident(db, incident.id)
        (ended,) = [e for e in detail.timeline if e.kind == "incident_resolved"]
        assert "resolved at verification" in ended.message and "docker_restart" in ended.message
        # Resolved at the verification, long before the rule's window let the alert go.
        verified = next(e for e in detail.timeline
                        if e.kind == "action" and e.data.get("phase") == "verify")
        assert detail.incident.resolved_at == ended.at
        assert abs(dt_to_ms(ended.at) - dt_to_ms(verified.at)) < 1000
        assert dt_to_ms(ended.at) - dt_to_ms(detail.incident.opened_at) < WINDOW_S * 1000 / 2
        assert app.pipeline.rules.active_alerts(), "the alert should still fire from its window"
        # Honest clocks: from the crash line's own time, to open and to verified serving.
        (excerpt, *_) = [e for e in detail.timeline if e.kind == "log_excerpt"]
        assert detail.clocks.evidence_at == excerpt.at
        assert detail.clocks.detect_ms == dt_to_ms(detail.incident.opened_at) - dt_to_ms(
            excerpt.at)
        assert detail.clocks.recovery_ms == dt_to_ms(ended.at) - dt_to_ms(excerpt.at)
        assert verified.data["recovery_ms"] >= detail.clocks.recovery_ms - 1000

        # The alert goes on firing, then ends with its window: nothing re-opens, nothing pages.
        wait_for(lambda: not app.pipeline.rules.active_alerts(), WINDOW_S + 30,
                 "the crash alert to leave its window")
        app.notifier.run_once()  # whatever the last evaluations queued is sent first
        assert [i.id for i in queries.list_incidents(db)] == [incident.id]
        # Act first, then tell once: fixed within the grace, so nobody was paged, and with
        # no notify.act_first.receiver nobody is told either: the timeline says it.
        assert _statuses(sink) == [], _statuses(sink)
        notes = [e.message for e in queries.get_incident(db, incident.id).timeline
                 if e.kind == "note"]
        assert any(m.startswith("not paged: fixed by Sentinel") for m in notes), notes
        assert any("no notify.act_first.receiver" in m for m in notes), notes
        assert len(state.attempts(db)) == 1
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()
