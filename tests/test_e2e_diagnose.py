"""End to end: a crash line in a followed log → incident → a schema-valid model runbook.

The daemon runs the shipped rules against one simulator as its target and a
second simulator as the model endpoint (max_model_len 4096, which rejects a
longer request with vLLM's 400). A canary secret is planted in the crash log.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from diagnose_helpers import CRASH_LOG, runbooks
from fixtures_e2e import bodies_with_status, log_sources_polled, wait_for
from sqlalchemy import MetaData, select

from sentinel.cli import main
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.respond.diagnose.schema import parse_runbook
from sentinel.sim import start_sim
from sentinel.sim.tokens import ChatMessage, count_chat

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
CANARY = "hf_CanaryE2ECanaryE2ECanaryE2E42"
# Issue 10: canaries no host list knows, recognised only by their shape.
PATH_CANARY = "Cn4ryPathT0ken9Xq7Wm2Lk5Vb8"
QUERY_CANARY = "Qc4n4ryQu3ryV4lu3Zp8Ty6Rd2"
ENTROPY_CANARY = "e7Kq9Zt2Lm4Xw8Rv1Nb6Hc3Jd5"
SHAPE_CANARIES = (PATH_CANARY, QUERY_CANARY, ENTROPY_CANARY)
SHAPE_LINES = (
    "(APIServer pid=1) WARNING notify failed: POST "
    f"https://chat.selfhosted.example/api/v4/notify/{PATH_CANARY} 502",
    "(APIServer pid=1) WARNING GET "
    f"http://10.0.0.7:9000/upload?sig={QUERY_CANARY}&part=2 timed out",
    f"(APIServer pid=1) INFO loaded credentials token={ENTROPY_CANARY} for the model hub",
)


def _config(folder: Path, target_url: str, model_url: str, hook_url: str, log: Path) -> Path:
    path = folder / "sentinel.yaml"
    path.write_text(
        f"database: sqlite:///{folder / 'sentinel.db'}\n"
        "listen: 127.0.0.1:0\n"
        f"rule_files: ['{ROOT / 'rules' / 'vllm.yaml'}']\n"
        "evaluation_interval: 1s\n"
        "targets:\n"
        f"  - name: tpu-a\n    url: {target_url}\n    scrape_interval: 1s\n"
        "    scrape_timeout: 900ms\n"
        f"    logs: {{files: ['{log}'], poll_interval: 200ms}}\n"
        "receivers:\n"
        f"  - name: oncall\n    webhook: {{url: '{hook_url}'}}\n"
        "diagnosis:\n"
        f"  endpoints:\n    - {{name: gemma-b, url: {model_url}, timeout: 5s}}\n"
        "  interval: 300ms\n  max_tokens: 512\n  retry: 1s\n"
    )
    return path


def _hbm_incident(db) -> int | None:
    found = [i for i in queries.list_incidents(db) if i.alertname == "VLLMHBMOutOfMemory"]
    return found[0].id if found else None


def _db_text(db) -> str:
    meta = MetaData()
    meta.reflect(db.engine)
    with db.engine.connect() as conn:
        # tuple(row): a Row's own repr cuts long values ("... characters truncated ..."),
        # which would hide a secret in a long excerpt from the check.
        return "\n".join(repr(tuple(row)) for table in meta.sorted_tables
                         for row in conn.execute(select(table)))


def test_oom_incident_gets_a_model_runbook_and_no_secret_leaks(tmp_path, sink, caplog,
                                                              capsys) -> None:
    caplog.set_level(logging.DEBUG)
    target, model = start_sim(), start_sim(max_model_len=4096)
    log_file = tmp_path / "vllm.log"
    log_file.write_text(CRASH_LOG[0] + "\n")
    crash = [*CRASH_LOG[1:3], f"(APIServer pid=1) INFO HF_TOKEN={CANARY}", *SHAPE_LINES,
             *CRASH_LOG[3:]]
    cfg = _config(tmp_path, target.url, model.url, sink.url, log_file)
    app = App(load_config(cfg))
    app.start()
    try:
        wait_for(lambda: log_sources_polled(app), 30, "the source to join the file at its end")
        with log_file.open("a") as f:
            f.write("".join(f"{line}\n" for line in crash))
        db = app.pipeline.tracker.db
        incident = wait_for(lambda: _hbm_incident(db), 20, "the HBM OOM incident")
        (data,) = wait_for(lambda: [d for d in runbooks(db, incident)
                                    if d["source"] == "model"], 15, "the model runbook")
        assert data["validated"] is True
        parse_runbook(json.dumps(data["runbook"]))
        bodies = list(model.chat_requests)
        assert bodies, "the model endpoint was asked"
        for body in bodies:
            messages = [ChatMessage(m["role"], m["content"]) for m in body["messages"]]
            assert count_chat(messages) + body["max_tokens"] <= model.max_model_len
        pages = [b for _, b in bodies_with_status(sink, "firing")
                 if b["alerts"][0]["labels"]["alertname"] == "VLLMHBMOutOfMemory"]
        assert pages and "HBM" in pages[0]["alerts"][0]["annotations"]["runbook"]
    finally:
        app.stop(2)
        target.stop()
        model.stop()

    prompts, stored = json.dumps(bodies), _db_text(db)
    for canary in (CANARY, *SHAPE_CANARIES):
        assert canary not in prompts
        assert canary not in stored
        assert canary not in caplog.text
    # The lines themselves did reach the excerpt and the prompt, redacted.
    for kept in ("https://chat.selfhosted.example/api/v4/notify/<redacted> 502",
                 "upload?sig=<redacted>&part=2", "token=<redacted> for the model hub"):
        assert kept in stored and kept in prompts

    # By hand: `sentinel diagnose` adds another runbook; `incidents show` prints it.
    model = start_sim(port=int(model.url.rsplit(":", 1)[1]))
    try:
        capsys.readouterr()
        assert main(["diagnose", "-c", str(cfg), str(incident)]) == 0
        assert "Summary:" in capsys.readouterr().out
    finally:
        model.stop()
    assert main(["incidents", "show", "-c", str(cfg), str(incident)]) == 0
    shown = capsys.readouterr().out
    assert "runbook from" in shown and "> Steps:" in shown
    assert len([d for d in runbooks(db, incident) if d["source"] == "model"]) == 2
    for canary in (CANARY, *SHAPE_CANARIES):
        assert canary not in shown
