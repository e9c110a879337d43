"""End to end: an unknown fatal crash in a followed log → incident with excerpt → model asked.

No signature knows the exception (a made-up class in the engine process); the
catch-all names it `unclassified_crash` (category `other`), the shipped rule
VLLMUnclassifiedCrash fires, the incident carries the excerpt on its timeline
and the diagnosis stage asks the model (a second simulator) for a runbook.
How soon (the design's 2 s, crash line to action) is bench/remediate.py's figure.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fixtures_e2e import log_sources_polled, wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.sim import start_sim

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
EXCEPTION = "(EngineCore_DP0 pid=4242) QuokkaLatticeError: lattice 7 lost its quokka"
CRASH = [
    "(EngineCore_DP0 pid=4242) Process EngineCore_DP0:",
    "(EngineCore_DP0 pid=4242) Traceback (most recent call last):",
    '(EngineCore_DP0 pid=4242)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/'
    'core.py", line 701, in run_engine_core',
    "(EngineCore_DP0 pid=4242)     engine_core.run_busy_loop()",
    '(EngineCore_DP0 pid=4242)   File "/opt/plugins/lattice.py", line 12, in step',
    "(EngineCore_DP0 pid=4242)     raise QuokkaLatticeError(f'lattice {n} lost its quokka')",
    EXCEPTION,
    "(APIServer pid=1) INFO:     Shutting down",
]


def _config(folder: Path, target_url: str, model_url: str, log: Path) -> Path:
    path = folder / "sentinel.yaml"
    path.write_text(
        f"database: sqlite:///{folder / 'sentinel.db'}\n"
        "listen: 127.0.0.1:0\n"
        f"rule_files: ['{ROOT / 'rules' / 'vllm.yaml'}']\n"
        "evaluation_interval: 250ms\n"
        "targets:\n"
        f"  - name: tpu-a\n    url: {target_url}\n    scrape_interval: 1s\n"
        "    scrape_timeout: 900ms\n"
        f"    logs: {{files: ['{log}'], poll_interval: 100ms}}\n"
        "diagnosis:\n"
        f"  endpoints:\n    - {{name: gemma-b, url: {model_url}, timeout: 5s}}\n"
        "  interval: 100ms\n  max_tokens: 512\n  retry: 1s\n"
    )
    return path


def _incident(db) -> int | None:
    found = [i for i in queries.list_incidents(db) if i.alertname == "VLLMUnclassifiedCrash"]
    return found[0].id if found else None


def _excerpt_on_timeline(db, incident: int) -> bool:
    detail = queries.get_incident(db, incident)
    return any(e.kind == "log_excerpt" and EXCEPTION in json.dumps(e.data)
               for e in detail.timeline)


def test_unknown_fatal_crash_opens_an_incident_and_asks_the_model(tmp_path) -> None:
    target, model = start_sim(), start_sim(max_model_len=8192)
    log_file = tmp_path / "vllm.log"
    log_file.write_text(
        '(APIServer pid=1) INFO:     10.0.0.7:5000 - "GET /health HTTP/1.1" 200 OK\n')
    app = App(load_config(_config(tmp_path, target.url, model.url, log_file)))
    app.start()
    try:
        # the source joins the file at its end; counters start at 0
        wait_for(lambda: log_sources_polled(app), 30, "the source to join the file at its end")
        db = app.pipeline.tracker.db
        with log_file.open("a") as f:
            f.write("".join(f"{line}\n" for line in CRASH))
        written = time.monotonic()
        incident = wait_for(lambda: _incident(db), 30, "the VLLMUnclassifiedCrash incident")
        wait_for(lambda: _excerpt_on_timeline(db, incident), 30,
                 "the crash excerpt on the incident's timeline")
        asked = wait_for(lambda: [b for b in list(model.chat_requests)
                                  if "QuokkaLatticeError" in json.dumps(b)], 30,
                         "a runbook request to the model with the excerpt")
        # The design's 2 s (crash line to action) is a latency figure: bench/remediate.py
        # measures it; on a loaded CI machine a wall-clock bound fails without a bug.
        took = time.monotonic() - written
        print(f"crash line written → incident, excerpt and model request: {took:.2f}s")
        assert "VLLMUnclassifiedCrash" in json.dumps(asked[0]) or "unclassified" in json.dumps(
            asked[0])
    finally:
        app.stop(2)
        target.stop()
        model.stop()
