"""Metrics a rule needs must exist: names read from rules, renames, the daemon check, --scrape."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.checks import check_config
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.promql.compile import compile_expr
from sentinel.rules.loader import load_rule_files
from sentinel.rules.metriccheck import (
    MissingMetric,
    describe,
    find_missing,
    rule_requirements,
    selected_names,
)
from sentinel.sim.server import start_sim

REPO = Path(__file__).resolve().parent.parent
OLD_KV_RULE = """\
groups:
  - name: legacy
    rules:
      - alert: OldKVCacheFull
        expr: max by (target) (vllm:gpu_cache_usage_perc) > 0.9
        for: 1m
"""


@pytest.mark.parametrize(("expr", "groups"), [
    ("up == 0", [{"up"}]),
    ("max(vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc) > 0.85",
     [{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}]),
    ("absent(vllm:num_requests_running)", []),
    ("rate(a_total[5m]) / rate(b_total[5m])", [{"a_total"}, {"b_total"}]),
    ("(a > 0 and b > 0) or c", [{"a"}, {"b"}, {"c"}]),  # not a simple fallback
    ("histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m]) or rate(y_bucket[5m])))",
     [{"x_bucket", "y_bucket"}]),
    ('{__name__=~"vllm:.*"}', []),  # no name to check
])
def test_selected_names(expr, groups):
    assert selected_names(compile_expr(expr)) == [frozenset(g) for g in groups]


def test_renames_name_their_replacement_with_the_suffix_kept():
    assert describe("R", "vllm:gpu_cache_usage_perc").replacement == "vllm:kv_cache_usage_perc"
    assert describe("R", "vllm:time_per_output_token_seconds_bucket").replacement == (
        "vllm:inter_token_latency_seconds_bucket")
    assert describe("R", "vllm:gpu_prefix_cache_hits_total").replacement == (
        "vllm:prefix_cache_hits_total")
    assert describe("R", "vllm:num_requests_swapped").note.startswith("removed")
    assert describe("R", "vllm:made_up").message() == (
        "rule R selects vllm:made_up, which no target exposes")


def test_find_missing_skips_own_series_and_fallbacks():
    groups = load_rule_files([str(REPO / "rules" / "vllm.yaml")])
    present = {"vllm:kv_cache_usage_perc"}.__contains__
    missing = find_missing(rule_requirements(groups), present)
    names = {m.metric for m in missing}
    assert "vllm:gpu_cache_usage_perc" not in names  # its fallback is present
    assert not any(n.startswith("sentinel_") or n == "up" for n in names)
    assert "vllm:engine_sleep_state" not in names  # optional: servers without sleep mode
    assert MissingMetric("VLLMRequestsQueued", "vllm:num_requests_waiting") in missing


def _config(tmp_path: Path, url: str, rules: list[str], scrape: str = "100ms") -> Path:
    (tmp_path / "old.yaml").write_text(OLD_KV_RULE)
    path = tmp_path / "sentinel.yaml"
    path.write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\n"
        "listen: 127.0.0.1:0\n"
        f"rule_files: [{', '.join(rules)}]\n"
        "evaluation_interval: 200ms\n"
        "probe_interval: 0s\n"
        "targets:\n"
        f"  - {{name: gemma, url: '{url}', scrape_interval: {scrape}, scrape_timeout: {scrape}}}\n")
    return path


def _checks_recorded(app: App) -> int:
    """Samples of sentinel_rule_missing_metrics in the store: one per check that found it."""
    from sentinel.daemon.metriccheckjob import SERIES
    from sentinel.model import METRIC_NAME
    from sentinel.store import Matcher

    assert app.pipeline is not None
    return sum(len(s.ts) for s in app.pipeline.store.select(
        [Matcher(METRIC_NAME, "=", SERIES)], 0, 2**62))


def test_daemon_reports_a_renamed_metric_once_with_its_replacement(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sentinel.daemon.metriccheckjob")
    sim = start_sim()  # exposes only the current names
    app = App(load_config(_config(tmp_path, sim.url,
                                  ["old.yaml", str(REPO / "rules" / "vllm.yaml")])))
    app.start()
    try:
        expected = MissingMetric("OldKVCacheFull", "vllm:gpu_cache_usage_perc",
                                 "vllm:kv_cache_usage_perc")
        wait_for(lambda: app.metric_check.missing, 60, "the missing-metric report")
        assert app.metric_check.missing == [expected]
        # The shipped alert fires on the series (no `for`).
        wait_for(lambda: [a for a in app.pipeline.rules.active_alerts()
                          if a.name == "SentinelRuleMetricMissing"
                          and a.state.value == "firing"], 60, "SentinelRuleMetricMissing")
        alert = next(a for a in app.pipeline.rules.active_alerts()
                     if a.name == "SentinelRuleMetricMissing")
        assert dict(alert.labels)["replacement"] == "vllm:kv_cache_usage_perc"
        assert "use vllm:kv_cache_usage_perc" in dict(alert.annotations)["description"]
        # More checks run (each adds a sample to the series): still reported only once.
        checked = _checks_recorded(app)
        wait_for(lambda: _checks_recorded(app) >= checked + 3, 60, "three more checks")
    finally:
        app.stop(2)
        sim.stop()
    logged = [r.getMessage() for r in caplog.records if "gpu_cache_usage_perc" in r.getMessage()]
    assert logged == [expected.message()]
    assert "vllm renamed it, use vllm:kv_cache_usage_perc" in logged[0].lower()


def test_check_config_scrape_exits_nonzero_when_a_rule_would_be_blind(tmp_path):
    sim = start_sim()
    try:
        # One scrape each (`--scrape`): 100 ms timed out on a loaded machine.
        blind = _config(tmp_path, sim.url, ["old.yaml", str(REPO / "rules" / "vllm.yaml")], "10s")
        out = subprocess.run([sys.executable, "-m", "sentinel", "check", "config", "--scrape",
                              str(blind)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out.stdout + out.stderr
        assert ("BLIND: rule OldKVCacheFull selects vllm:gpu_cache_usage_perc, which no target "
                "exposes: vLLM renamed it, use vllm:kv_cache_usage_perc") in out.stderr
        # The shipped rules alone see everything they need on the simulator.
        fine = _config(tmp_path, sim.url, [str(REPO / "rules" / "vllm.yaml")], "10s")
        assert check_config(str(fine), sys.stdout, sys.stderr, scrape=True) == 0
        # Without --scrape, the blind rule passes (what issue 12 found).
        assert check_config(str(blind), sys.stdout, sys.stderr) == 0
    finally:
        sim.stop()


def test_check_config_scrape_fails_when_no_target_answers(tmp_path, capsys):
    path = _config(tmp_path, "http://127.0.0.1:9", [str(REPO / "rules" / "vllm.yaml")])
    assert check_config(str(path), sys.stdout, sys.stderr, scrape=True) == 1
    assert "no target could be scraped" in capsys.readouterr().err


def _job_over(store, groups):  # noqa: ANN001, ANN202
    from prometheus_client import CollectorRegistry

    from sentinel.daemon.metriccheckjob import MetricCheckJob
    from sentinel.promql import Engine

    return MetricCheckJob(lambda: groups, store, Engine(store), CollectorRegistry(), 5_000,
                          lambda: 0)


def _scrape(store, target: str, t: int, up: bool, names: tuple[str, ...]) -> None:  # noqa: ANN001
    from sentinel.model import METRIC_NAME, STALE_NAN, labels_of

    store.add(labels_of({METRIC_NAME: "up", "target": target}), t, 1.0 if up else 0.0)
    for name in names:
        store.add(labels_of({METRIC_NAME: name, "target": target}), t, 1.0 if up else STALE_NAN)


def test_a_down_target_is_not_a_missing_metric():
    """Issue 48: the only server crashed; its metrics are stale, not "missing" (no page)."""
    from sentinel.rules.loader import RuleGroup, make_rule
    from sentinel.store import MemoryStore

    groups = [RuleGroup("g", (make_rule("Sleeping", "vllm:engine_sleep_state_x > 0"),
                              make_rule("Full", "vllm:kv_cache_usage_perc > 0.9"),
                              make_rule("Typo", "vllm:num_request_waiting > 1")))]
    store = MemoryStore(retention_ms=3_600_000)
    job = _job_over(store, groups)
    both = ("vllm:kv_cache_usage_perc", "vllm:engine_sleep_state_x")
    t = 1_000_000
    for i in range(3):  # a and b answer
        _scrape(store, "a", t + i * 5_000, True, both)
        _scrape(store, "b", t + i * 5_000, True, ("vllm:kv_cache_usage_perc",))
    t += 15_000
    assert [m.rule for m in job.check(t)] == ["Typo"]  # never exposed by anyone: missing
    # a goes down (for 10 minutes, past the 5-minute window): what only a exposed is not
    # missing while a is down; the typo still is.
    for i in range(120):
        _scrape(store, "a", t + i * 5_000, False, both)
        _scrape(store, "b", t + i * 5_000, True, ("vllm:kv_cache_usage_perc",))
    t += 600_000
    assert [m.rule for m in job.check(t)] == ["Typo"]
    # Every target down: nothing new is judged, the last judgement stands.
    for i in range(120):
        _scrape(store, "a", t + i * 5_000, False, both)
        _scrape(store, "b", t + i * 5_000, False, ("vllm:kv_cache_usage_perc",))
    t += 600_000
    assert [m.rule for m in job.check(t)] == ["Typo"]
    # All back, and a no longer exposes the sleep metric (a vLLM upgrade): now it is missing.
    for i in range(3):
        _scrape(store, "a", t + i * 5_000, True, ("vllm:kv_cache_usage_perc",))
        _scrape(store, "b", t + i * 5_000, True, ("vllm:kv_cache_usage_perc",))
    t += 10_000
    assert [m.rule for m in job.check(t)] == ["Sleeping", "Typo"]
