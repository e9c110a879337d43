"""A rule reading Sentinel's own series and a remote backend's is split between them (issue 40).

The backend answers the parts on its series, the embedded engine the parts on
Sentinel's (probe results, ALERTS, its own recording rules) and the operators
joining them. Against a recording fake backend (which texts it is asked, and
when) and against the real Prometheus scraping a simulated vLLM server: the
probe half of VLLMTimeToFirstTokenHigh fires in remote mode, and the backend
half (`unless` the target has traffic) still holds it back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fixtures_e2e import wait_for
from fixtures_http import http
from fixtures_prometheus import Prometheus, prometheus_binary

from sentinel.config.querybackend import QueryBackendConfig
from sentinel.model import AlertState, InstantSample, labels_of
from sentinel.promql import Engine
from sentinel.rules.backend import LOCAL, REMOTE, RoutedBackend, route
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.rules.prometheus_api import PrometheusAPI
from sentinel.rules.split import Split
from sentinel.sim.server import start_sim
from sentinel.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
VLLM_RULES = str(ROOT / "rules" / "vllm.yaml")


def vllm_rule(name: str) -> Any:
    (rule,) = [r for g in load_rule_files([VLLM_RULES]) for r in g.rules if r.name == name]
    return rule


class Recorder:
    """A backend answering each text from `answers` (empty vector otherwise), keeping the asks."""

    def __init__(self, answers: dict[str, list[InstantSample]] | None = None) -> None:
        self.answers = answers or {}
        self.asked: list[tuple[str, int]] = []

    def query(self, expr: Any, at_ms: int) -> Any:
        assert isinstance(expr, str)  # the backend is always handed text
        self.asked.append((expr, at_ms))
        return list(self.answers.get(expr, []))


def put(store: MemoryStore, name: str, target: str, value: float, at_ms: int) -> None:
    store.add(labels_of({"__name__": name, "target": target}), at_ms, value)


def test_the_probe_half_of_ttft_high_is_answered_by_the_embedded_store() -> None:
    rule = vllm_rule("VLLMTimeToFirstTokenHigh")
    found = route(rule.expr)
    assert isinstance(found, Split)
    traffic = "sum by (target) (rate(vllm:time_to_first_token_seconds_count[300s])) > 0.0"
    assert [text for _, text in found.remote] == [
        "(histogram_quantile(0.95, sum by (target, le) "
        "(rate(vllm:time_to_first_token_seconds_bucket[300s]))) > 2.0)", traffic]
    store = MemoryStore()
    put(store, "sentinel_probe_ttft_seconds", "idle", 3.5, 9_000)
    put(store, "sentinel_probe_ttft_seconds", "busy", 4.0, 9_000)
    put(store, "sentinel_probe_ttft_seconds", "fast", 0.2, 9_000)
    remote = Recorder({traffic: [InstantSample(labels_of({"target": "busy"}), 1.0)]})
    routed = RoutedBackend(Engine(store), remote)
    routed.learn(load_rule_files([VLLM_RULES]))
    out = routed.query(rule.query, 10_000)
    # Slow probe, no traffic: fires; slow probe on a target with traffic: the backend's
    # histogram decides (empty here); fast probe: nothing.
    assert out == [InstantSample(labels_of({"target": "idle"}), 3.5)]
    assert all(at == 10_000 for _, at in remote.asked) and len(remote.asked) == 2


def test_the_canary_half_of_engine_stalled_fires_unless_the_backend_says_asleep() -> None:
    rule = vllm_rule("VLLMEngineStalled")
    found = route(rule.expr)
    assert isinstance(found, Split)
    asleep = next(text for _, text in found.remote if "engine_sleep_state" in text)
    store = MemoryStore()
    for target in ("a", "b"):
        store.add(labels_of({"__name__": "sentinel_probe_success", "target": target,
                             "probe": "canary"}), 9_000, 0.0)
        store.add(labels_of({"__name__": "sentinel_probe_success", "target": target,
                             "probe": "health"}), 9_000, 1.0)
    remote = Recorder({asleep: [InstantSample(labels_of({"target": "b"}), 0.0)]})
    routed = RoutedBackend(Engine(store), remote)
    # Canary fails while /health answers: stalled, but for the target the backend says sleeps.
    assert routed.query(rule.expr, 10_000) == [InstantSample(labels_of({"target": "a"}), 0.0)]


def test_a_backend_part_is_asked_only_when_the_expression_needs_it() -> None:
    routed = RoutedBackend(Engine(MemoryStore()), remote := Recorder())
    out = routed.query("sentinel_probe_ttft_seconds > 2 unless on (target) up == 1", 1_000)
    assert out == [] and remote.asked == []  # nothing to hold back: no round trip


def test_a_recording_rule_on_sentinel_series_is_evaluated_and_read_in_sentinel(
        tmp_path: Path) -> None:
    """Its output lives in the embedded store: rules reading it must read it there."""
    (tmp_path / "r.yaml").write_text("""groups:
