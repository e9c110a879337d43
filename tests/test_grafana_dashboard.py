"""The shipped Grafana dashboard reads only what Sentinel exposes: every expression
parses, and every metric it names is declared on a running daemon's /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import promql_parser
import pytest
from fixtures_e2e import wait_for, write_config
from ha_helpers import Daemon

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "sentinel.json"
NAME = re.compile(r"\b((?:sentinel|process)_[a-z_]+)\b")

pytestmark = pytest.mark.integration


def _exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def test_every_expression_parses() -> None:
    exprs = _exprs()
    assert len(exprs) > 15
    for expr in exprs:
        promql_parser.parse(expr)  # raises on a syntax error


def _declared(metrics_text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^# TYPE (\S+) \S+$", metrics_text, re.M)}


def test_every_metric_is_exposed_by_the_daemon(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, [("idle", "http://127.0.0.1:9")], "http://127.0.0.1:9/hook",
                       "groups: []\n", listen="127.0.0.1:0")
    with cfg.open("a") as f:  # a policy, so the remediation metrics are registered too
        f.write("remediation:\n  command_allowlist: [/bin/true]\n  policies:\n"
                "    - {name: p, alerts: [Watchdog], steps: [{command: {argv: [/bin/true]}}]}\n")
    # Its log to a file, the port read back from it (ha_helpers.Daemon): a pipe read line by
    # line never times out when the daemon is slow to start, and fills up once not read.
    daemon = Daemon(tmp_path, "daemon", config=cfg).start()
    try:
        wait_for(lambda: daemon.port, 60, "the daemon to say where it listens")
        text = httpx.get(f"http://127.0.0.1:{daemon.port}/metrics", timeout=5).text
    finally:
        daemon.stop()
    declared = _declared(text)
    wanted = {m for e in _exprs() for m in NAME.findall(e)}
    # A counter is declared without `_total`, a histogram without `_bucket`.
    missing = sorted(n for n in wanted if n not in declared
                     and re.sub(r"_(bucket|count|sum|total)$", "", n) not in declared)
    assert not missing, f"the dashboard reads metrics Sentinel does not expose: {missing}"


def test_every_query_returns_data_on_a_fresh_install(tmp_path: Path) -> None:
    """A fresh daemon (the shipped rules, one simulated target, no receivers, no
    remediation, no log sources) scraped by a real Prometheus: every panel's query
    answers with a series, so no panel of a fresh install reads "No data"."""
    from fixtures_prometheus import Prometheus, prometheus_binary

    from sentinel.sim.server import start_sim

    prometheus_binary()
    sim = start_sim()
    config = tmp_path / "sentinel.yaml"
    config.write_text(f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:0\n"
                      f"targets:\n  - name: sim-a\n    url: {sim.url}\n")
    daemon = Daemon(tmp_path, "daemon", config=config).start()
    prom = None
    try:
        wait_for(lambda: daemon.port, 120, "the daemon to say where it listens")
        prom = Prometheus(tmp_path, {"sentinel": f"127.0.0.1:{daemon.port}"}, interval="1s")
        prom.start()
        url = prom.url
        missing = _exprs()

        def answered(expr: str) -> bool:
            # [5m] and [1h] windows read as 30 s: two scrapes of Sentinel are enough.
            short = re.sub(r"\[(5m|1h)\]", "[30s]", expr)
            body = httpx.get(f"{url}/api/v1/query", params={"query": short}, timeout=30).json()
            return bool(body["data"]["result"])

        def all_answer() -> bool:
            nonlocal missing
            missing = [e for e in missing if not answered(e)]
            return not missing

        try:
            wait_for(all_answer, 180, "every dashboard query to answer")
        except AssertionError:
            raise AssertionError(f"queries without data on a fresh install: {missing}") from None
    finally:
        if prom is not None:
            prom.stop()
        daemon.stop()
        sim.stop()
