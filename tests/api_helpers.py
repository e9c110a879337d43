"""Helpers for the API/page/MCP tests: a daemon that remediates an HBM OOM in the simulator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import SimServer, start_sim

READ_TOKEN = "read-token-0123456789abcdef"
WRITE_TOKEN = "write-token-0123456789abcdef"

RULES = """\
groups:
  - name: crashes
    interval: 200ms
    rules:
      - alert: VLLMHBMOutOfMemory
        expr: >-
          sum by (target) (increase(sentinel_log_signature_matches_total{category="hbm_oom"}[3s]))
          > 0
        labels: {severity: critical, category: hbm_oom}
        keep_firing_for: KEEP
        annotations: {summary: "TPU HBM exhausted on {{ $labels.target }}"}
"""


@dataclass
class Rig:
    """A running daemon with one simulated, containerised target."""

    app: App
    sim: SimServer
    sock: Any
    log: Path
    url: str

    def stop(self) -> None:
        self.app.stop(2)
        self.sock.stop()
        self.sim.stop()

    def crash(self) -> None:
        httpx.post(f"{self.sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()


def start_rig(tmp: Path, sock_dir: Path, hook: str, *, approval: str = "none",
              expiry: str = "15m", rules: str = RULES, tokens: bool = True,
              act_first: bool = False) -> Rig:
    cache = tmp / "xla"
    cache.mkdir()
    (cache / "jit_step_fn.bin").write_bytes(b"\0" * 512)
    log = tmp / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    sim = start_sim()
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), log_file=str(log),
                                              release_s=0.2, warm_start_s=0.3), path)
    # While an action waits for a person the crash must stay an open incident: without
    # keep_firing_for the alert resolves 3 s after the last crash line.
    (tmp / "rules.yaml").write_text(rules.replace("KEEP", "30s" if approval == "required"
                                                  else "0s"))
    api = (f"api:\n  tokens:\n    - {{name: grafana, role: read, token: {READ_TOKEN}}}\n"
           f"    - {{name: oncall-lead, role: write, token: {WRITE_TOKEN}}}\n") if tokens else ""
    cfg = tmp / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp / 'sentinel.db'}
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
notify:
  act_first: {{grace: {'2m' if act_first else '0s'}}}   # 0s: page at once, as API tests read
remediation:
  max_concurrent: 2
  policies:
    - name: restart-on-hbm-oom
      alerts: [VLLMHBMOutOfMemory]
      match: {{severity: critical}}
      cooldown: 1m
      approval: {approval}
      approval_expiry: {expiry}
      steps:
        - docker_restart: {{container: vllm, socket: '{path}', settle: 200ms}}
          timeout: 20s
          verify_deadline: 10s
{api}""")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    return Rig(app, sim, sock, log, f"http://{host}:{port}")


def wait_log_source(rig: Rig) -> None:
    from fixtures_e2e import wait_for

    wait_for(lambda: rig.app.metrics.registry.get_sample_value(
        "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{rig.log}"}) == 1,
        5, "the log source to join the file")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
