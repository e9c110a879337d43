"""Engine death that exits 0 (vllm #48966) is a crash like any other.

The simulator's EngineCore dies, the API server shuts down cleanly and the
process exits with code 0, so systemd's `Restart=on-failure` would never
fire. Sentinel never reads the exit code: the crash line in the log raises
the shipped VLLMEngineDead alert (its window scaled down) and the response
policy restarts the container, exactly as for an OOM that exits 1.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.respond.remediate import state
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


def _engine_dead_rule() -> str:
    """The shipped VLLMEngineDead rule, its 5m window cut to 3s, evaluated every 200ms."""
    doc = yaml.safe_load((REPO / "rules" / "vllm.yaml").read_text())
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "VLLMEngineDead")
    rule["expr"] = re.sub(r"\[5m\]", "[3s]", rule["expr"])
    return yaml.safe_dump({"groups": [{"name": "crashes", "interval": "200ms", "rules": [rule]}]})


def test_engine_death_with_exit_code_0_is_restarted_like_a_crash(tmp_path, sock_dir, sink):
    log = tmp_path / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    cache = tmp_path / "xla"
    cache.mkdir()
    (cache / "jit_step_fn.bin").write_bytes(b"\0" * 512)
    sim = start_sim()
    sock_path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), log_file=str(log),
                                              release_s=0.2, warm_start_s=0.3), sock_path)
    (tmp_path / "rules.yaml").write_text(_engine_dead_rule())
    (tmp_path / "sentinel.yaml").write_text(f"""\
database: sqlite:///{tmp_path / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
probe_interval: 0s
targets:
  - name: tpu-a
    url: {sim.url}
    scrape_interval: 1s
    logs: {{files: ['{log}'], poll_interval: 100ms}}
receivers:
  - name: oncall
    webhook: {{url: '{sink.url}', timeout: 2s}}
remediation:
  policies:
    - name: restart-crashed-vllm
      alerts: [VLLMEngineDead]
      cooldown: 1m
      steps:
        - docker_restart: {{container: vllm, socket: '{sock_path}', settle: 200ms}}
          timeout: 20s
          verify_deadline: 10s
""")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
            5, "the log source to join the file")
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "engine_dead"}).raise_for_status()
        assert not sim.container.running and sim.container.exit_code == 0
        assert sim.container.inspect()["State"]["ExitCode"] == 0

        wait_for(lambda: sim.container.times("serving"), 15, "the restarted server to serve")
        db = app.pipeline.tracker.db
        incident = wait_for(lambda: [i for i in queries.list_incidents(db)
                                     if i.alertname == "VLLMEngineDead"], 10, "the incident")[0]
        (attempt,) = state.attempts(db, incident.id)
        assert attempt.action == "docker_restart"
        wait_for(lambda: state.attempts(db, incident.id)[0].status == "succeeded", 15,
                 "the restart to be verified")
        assert httpx.get(f"{sim.url}/health").status_code == 200
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()
