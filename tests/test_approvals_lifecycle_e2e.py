"""Approvals follow the step's life (issue 39, item 5), end to end through the API.

Before: once an approval was `done` or `running`, the step was never offered again
(`approvals.park` returned the old approval whatever its status): a failed approved
action was never retried, re-parked or paged; after kill -9 during an approved action
the approval stayed `running` for ever. Now:

- a failed approved attempt goes back through the guards: with attempts left it is
  parked again (a new approval, paged with the links), and runs once approved;
- with the ladder used up, on-call is paged that remediation gave up, as without approvals;
- kill -9 during an approved action: the restarted daemon reaps the attempt, marks the
  approval abandoned, and parks the step again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
from api_helpers import WRITE_TOKEN, auth
from fixtures_e2e import wait_for
from ha_helpers import Daemon

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents.db import Database
from sentinel.respond.remediate import state

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: kv
    rules:
      - alert: KVCacheHigh
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        labels: {severity: page}
"""

# The action: what it does is read from MODE at each run (ok, fail, hang).
SCRIPT = """#!/bin/sh
mode=$(cat MODE)
echo "$1 $mode $$" >> OUT
case "$mode" in
  fail) exit 1 ;;
  hang) exec sleep 60 ;;
esac
exit 0
"""


def _setup(tmp: Path, sim_url: str, hook: str, attempts: int) -> tuple[Path, Path]:
    """Config, rules and the action script; returns (config, mode file)."""
    (tmp / "rules.yaml").write_text(RULES)
    mode, out, script = tmp / "mode", tmp / "actions.log", tmp / "fix.sh"
    mode.write_text("ok")
    script.write_text(SCRIPT.replace("MODE", str(mode)).replace("OUT", str(out)))
    script.chmod(0o755)
    cfg = tmp / "base.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp / 'sentinel.db'}
rule_files: [rules.yaml]
evaluation_interval: 1s
probe_interval: 0s
targets:
  - {{name: gemma, url: '{sim_url}', scrape_interval: 500ms, scrape_timeout: 500ms}}
receivers:
  - name: oncall
    webhook: {{url: '{hook}', timeout: 2s}}
notify:
  interval: 200ms
  route: {{receiver: oncall, group_by: [alertname, target], group_wait: 0s,
          group_interval: 0s, repeat_interval: 1h}}
  act_first: {{grace: 0s}}   # each approval its own page here (test_e2e_actfirst folds them)
api:
  tokens:
    - {{name: oncall-lead, role: write, token: {WRITE_TOKEN}}}
remediation:
  command_allowlist: [{script}]
  breaker_failures: 10
  backoff: {{initial: 1s, max: 1s}}
  lease: 2s
  policies:
    - name: fix
      alerts: [KVCacheHigh]
      cooldown: 0s
      approval: required
      steps:
        - command: {{argv: [{script}, '{{target}}']}}
          verify: false
          timeout: 30s
          attempts: {attempts}
