"""Crash line → restart request, and restart → verified, end to end on loopback.

Each run starts a simulator that is also a container (Docker-API unix
socket) and a daemon with a file log source and a docker_restart policy,
makes the simulator log an HBM OOM and stop serving, and reads the times
from the simulator's own event log (crash line written, POST stop
received) and from the attempt row (time to recovery). The design target:
crash line → restart request under 2 s.

    python bench/remediate.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from sentinel.config import load_config  # noqa: E402
from sentinel.daemon.app import App  # noqa: E402
from sentinel.respond.remediate import state  # noqa: E402
from sentinel.sim.container import ContainerSpec  # noqa: E402
from sentinel.sim.docker_socket import serve_container  # noqa: E402
from sentinel.sim.server import start_sim  # noqa: E402

RULES = """\
groups:
  - name: crashes
    interval: 200ms
    rules:
      - alert: VLLMHBMOutOfMemory
        expr: sum by (target) (increase(sentinel_log_signature_matches_total{category="hbm_oom"}[3s])) > 0
"""  # noqa: E501


def one_run(folder: Path) -> tuple[float, float]:
    """(crash line → POST stop, recovery time recorded) in seconds."""
    cache, log = folder / "xla", folder / "vllm.log"
    cache.mkdir()
    (cache / "graph.bin").write_bytes(b"g")
    log.write_text("")
    sim = start_sim()
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), log_file=str(log),
                                              release_s=0.2, warm_start_s=0.3),
                           str(folder / "d.sock"))
    (folder / "rules.yaml").write_text(RULES)
    (folder / "sentinel.yaml").write_text(f"""\
database: sqlite:///{folder / 's.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
targets:
  - {{name: tpu-a, url: '{sim.url}', logs: {{files: ['{log}'], poll_interval: 100ms}}}}
remediation:
  policies:
    - name: restart
      alerts: [VLLMHBMOutOfMemory]
      steps:
        - docker_restart: {{container: vllm, socket: '{folder / 'd.sock'}', settle: 200ms}}
          verify_deadline: 10s
""")
    app = App(load_config(folder / "sentinel.yaml"))
    app.start()
    try:
        time.sleep(0.5)  # the file source joins the file at its end
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done = [a for a in state.attempts(app.pipeline.tracker.db) if a.status != "running"]
            if done:
                break
            time.sleep(0.05)
        else:
            raise SystemExit("no attempt finished within 20 s")
        (logged,) = sim.container.times("logged")
        stop = sim.container.times("POST stop")[0]
        return stop - logged, (done[0].recovery_ms or 0) / 1000
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()


def main() -> None:
    """Run the scenario a few times and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    runs = p.parse_args().runs
    to_restart, recovery = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="snt") as d:
            a, b = one_run(Path(d))
        to_restart.append(a)
        recovery.append(b)
    print(f"crash line -> restart request: median {statistics.median(to_restart):.3f}s, "
          f"max {max(to_restart):.3f}s over {runs} runs (target < 2 s)")
    print(f"time to recovery (alert active -> verified): median "
          f"{statistics.median(recovery):.3f}s, max {max(recovery):.3f}s")


if __name__ == "__main__":
    main()