- name: g
  rules:
  - record: target:probe_slow:bool
    expr: sentinel_probe_ttft_seconds > bool on (target) group_left () slo_seconds
  - alert: ProbeSlow
    expr: target:probe_slow:bool == 1
  - record: backend_only
    expr: up
""")
    groups = load_rule_files([str(tmp_path / "r.yaml")])
    store = MemoryStore()
    put(store, "sentinel_probe_ttft_seconds", "a", 3.0, 1_000)
    remote = Recorder({"slo_seconds": [InstantSample(labels_of({"target": "a"}), 2.0)]})
    routed = RoutedBackend(Engine(store), remote)
    routed.learn(groups)
    assert route("target:probe_slow:bool == 1", routed.local_names) == LOCAL
    assert routed.evaluates_recording(groups[0].rules[0].expr)
    assert not routed.evaluates_recording("up")  # left to the backend's ruler
    mgr = RuleManager(groups, routed, store=store)
    mgr.evaluates_recording = routed.evaluates_recording
    (alert,) = mgr.evaluate_group("g", 1_000)
    assert alert.rule == "ProbeSlow" and alert.labels == labels_of(
        {"alertname": "ProbeSlow", "target": "a"})
    assert [text for text, _ in remote.asked] == ["slo_seconds"]


def test_a_mixed_subquery_cannot_be_split_and_goes_to_the_backend_whole() -> None:
    expr = "max_over_time((sentinel_probe_success * on (target) up)[5m:1m]) == 0"
    assert route(expr) == REMOTE
    assert route("quantile_over_time(scalar(sentinel_x), up[5m])") == REMOTE


def test_the_probe_half_fires_against_the_real_prometheus(tmp_path: Path) -> None:
    """Prometheus scrapes a simulated vLLM server; the probe's TTFT is only in Sentinel."""
    prometheus_binary()
    sim = start_sim()
    prom = Prometheus(tmp_path, {"t0": f"127.0.0.1:{sim.port}"}, "1s").start()
    try:
        rule = vllm_rule("VLLMTimeToFirstTokenHigh")
        store = MemoryStore()
        routed = RoutedBackend(Engine(store), PrometheusAPI(QueryBackendConfig(url=prom.url)))
        groups = load_rule_files([VLLM_RULES])
        routed.learn(groups)
        wait_for_prometheus(prom, 'vllm:time_to_first_token_seconds_count{target="t0"}')
        now = int(time.time() * 1000)
        put(store, "sentinel_probe_ttft_seconds", "t0", 3.5, now)
        # An idle server with a slow canary: the probe half fires.
        assert routed.query(rule.query, now) == [InstantSample(labels_of({"target": "t0"}), 3.5)]
        mgr = RuleManager([g for g in groups if g.name == "vllm-serving"], routed, store=store)
        (alert,) = [a for a in mgr.evaluate_group("vllm-serving", now) if a.rule == rule.name]
        assert alert.state == AlertState.PENDING and alert.value == 3.5
        # The whole expression in Prometheus alone (the old routing) never fires.
        assert routed.remote.query(rule.expr, now) == []
        # Traffic: the backend half (`unless` it has traffic) holds the probe half back.
        http.post(f"{sim.url}/sim/state", json={"load_rps": 20}, timeout=5).raise_for_status()
        wait_for_prometheus(prom, 'rate(vllm:time_to_first_token_seconds_count{target="t0"}'
                                  '[5m]) > 0')
        now = int(time.time() * 1000)
        put(store, "sentinel_probe_ttft_seconds", "t0", 3.5, now)
        assert routed.query(rule.query, now) == []
    finally:
        prom.stop()
        sim.stop()


def wait_for_prometheus(prom: Prometheus, expr: str, timeout_s: float = 60) -> None:
    """Until Prometheus answers `expr` with a sample (the scrapes it needs have landed)."""

    def answered() -> bool:
        r = http.post(f"{prom.url}/api/v1/query", data={"query": expr}, timeout=10)
        return bool(r.json()["data"]["result"])

    wait_for(answered, timeout_s, f"prometheus to answer {expr}")
