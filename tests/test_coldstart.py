"""A cold start noticed while it happens, whoever started the server (issue 50)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for

from sentinel.collect.coldstart import ColdStarts
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.model import LogEntry
from sentinel.sim.container import ContainerSpec
from sentinel.sim.crashlog import start_lines
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

T0 = 1_800_000_000_000
WARM_MS = 60_000


def lines(target: str, t_ms: int, texts: list[str]) -> list[LogEntry]:
    return [LogEntry(target, "file:/v.log", t_ms, text) for text in texts]


def test_compile_lines_make_a_start_cold_at_once_and_once() -> None:
    cs = ColdStarts(lambda t: WARM_MS)
    cs.saw(lines("gpu-a", T0, start_lines("gpu", False, 7, now=T0 / 1000)))
    # A tensor-parallel worker names the platform too, a moment later: the same start.
    cs.saw(lines("gpu-a", T0 + 1_500, ["(VllmWorker rank=1 pid=9) INFO 12-07 10:00:02 "
                                       "[__init__.py:244] Automatically detected platform cuda."]))
    (notice,) = cs.tick(T0 + 2_000)
    assert notice.target == "gpu-a" and notice.started_ms == T0
    assert "Compiling a graph for dynamic shape" in notice.evidence
    assert cs.tick(T0 + 3_000) == []
    assert cs.samples(["gpu-a"])[0][1] == 1.0
    cs.saw(lines("gpu-a", T0 + 90_000, ["(APIServer pid=1) INFO:     Application startup "
                                         "complete."]))
    assert cs.samples(["gpu-a"])[0][1] == 0.0


def test_a_warm_start_that_serves_in_time_is_not_cold() -> None:
    cs = ColdStarts(lambda t: WARM_MS)
    cs.saw(lines("gpu-a", T0, start_lines("gpu", True, 7)))
    assert cs.tick(T0 + 30_000) == []
    cs.saw(lines("gpu-a", T0 + 40_000, ["INFO:     Application startup complete."]))
    assert cs.tick(T0 + 10 * WARM_MS) == []


def test_no_serving_after_the_expected_warm_time_is_cold() -> None:
    cs = ColdStarts(lambda t: WARM_MS)
    cs.saw(lines("tpu-a", T0, start_lines("tpu", True, 7)))  # a warm TPU start compiles nothing
    assert cs.tick(T0 + WARM_MS) == []
    (notice,) = cs.tick(T0 + WARM_MS + 1_000)
    assert "not serving 61s after the start (expected warm: 60s)" in notice.evidence


def test_cache_files_written_during_a_start_are_cold() -> None:
    cs = ColdStarts(lambda t: 10 * WARM_MS)
    cs.cache_files("tpu-a", 0)
    cs.saw(lines("tpu-a", T0, ["INFO 12-07 10:00:01 [__init__.py:244] Automatically detected "
                               "platform tpu."]))
    cs.cache_files("tpu-a", 0)
    assert cs.tick(T0 + 5_000) == []
    cs.cache_files("tpu-a", 12)
    (notice,) = cs.tick(T0 + 15_000)
    assert "cache files being written (0 → 12 in the XLA cache)" in notice.evidence


# -- end to end: a person restarts the server, cold --------------------------------------------


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


@pytest.mark.integration
def test_a_cold_restart_nobody_asked_sentinel_for_is_noticed_within_60s(
        tmp_path, sock_dir, sink) -> None:
    compiled = tmp_path / "vllm-cache"
    compiled.mkdir()  # empty: the next start compiles
    log = tmp_path / "vllm.log"
    log.write_text("")
    sim = start_sim()
    sock_path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(accelerator="gpu", compile_cache=str(compiled),
                                              log_file=str(log), cold_start_s=300), sock_path)
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp_path / 'sentinel.db'}
listen: 127.0.0.1:0
scrape_interval: 1s
evaluation_interval: 1s
targets:
  - name: gpu-a
    url: {sim.url}
    accelerator: gpu
    logs: {{files: ['{log}'], poll_interval: 100ms}}
receivers:
  - name: oncall
    webhook: {{url: '{sink.url}', timeout: 2s}}
notify:
  route: {{receiver: oncall, group_wait: 0s, group_interval: 1s}}
remediation:
  policies:
    - name: gpu-watch               # acts on nothing here; pages a cold start
      alerts: [VLLMContextLengthExceeded]
      targets: [gpu-a]
      page_on_cold_start: true
      steps:
        - docker_restart: {{container: vllm, socket: '{sock_path}'}}
""")
    app = App(load_config(cfg))
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "gpu-a", "source": f"file:{log}"}) == 1,
            30, "the log source to follow the file")
        db = app.pipeline.tracker.db
        # The engine dies (no policy acts on it): an open incident.
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "engine_dead"}).raise_for_status()
        wait_for(lambda: [i for i in queries.list_incidents(db)
                          if i.alertname == "VLLMEngineDead" and i.status == "open"],
                 60, "the crash's incident")
        # A person starts it again, by hand, through Docker: a cold start.
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock_path)) as docker:
            assert docker.post("http://docker/containers/vllm/start").status_code == 204
        (started,) = sim.container.times("start")

        def noted():  # noqa: ANN202
            inc = next(i for i in queries.list_incidents(db) if i.alertname == "VLLMEngineDead")
            return [e for e in queries.get_incident(db, inc.id).timeline
                    if e.kind == "action" and e.data.get("phase") == "cold_start"]
        (note,) = wait_for(noted, 90, "the cold start on the incident")
        # Noticed on Sentinel's clock within 60 s of the start (the line's own time).
        took_ms = note.data["noticed_ms"] - note.data["started_ms"]
        print(f"\ncold start noticed {took_ms / 1000:.1f}s after its start line")
        assert 0 <= took_ms < 60_000
        assert abs(note.data["started_ms"] / 1000 - started) < 5
        assert "Compiling a graph" in note.data["evidence"]
        # The policy says so: a page, naming the cold start.
        pages = wait_for(lambda: [b for _, b, _ in list(sink.received) if any(
            a["labels"].get("alertname") == "SentinelColdStart" for a in b.get("alerts", []))],
            60, "the cold start's page")
        assert "cold start of gpu-a" in str(pages[0])
        # And the shipped rule fires on the series, from the start's own minute.
        cold = wait_for(lambda: [a for a in app.pipeline.rules.active_alerts()
                                 if a.name == "VLLMColdStart"], 60, "VLLMColdStart")
        assert cold[0].active_at_ms - note.data["started_ms"] < 60_000
        assert not sim.container.times("serving")  # still compiling: noticed while it happens
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()
