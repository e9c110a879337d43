"""The shipped fleet dashboard reads data through Sentinel: every query of
deploy/grafana/fleet.json, run as Grafana runs it (a range query on Sentinel's
listener), returns a series with a value against simulated vLLM targets in two
pools; its variables list the pools and targets, and its incident annotations
read rows with the columns the dashboard names."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for
from ha_helpers import Daemon

from sentinel.api.openapi import openapi_document
from sentinel.sim.server import SimServer, start_sim

ROOT = Path(__file__).resolve().parent.parent
FLEET = ROOT / "deploy" / "grafana" / "fleet.json"
POOLS = {"sim-a": "spot", "sim-b": "reserved"}
# A rule that opens an incident at once on one target: the annotation has something to show.
INCIDENT_RULE = """\
groups:
  - name: dashboard-test
    interval: 1s
    rules:
      - alert: DashboardTestIncident
        expr: up{target="sim-a"} == 1
        labels: {severity: info}
        annotations: {summary: "an incident for the dashboard's annotations"}
"""

pytestmark = pytest.mark.integration


def _doc() -> dict:
    return json.loads(FLEET.read_text())


def _queries() -> list[str]:
    return [t["expr"] for p in _doc()["panels"] for t in p.get("targets", [])]


def grafana_expr(expr: str) -> str:
    """The expression as Grafana sends it with every variable at "All"."""
    return (expr.replace("$__rate_interval", "1m").replace('"$target"', '".*"')
            .replace('"$pool"', '".*"'))


def test_the_fleet_dashboard_covers_what_the_issue_asks() -> None:
    text = " ".join(_queries())
    for metric in ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting",
                   "vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_preemptions_total",
                   'finished_reason=~"abort|error"'):
        assert metric in text
    assert all("pool" in q and "target" in q for q in _queries())
    (annotation,) = _doc()["annotations"]["list"]
    assert annotation["target"]["url"] == "/api/v1/annotations"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Daemon, list[SimServer]]]:
    sims = [start_sim() for _ in POOLS]
    for s in sims:
        httpx.post(f"{s.url}/sim/state", json={"load_rps": 20}, timeout=5).raise_for_status()
    (tmp_path / "incident.yaml").write_text(INCIDENT_RULE)
    lines = [f"database: sqlite:///{tmp_path / 'sentinel.db'}", "listen: 127.0.0.1:0",
             f"rule_files: ['{ROOT / 'rules' / 'vllm.yaml'}', '{ROOT / 'rules' / 'sentinel.yaml'}',"
             " incident.yaml]",
             "evaluation_interval: 1s", "scrape_interval: 1s", "targets:"]
    for (name, pool), s in zip(POOLS.items(), sims, strict=True):
        lines += [f"  - name: {name}", f"    url: {s.url}", f"    labels: {{pool: {pool}}}"]
    config = tmp_path / "sentinel.yaml"
    config.write_text("\n".join(lines) + "\n")
    daemon = Daemon(tmp_path, "daemon", config=config).start()
    try:
        yield daemon, sims
    finally:
        daemon.stop()
        for s in sims:
            s.stop()


def _has_data(url: str, expr: str, start: float, end: float) -> bool:
    body = httpx.get(f"{url}/api/v1/query_range", timeout=30, params={
        "query": grafana_expr(expr), "start": f"{start:.3f}", "end": f"{end:.3f}",
        "step": "2"}).json()
    assert body["status"] == "success", (expr, body)
    return any(not math.isnan(float(v)) for s in body["data"]["result"] for _, v in s["values"])


def test_every_fleet_query_returns_data_through_sentinel(
        fleet: tuple[Daemon, list[SimServer]]) -> None:
    daemon, _ = fleet
    wait_for(lambda: daemon.port, 120, "the daemon to say where it listens")
    url = f"http://127.0.0.1:{daemon.port}"
    started = time.time()
    missing = _queries()

    def all_have_data() -> bool:
        nonlocal missing
        now = time.time()
        missing = [q for q in missing if not _has_data(url, q, started - 60, now)]
        return not missing

    wait_for(lambda: daemon.readyz() != "" and all_have_data(), 180,
             "every fleet dashboard query to return data")
    assert not missing
    # The variables, as Grafana's label_values() asks for them.
    pools = httpx.get(f"{url}/api/v1/label/pool/values", params={"match[]": "up"},
                      timeout=30).json()["data"]
    assert pools == sorted(POOLS.values())
    targets = httpx.get(f"{url}/api/v1/label/target/values", timeout=30,
                        params={"match[]": 'up{pool=~".*"}'}).json()["data"]
    assert set(POOLS) <= set(targets)

    # The annotations: an incident opened by the test rule, with every column named.
    (annotation,) = json.loads(FLEET.read_text())["annotations"]["list"]
    columns = [c["selector"] for c in annotation["target"]["columns"]]

    def incident_rows() -> list[dict]:
        now_ms = int(time.time() * 1000)
        return httpx.get(f"{url}/api/v1/annotations", timeout=30, params={
            "from": str(now_ms - 3600_000), "to": str(now_ms)}).json()

    rows = wait_for(incident_rows, 120, "the test incident as an annotation")
    assert isinstance(rows, list)
    import jsonschema

    doc = openapi_document()
    jsonschema.validate(rows, {"$ref": "#/components/schemas/Annotations",
                               "components": doc["components"]})
    row = next(r for r in rows if r["alertname"] == "DashboardTestIncident")
    assert all(row.get(c) is not None for c in columns)
    assert "sim-a" in row["tags"].split(",")
    # The documented alternative without the Infinity plugin: a Prometheus annotation query.
    now = time.time()
    assert _has_data(url, 'ALERTS{alertstate="firing", alertname="DashboardTestIncident"}',
                     now - 300, now)
