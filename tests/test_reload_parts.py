"""A whole-config reload, in process: probes, log sources and remediation policies follow
the file, and an unchanged rule keeps its pending `for` (issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: g
    rules:
      - alert: Waiting
        expr: up >= 0
        for: 1h
"""
# `up >= 0`, not `up == 1`: a 200 ms scrape that times out on a loaded machine writes
# up 0, which must not end the pending alert; a stale marker (the scrape stopped) would.


def _write(folder: Path, sim_url: str, *, probe_a: bool, log: Path | None,
           policy: bool) -> Path:
    """Targets a and b on the simulator; a's probe and log, and a policy, as asked."""
    script = folder / "fix.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    probe = "probe: {interval: 200ms, timeout: 200ms, canary: false}"
    a = [f"  - name: a\n    url: '{sim_url}'\n    scrape_interval: 200ms\n"
         "    scrape_timeout: 200ms\n"]
    if probe_a:
        a.append(f"    {probe}\n")
    if log is not None:
        a.append(f"    logs: {{files: ['{log}'], poll_interval: 200ms}}\n")
    lines = [
        f"database: sqlite:///{folder / 'sentinel.db'}", "listen: 127.0.0.1:0",
        "rule_files: [rules.yaml]", "evaluation_interval: 200ms", "probe_interval: 0s",
        "targets:", "".join(a).rstrip("\n"),
        f"  - {{name: b, url: '{sim_url}', scrape_interval: 200ms, scrape_timeout: 200ms}}",
    ]
    if policy:
        lines += ["remediation:", f"  command_allowlist: [{script}]", "  policies:",
                  "    - name: fix", "      alerts: [Waiting]", "      steps:",
                  f"        - command: {{argv: [{script}]}}"]
    path = folder / "sentinel.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _active_at(app: App) -> dict[str, int]:
    assert app.pipeline is not None
    return {dict(a.labels)["target"]: a.active_at_ms for a in app.pipeline.rules.active_alerts()}


def _probed(app: App) -> set[str]:
    return {s.labels["target"] for m in app.metrics.registry.collect()
            if m.name == "sentinel_probes" for s in m.samples
            if s.name == "sentinel_probes_total" and s.value > 0}


def _log_sources_up(app: App) -> set[str]:
    return {s.labels["target"] for m in app.metrics.registry.collect()
            if m.name == "sentinel_log_source_up" for s in m.samples}


def test_probes_logs_and_policies_follow_the_file_and_pending_alerts_keep_for(
        tmp_path, sim):
    (tmp_path / "rules.yaml").write_text(RULES)
    log = tmp_path / "vllm.log"
    log.write_text("")
    path = _write(tmp_path, sim.url, probe_a=False, log=None, policy=False)
    app = App(load_config(path), loader=lambda: load_config(path), source=str(path))
    app.start()
    try:
        assert app.scrape_jobs is not None and app.pipeline is not None
        wait_for(lambda: set(_active_at(app)) == {"a", "b"}, 30, "both targets' pending alerts")
        before = _active_at(app)
        assert app.pipeline.remediator is None and not _probed(app)

        # Nothing was probed at start: the first probe comes with the reload.
        _write(tmp_path, sim.url, probe_a=True, log=log, policy=True)
        result = app.reload()
        assert result, result.message
        wait_for(lambda: _probed(app) == {"a"}, 30, "a probed")
        wait_for(lambda: "a" in _log_sources_up(app), 30, "a's log source polled")
        remediator = app.pipeline.remediator
        assert remediator is not None
        assert [p.name for p in remediator.engine.config.policies] == ["fix"]
        # Target a changed (probe, logs): its scrape and its pending `for` went on.
        assert _active_at(app) == before

        _write(tmp_path, sim.url, probe_a=False, log=log, policy=False)
        assert app.reload()
        assert app.scrape_jobs.get("probe:a") is None  # its probe turned off
        assert app.pipeline.remediator is None  # the policy went with the file
        assert _active_at(app) == before
    finally:
        app.stop(2)
