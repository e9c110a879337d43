"""Issue 50: the GPU-fleet example, end to end, against simulators that serve like GPU
servers (`--gpus all`, NVIDIA_VISIBLE_DEVICES, a torch.compile cache, no XLA cache).

`deploy/examples/gpu-fleet.yaml` is loaded as shipped with its addresses changed (target
URLs, the Docker socket, the receivers' URLs, the listener and database) and, so the test
takes seconds, scrape and evaluation intervals of 1 s. An engine dies on gpu-a: the
restart is allowed (a GPU, warm), verified, and told once (one chat message, no page).
And a target whose past verified restarts were all slow (4 min to serve, written to the
daemon's database as the engine writes them) is refused by the example's policy narrowed
to 2 min, in the words every accelerator gets; the incident pages once, carrying the
refusal, and no request reaches the Docker socket.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from diagnose_helpers import open_incident
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.config.remediation import RemediationConfig
from sentinel.daemon.app import App
from sentinel.demo import WebhookSink
from sentinel.incidents import queries
from sentinel.incidents.db import Database
from sentinel.respond.remediate import state
from sentinel.respond.remediate.guards import Decision, Limits, Reason
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



SAME_WORDS = re.compile(r"expected time to serve 4m \(.+\) is more than policy "
                        r"restart-crashed-vllm allows \(2m\)")
DAY_MS = 86_400_000


def fast_only(path: Path) -> None:
    """The example's policy narrowed to fast restarts: 2 min at most to serve again, the
    configured GPU expectation 1 min (so only what Sentinel learned can refuse)."""
    text = path.read_text()
    for old, new in [("max_time_to_serve: 10m", "max_time_to_serve: 2m"),
                     ("  max_concurrent: 1", "  max_concurrent: 1\n"
                      "  restart_cost: {expect: {gpu: {warm: 1m, cold: 10m}}}")]:
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)


def slow_past_restarts(db: Database, cfg: RemediationConfig, target: str, now_ms: int) -> None:
    """Three verified warm restarts of `target` yesterday, each 4 min to serve, written as
    the engine writes them (claim, acted, finish with the verification's data)."""
    for n in range(3):
        at = now_ms - DAY_MS + n * 3_600_000
        incident = open_incident(db, target, now_ms=at)
        claim = state.Claim(incident, target, "restart-crashed-vllm", 3, since_ms=at)
        _, attempt = state.claim(db, claim, lambda *_: Decision(True, Reason.ALLOWED), at,
                                 "docker_restart", False,
                                 {"accelerator": "gpu", "warm": True,
                                  "warm_why": "torch.compile cache present"})
        assert attempt is not None
        state.mark_acted(db, attempt, at + 1000)
        limits = Limits(cfg.dry_run, cfg.max_concurrent, cfg.max_concurrent_percent,
                        cfg.breaker_failures, cfg.backoff)
        state.finish(db, attempt, True, "verified", at + 241_000, limits,
                     recovery_ms=241_000, data={"verify": "serving", "served_after_s": 240.0})


def test_a_gpu_target_whose_past_restarts_were_slow_is_refused_by_a_fast_only_policy(
        tmp_path, sock_dir, sink, chat) -> None:
    compiled = tmp_path / "vllm-cache"
    compiled.mkdir()
    (compiled / "torch_compile_cache.bin").write_bytes(b"\0" * 256)
    sims = [start_sim() for _ in range(3)]
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sims[0], ContainerSpec(accelerator="gpu", compile_cache=str(compiled),
                                                  release_s=0.1, warm_start_s=0.5), path)
    config = example_with_addresses(tmp_path, sims, path, chat.url, sink.url)
    fast_only(config)
    cfg = load_config(config)
    db = Database(cfg.database)  # the daemon's own database, written before it starts
    db.upgrade_in_child()
    slow_past_restarts(db, cfg.remediation, "gpu-a", int(time.time() * 1000))
    app = App(cfg)
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "gpu-a", "source": "docker:vllm"}) == 1,
            30, "the docker log source to follow the container")
        httpx.post(f"{sims[0].url}/sim/crash", json={"mode": "engine_dead"}).raise_for_status()

        (page,) = wait_for(lambda: list(sink.received), 90, "the incident's page")
        (incident,) = [i for i in queries.list_incidents(db) if i.alertname == "VLLMEngineDead"]
        timeline = queries.get_incident(db, incident.id).timeline
        (refused,) = [e for e in timeline if e.kind == "action"
                      and (e.data or {}).get("reason") == "cold_cache"]
        assert SAME_WORDS.search(refused.message), refused.message
        assert "learned: median of its last 3 verified warm restarts" in refused.message
        assert "XLA" not in refused.message
        # The page is the incident's, and it carries the refusal.
        assert f"/incidents/{incident.id}" in str(page[1])
        assert SAME_WORDS.search(str(page[1])), page[1]
        assert state.attempts(db, incident.id) == []
        # No restart reached the Docker socket, and nothing paged twice.
        app.notifier.run_once()
        assert sims[0].container.times("POST") == []
        assert len(sink.received) == 1
    finally:
        app.stop(2)
        sock.stop()
        for sim in sims:
            sim.stop()