""")
    return cfg, mode


def _start(tmp: Path, sim, sink, attempts: int) -> tuple[App, Path, str]:
    cfg, mode = _setup(tmp, sim.url, sink.url, attempts)
    cfg.write_text(cfg.read_text() + "listen: 127.0.0.1:0\n")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address
    return app, mode, f"http://{host}:{port}"


def _approvals(url: str, status: str | None = None) -> list[dict]:
    q = f"?status={status}" if status else ""
    try:
        return httpx.get(f"{url}/api/v1/approvals{q}", timeout=5).json()["approvals"]
    except httpx.HTTPError:
        return []


def _url(d: Daemon) -> str:
    """The base URL of this start of `d`, once its log says where it listens."""
    wait_for(lambda: d.port, 60, "the daemon to log the port it listens on")
    return f"http://127.0.0.1:{d.port}"


def _pending(url: str, not_ids: tuple[int, ...] = ()) -> dict:
    return wait_for(lambda: next((a for a in _approvals(url, "pending")
                                  if a["id"] not in not_ids), None),
                    60, "an approval to be parked")  # type: ignore[return-value]


def _approve(url: str, approval_id: int) -> None:
    r = httpx.post(f"{url}/api/v1/approvals/{approval_id}/approve", headers=auth(WRITE_TOKEN),
                   timeout=5)
    assert r.status_code == 200 and r.json()["changed"] is True, r.text


def _status(url: str, approval_id: int) -> dict | None:
    return next((a for a in _approvals(url) if a["id"] == approval_id), None)


def _pages(sink, name: str) -> list[dict]:
    return [a for _, b, _ in list(sink.received) for a in b.get("alerts", [])
            if a["labels"].get("alertname") == name]


def _runs(tmp: Path) -> list[str]:
    out = tmp / "actions.log"
    return out.read_text().splitlines() if out.exists() else []


def test_a_failed_approved_attempt_is_parked_again_and_runs_once_approved(tmp_path, sim, sink):
    app, mode, url = _start(tmp_path, sim, sink, attempts=2)
    try:
        mode.write_text("fail")
        sim.set_state(kv_cache_usage=0.93)
        first = _pending(url)
        _approve(url, first["id"])
        done = wait_for(lambda: (a := _status(url, first["id"])) and a["status"] == "done" and a,
                        40, "the approved attempt to fail")
        assert done["detail"].startswith("failed")
        mode.write_text("ok")
        second = _pending(url, (first["id"],))  # back through the guards: parked again
        assert second["step"] == first["step"]
        wait_for(lambda: len(_pages(sink, "SentinelRemediationAwaitingApproval")) >= 2, 30,
                 "on-call to be paged about the second approval")
        _approve(url, second["id"])
        wait_for(lambda: (a := _status(url, second["id"])) and a["status"] == "done", 40,
                 "the second approved attempt to finish")
        attempts = state.attempts(app.pipeline.tracker.db, first["incident_id"])
        assert [a.status for a in attempts] == ["failed", "succeeded"]
        assert [r.split()[1] for r in _runs(tmp_path)] == ["fail", "ok"]
        assert _status(url, second["id"])["detail"].startswith("succeeded")
    finally:
        app.stop(2)


def test_failed_approved_attempts_that_use_up_the_ladder_page_gave_up(tmp_path, sim, sink):
    app, mode, url = _start(tmp_path, sim, sink, attempts=2)
    try:
        mode.write_text("fail")
        sim.set_state(kv_cache_usage=0.93)
        ids: tuple[int, ...] = ()
        for _ in range(2):  # both attempts of the step approved, both fail
            approval = _pending(url, ids)
            _approve(url, approval["id"])
            ids += (approval["id"],)
        page = wait_for(lambda: _pages(sink, "SentinelRemediationGaveUp"), 40,
                        "on-call to be paged that remediation gave up")[0]
        assert page["labels"]["reason"] == "gave_up"
        assert sorted(a["id"] for a in _approvals(url)) == sorted(ids)  # not parked again
        assert [r.split()[1] for r in _runs(tmp_path)] == ["fail", "fail"]
    finally:
        app.stop(2)


def test_kill_9_during_an_approved_action_abandons_the_approval_and_parks_again(
        tmp_path, sim, sink):
    _setup(tmp_path, sim.url, sink.url, attempts=2)
    mode = tmp_path / "mode"
    mode.write_text("hang")
    d = Daemon(tmp_path, "d", port=0).start()  # port 0: read back from its log at each start
    url = _url(d)
    try:
        sim.set_state(kv_cache_usage=0.93)
        first = _pending(url)
        _approve(url, first["id"])
        wait_for(lambda: _runs(tmp_path), 40, "the approved action to start")
        assert _status(url, first["id"])["status"] == "running"
        d.kill9()
        mode.write_text("ok")
        d.start()
        url = _url(d)
        second = _pending(url, (first["id"],))
        was = _status(url, first["id"])
        assert was["status"] == "done" and was["detail"].startswith("abandoned"), was
        _approve(url, second["id"])
        wait_for(lambda: (a := _status(url, second["id"])) and a["status"] == "done", 40,
                 "the re-parked action to run")
        db = Database(f"sqlite:///{tmp_path / 'sentinel.db'}")
        try:
            attempts = state.attempts(db, first["incident_id"])
            with db.session() as s:
                from sqlalchemy import text
                phases = [r[0] for r in s.execute(text(
                    "SELECT json_extract(data, '$.phase') FROM timeline_events "
                    "WHERE incident_id = :i ORDER BY id"), {"i": first["incident_id"]})]
        finally:
            db.dispose()
        assert [a.status for a in attempts] == ["failed", "succeeded"]
        assert attempts[0].detail.startswith("abandoned")
        assert "approval_abandoned" in phases
        assert phases.count("awaiting_approval") == 2
    finally:
        d.stop()
        for line in _runs(tmp_path):  # the killed daemon's action still sleeps
            pid = int(line.split()[2])
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
