"""Issue 50: the GPU-fleet example, end to end, against simulators that serve like GPU
servers (`--gpus all`, NVIDIA_VISIBLE_DEVICES, a torch.compile cache, no XLA cache).

`deploy/examples/gpu-fleet.yaml` is loaded as shipped with its addresses changed (target
URLs, the Docker socket, the receivers' URLs, the listener and database) and, so the test
takes seconds, scrape and evaluation intervals of 1 s. An engine dies on gpu-a: the
restart is allowed (a GPU, warm), verified, and told once (one chat message, no page).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.demo import WebhookSink
from sentinel.incidents import queries
from sentinel.respond.remediate import state
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "gpu-fleet.yaml"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


@pytest.fixture
def chat() -> Iterator[WebhookSink]:
    s = WebhookSink().start()
    yield s
    s.stop()


def example_with_addresses(folder: Path, sims: list[SimServer], sock: str, chat: str,
                           pager: str) -> Path:
    """The example, its addresses pointed at loopback; 1 s intervals."""
    text = EXAMPLE.read_text()
    for i, sim in enumerate(sims):
        text = text.replace(f"http://10.0.1.1{i}:8000", sim.url)
    text = text.replace("listen: 127.0.0.1:9465", "listen: 127.0.0.1:0\n"
                        f"database: sqlite:///{folder / 'sentinel.db'}\n"
                        "scrape_interval: 1s\nevaluation_interval: 1s")
    text = text.replace("docker: [vllm]", f"docker: [vllm]\n      docker_socket: '{sock}'")
    text = text.replace("docker_restart: {container: vllm}",
                        f"docker_restart: {{container: vllm, socket: '{sock}', settle: 200ms}}")
    text = text.replace("url: ${SLACK_WEBHOOK_URL}", f"url: '{chat}'")
    text = text.replace("routing_key: ${PAGERDUTY_ROUTING_KEY}",
                        f"routing_key: test-key\n      url: '{pager}'")
    assert not re.search(r"10\.0\.1\.\d|\$\{", text), "an address was left unchanged"
    path = folder / "gpu-fleet.yaml"
    path.write_text(text)
    return path


def test_an_engine_death_on_a_gpu_server_is_restarted_verified_and_told_once(
        tmp_path, sock_dir, sink, chat) -> None:
    compiled = tmp_path / "vllm-cache"  # VLLM_CACHE_ROOT, bind-mounted: warm
    compiled.mkdir()
    (compiled / "torch_compile_cache.bin").write_bytes(b"\0" * 256)
    sims = [start_sim() for _ in range(3)]
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sims[0], ContainerSpec(accelerator="gpu", compile_cache=str(compiled),
                                                  release_s=0.1, warm_start_s=0.5), path)
    app = App(load_config(example_with_addresses(tmp_path, sims, path, chat.url, sink.url)))
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "gpu-a", "source": "docker:vllm"}) == 1,
            30, "the docker log source to follow the container")
        httpx.post(f"{sims[0].url}/sim/crash", json={"mode": "engine_dead"}).raise_for_status()

        (told,) = wait_for(lambda: list(chat.received), 90, "the fixed-by-Sentinel message")
        db = app.pipeline.tracker.db
        (incident,) = [i for i in queries.list_incidents(db) if i.alertname == "VLLMEngineDead"]
        detail = queries.get_incident(db, incident.id)
        assert detail.incident.status == "resolved"
        (attempt,) = wait_for(lambda: [a for a in state.attempts(db, incident.id)
                                       if a.status != "running"], 30, "the attempt to finish")
        assert attempt.status == "succeeded" and attempt.action == "docker_restart"
        assert attempt.data["accelerator"] == "gpu" and attempt.data["warm"] is True
        intent = next(e for e in detail.timeline if e.kind == "action"
                      and e.data.get("phase") == "intent")
        assert "torch.compile cache" in intent.data["plan"] and "XLA" not in intent.data["plan"]
        assert "expected time to serve 3m" in intent.data["plan"]
        assert len(sims[0].container.times("POST start")) == 1
        # Told once: one chat message, and the pager heard nothing.
        app.notifier.run_once()
        assert len(chat.received) == 1 and list(sink.received) == []
        assert "XLA" not in str(told[1])
    finally:
        app.stop(2)
        sock.stop()
        for sim in sims:
            sim.stop()
