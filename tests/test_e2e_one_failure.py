"""Issue 33: a crash that also takes the target down and fails its health probe is one
incident and one page; the timeline names the joined alerts.

The real daemon (in process) scrapes, probes and follows the log of a simulator whose
container crashes (HBM OOM logged, then gone) and stays down, with no remediation; a
webhook receiver on loopback. Times are scaled down (probes every 250 ms, `for` of 1 s).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: one-failure
    interval: 250ms
    rules:
      - alert: VLLMHBMOutOfMemory
        expr: >-
          sum by (target) (increase(
            sentinel_log_signature_matches_total{category="hbm_oom"}[60s])) > 0
        labels: {severity: critical}
      - alert: VLLMTargetDown
        expr: up == 0
        for: 1s
        labels: {severity: critical}
      - alert: VLLMHealthCheckFailing
        expr: max by (target) (sentinel_probe_success{probe="health"}) == 0
        for: 1s
        labels: {severity: critical}
"""


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


def _firing_pages(sink) -> list[str]:  # noqa: ANN001
    return [a["labels"]["alertname"] for _, body, _ in list(sink.received)
            for a in body["alerts"] if a["status"] == "firing"]


def test_crash_down_and_failing_health_are_one_incident_and_one_page(
        tmp_path: Path, sock_dir: Path, sink) -> None:  # noqa: ANN001
    log = tmp_path / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    sim = start_sim()
    sock = serve_container(sim, ContainerSpec(xla_cache=str(tmp_path), log_file=str(log)),
                           str(sock_dir / "docker.sock"))
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "sentinel.yaml").write_text(f"""\
database: sqlite:///{tmp_path / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
targets:
  - name: tpu-a
    url: {sim.url}
    scrape_interval: 250ms
    scrape_timeout: 250ms
    probe: {{interval: 250ms, timeout: 250ms}}
    logs: {{files: ['{log}'], poll_interval: 100ms}}
receivers:
  - name: oncall
    webhook: {{url: '{sink.url}', timeout: 2s}}
notify: {{interval: 200ms}}
""")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    db = app.pipeline.tracker.db
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
            30, "the log source to join the file")
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()

        def all_three() -> bool:
            firing = {a.name for a in app.pipeline.rules.active_alerts()
                      if a.state.value == "firing"}
            return firing == {"VLLMHBMOutOfMemory", "VLLMTargetDown", "VLLMHealthCheckFailing"}
        wait_for(all_three, 30, "the crash, down and health alerts to fire")
        wait_for(lambda: [i for i in queries.list_incidents(db) if i.alerts == 3], 10,
                 "the down and health alerts to join the crash's incident")
        # Ten more evaluations with all three firing: nothing else opens or pages.
        evaluations = app.metrics.registry.get_sample_value(
            "sentinel_rule_group_evaluations_total", {"group": "one-failure"}) or 0
        wait_for(lambda: (app.metrics.registry.get_sample_value(
            "sentinel_rule_group_evaluations_total", {"group": "one-failure"}) or 0)
            >= evaluations + 10, 30, "ten more evaluations")
        app.notifier.run_once()
        (incident,) = queries.list_incidents(db)
        assert incident.alertname == "VLLMHBMOutOfMemory" and incident.firing == 3
        assert _firing_pages(sink) == ["VLLMHBMOutOfMemory"]
        detail = queries.get_incident(db, incident.id)
        joined = [e.data["joined"] for e in detail.timeline if e.kind == "note"
                  and e.data and "joined" in e.data]
        assert sorted(joined) == ["VLLMHealthCheckFailing", "VLLMTargetDown"]
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()
