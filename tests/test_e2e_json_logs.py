"""The daemon's own log tells the story, one JSON object a line (`--log-format json`):
an HBM OOM opens an incident, pages, is restarted warm, verified, and resolves, and
each step is a line with its incident, target and alertname as fields.

The story here pages at once (`notify.act_first.grace: 0s`): with act-first on, a fix
this quick pages nobody (tests/test_e2e_actfirst.py tells that story), and the page's
log lines are part of what this test reads."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import httpx
import pytest
from fixtures_e2e import bodies_with_status, wait_for
from test_remediate_e2e import _config, _simulated, sock_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def test_json_log_lines_tell_the_incident(tmp_path, sock_dir, sink) -> None:  # noqa: F811
    sim, sock, path, log = _simulated(tmp_path, sock_dir, warm=True)
    cfg = _config(tmp_path, sim, path, log, sink.url)
    cfg.write_text(cfg.read_text() + "notify:\n  act_first: {grace: 0s}\n")
    err = (tmp_path / "stderr.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c", str(cfg),
                             "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        started = wait_for(lambda: re.search(r"sentinel started: .* listening on (\S+?)\"",
                                             (tmp_path / "stderr.log").read_text()), 60,
                           "the daemon to start")
        # A file is joined at its end: a crash written before the first read is not news.
        wait_for(lambda: re.search(r'^sentinel_log_source_up\{[^}]*source="file:[^"]+"[^}]*\} 1',
                                   httpx.get(f"http://{started.group(1)}/metrics").text, re.M),
                 60, "the log source to join the file")
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        wait_for(lambda: bodies_with_status(sink, "resolved"), 60, "the resolved page")
        wait_for(lambda: "resolved page to oncall sent" in (tmp_path / "stderr.log").read_text(),
                 30, "the resolved page's log line")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        err.close()
        sock.stop()
        sim.stop()
    lines = [json.loads(raw) for raw in (tmp_path / "stderr.log").read_text().splitlines()]
    assert all({"time", "severity", "logger", "message"} <= line.keys() for line in lines)
    story = [line for line in lines if line.get("incident")]
    incident = story[0]["incident"]

    def one(**fields: object) -> dict:
        found = [x for x in story if all(x.get(k) == v for k, v in fields.items())]
        assert found, (fields, [x["message"] for x in story])
        return found[0]

    opened = one(state="open", alertname="VLLMHBMOutOfMemory", target="tpu-a")
    assert opened["incident"] == incident
    one(state="firing", alertname="VLLMHBMOutOfMemory", incident=incident)
    fired_page = one(receiver="oncall", outcome="sent", incident=incident)
    assert fired_page["message"].startswith("firing page")
    for phase in ("intent", "outcome", "verify"):
        line = one(outcome=phase, incident=incident, target="tpu-a")
        assert line["message"].startswith(f"incident {incident}: ")
    one(action="docker_restart", incident=incident)
    one(state="resolved", alertname="VLLMHBMOutOfMemory", incident=incident)
    resolved_page = [x for x in story if x.get("receiver") == "oncall"
                     and x["message"].startswith("resolved page")]
    assert resolved_page and resolved_page[0]["outcome"] == "sent"
    assert not [x for x in lines if x["severity"] in ("ERROR", "CRITICAL")], lines
