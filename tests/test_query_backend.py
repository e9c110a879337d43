"""The remote query backend against a scripted Prometheus-compatible server on loopback.

Conversion of every result type, retries (503/429/no answer) within the budget,
4xx permanent at once, credentials on the wire and never in errors, routing
of Sentinel's own series to the embedded store, and a rule's alerts kept as
they were while the backend fails (the real Prometheus is in
test_query_backend_prometheus.py).
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from fixtures_promapi import FakePromAPI, ok

from sentinel.config.load import ConfigError, load_config
from sentinel.config.querybackend import QueryBackendConfig
from sentinel.model import AlertState, InstantSample
from sentinel.promql import Engine
from sentinel.rules.alerting import RuleHealth
from sentinel.rules.backend import RoutedBackend, reads_only_local
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.rules.prometheus_api import BackendMetrics, PrometheusAPI, QueryBackendError
from sentinel.store import MemoryStore


@pytest.fixture
def prom(prom_api: Callable[..., FakePromAPI]) -> FakePromAPI:
    """A query API answering from its `script`."""
    return prom_api()


def api(url: str, **kw: Any) -> PrometheusAPI:
    cfg = QueryBackendConfig.model_validate({"url": url, "timeout": kw.pop("timeout", "2s"),
                                             **kw})
    return PrometheusAPI(cfg, BackendMetrics(), sleep=lambda s: None)


def test_vector_scalar_and_special_floats_convert_to_the_engine_types(prom: FakePromAPI) -> None:
    prom.script = [ok("vector", [
        {"metric": {"__name__": "up", "target": "a"}, "value": [1700000000.5, "1"]},
        {"metric": {"target": "b"}, "value": [1700000000.5, "NaN"]},
        {"metric": {"target": "c"}, "value": [1700000000.5, "+Inf"]},
        {"metric": {"target": "d"}, "value": [1700000000.5, "-Inf"]},
    ])]
    res = api(prom.url).query("up", 1_700_000_000_500)
    assert isinstance(res, list)
    assert res[0] == InstantSample((("__name__", "up"), ("target", "a")), 1.0)
    assert math.isnan(res[1].value) and res[2].value == math.inf and res[3].value == -math.inf
    path, form, _ = prom.requests[0]
    assert path == "/api/v1/query" and form["query"] == ["up"]
    assert form["time"] == ["1700000000.500"]  # the evaluation time, not "now"
    assert 0 < float(form["timeout"][0]) <= 2  # seconds as a float: Prometheus rejects "1.5s"
    prom.script = [ok("scalar", [1700000000, "2.5"])]
    assert api(prom.url).query("scalar(up)", 1_700_000_000_000) == 2.5
    prom.script = [ok("vector", [{"metric": {}}])]
    with pytest.raises(QueryBackendError, match="malformed result"):
        api(prom.url).query("up", 1_700_000_000_000)
    prom.script = [ok("string", [1700000000, "hi"])]
    with pytest.raises(QueryBackendError, match="instant vector or a scalar"):
        api(prom.url).query('"hi"', 1_700_000_000_000)


def test_query_range_returns_series_with_sample_timestamps(prom: FakePromAPI) -> None:
    prom.script = [ok("matrix", [{"metric": {"target": "a"},
                                  "values": [[1700000000, "1"], [1700000015, "+Inf"]]}])]
    (series,) = api(prom.url).query_range("x", 1_700_000_000_000, 1_700_000_015_000, 15_000)
    assert series.ts == [1_700_000_000_000, 1_700_000_015_000]
    assert series.vs == [1.0, math.inf]
    assert prom.requests[0][1]["step"] == ["15.000"]


def test_5xx_and_429_are_retried_then_answered(prom: FakePromAPI) -> None:
    a = api(prom.url)
    prom.script = [(503, {"status": "error", "errorType": "timeout", "error": "x"}),
                   (429, b"slow down"), ok("vector", [])]
    assert a.query("up", 0) == []
    assert len(prom.requests) == 3
    assert a.metrics.retries._value.get() == 2  # noqa: SLF001
    assert a.metrics.up._value.get() == 1  # noqa: SLF001


@pytest.mark.parametrize("status", [400, 422])
def test_a_bad_query_is_permanent_at_once(prom: FakePromAPI, status: int) -> None:
    a = api(prom.url)
    a.metrics.up.set(0)  # as after an outage
    prom.script = [(status, {"status": "error", "errorType": "bad_data",
                             "error": "parse error at char 3"})]
    with pytest.raises(QueryBackendError, match=f"HTTP {status}: bad_data: parse error") as e:
        a.query("up{", 0)
    assert not e.value.retryable and len(prom.requests) == 1
    assert a.metrics.up._value.get() == 1  # noqa: SLF001 (the backend answered)


def test_no_backend_fails_within_the_budget_and_later_queries_of_that_evaluation_fail_fast(
) -> None:
    a = PrometheusAPI(QueryBackendConfig.model_validate({"url": "http://127.0.0.1:1",
                                                         "timeout": "300ms"}), BackendMetrics())
    with pytest.raises(QueryBackendError) as e:
        a.query("up", 5_000)
    assert e.value.retryable and e.value.reason == "connection"
    assert a.metrics.retries._value.get() >= 1  # noqa: SLF001
    assert a.metrics.up._value.get() == 0  # noqa: SLF001
    with pytest.raises(QueryBackendError, match="earlier query at this evaluation"):
        a.query("other", 5_000)


def test_credentials_travel_in_headers_and_never_in_errors(prom: FakePromAPI, tmp_path: Path
                                                           ) -> None:
    (tmp_path / "token").write_text("s3cr3t-token\n")
    (tmp_path / "pw").write_text("hunter22\n")
    prom.script = [(500, {"status": "error", "errorType": "internal", "error": "boom"})]
    a = api(prom.url, bearer_token_file=str(tmp_path / "token"), timeout="200ms",
            headers={"X-Scope-OrgID": "team-a"})
    with pytest.raises(QueryBackendError) as e:
        a.query("up", 0)
    assert "s3cr3t" not in str(e.value)
    headers = prom.requests[0][2]
    assert headers["Authorization"] == "Bearer s3cr3t-token"
    assert headers["X-Scope-OrgID"] == "team-a"
    prom.script = [ok("vector", [])]
    b = api(prom.url, basic_auth={"username": "sam", "password_file": str(tmp_path / "pw")})
    b.query("up", 0)
    assert prom.requests[-1][2]["Authorization"] == "Basic " + base64.b64encode(
        b"sam:hunter22").decode()


def parse_config(text: str, config_dir: Path) -> Any:
    path = config_dir / "sentinel.yaml"
    path.write_text(text)
    return load_config(path)


def test_config_block_is_strict_and_optional(tmp_path: Path) -> None:
    cfg = parse_config("query_backend: {url: 'http://prom:9090/', timeout: 3s}\n",
                       config_dir=tmp_path)
    assert cfg.query_backend is not None
    assert cfg.query_backend.url == "http://prom:9090" and cfg.query_backend.timeout_ms == 3000
    assert not cfg.query_backend.scrape
    assert parse_config("{}\n", config_dir=tmp_path).query_backend is None
    for bad, where in [("{url: 'ftp://x'}", "url"),
                       ("{url: 'http://x', bearer_token_file: missing}", "bearer_token_file"),
                       ("{url: 'http://x', tls: yes}", "tls")]:
        with pytest.raises(ConfigError, match=f"query_backend.{where}"):
            parse_config(f"query_backend: {bad}\n", config_dir=tmp_path)


def test_own_series_stay_in_the_embedded_store() -> None:
    assert reads_only_local("sentinel_query_backend_up == 0")
    assert reads_only_local('sum(increase(sentinel_log_signature_matches_total[5m])) > 0')
    assert reads_only_local("vector(1)")
    assert not reads_only_local("up == 0")
    assert not reads_only_local("sentinel_x > 0 and on() up")
    assert not reads_only_local('{__name__=~"sentinel_.*"}')
    assert not reads_only_local("limitk(2, sentinel_x)")  # not in Sentinel's subset


class Down:
    """A backend that fails while `down`, else answers from a fixed vector."""

    def __init__(self) -> None:
        self.down = False
        self.value: list[InstantSample] = [InstantSample((("target", "a"),), 3.0)]

    def query(self, expr: Any, at_ms: int) -> Any:
        if self.down:
            raise QueryBackendError("query backend: connection refused", retryable=True,
                                    reason="connection")
        return list(self.value)


def test_a_failing_backend_keeps_alerts_and_reports_err(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "groups:\n- name: g\n  rules:\n"
        "  - alert: Queued\n    expr: vllm:num_requests_waiting > 0\n    for: 2s\n"
        "  - record: rec\n    expr: vllm:num_requests_waiting\n")
    groups = load_rule_files([str(tmp_path / "r.yaml")])
    remote = Down()
    routed = RoutedBackend(Engine(MemoryStore()), remote)
    routed.learn(groups)
    rules = RuleManager(groups, routed)
    rules.evaluates_recording = routed.evaluates_recording
    for t in (0, 1000, 2000):
        out = rules.evaluate_group("g", t)
    assert [a.state for a in out] == [AlertState.FIRING]
    remote.down = True
    for t in (3000, 4000, 60_000):
        out = rules.evaluate_group("g", t)
        assert [(a.state, a.resolved_at_ms) for a in out] == [(AlertState.FIRING, None)]
    health = {s.rule: s for s in rules.rule_health()}
    assert health["Queued"].health == RuleHealth.ERR
    assert "connection refused" in health["Queued"].last_error
    assert health["rec"].health == RuleHealth.UNKNOWN  # recorded by the backend's ruler
    remote.down = False
    out = rules.evaluate_group("g", 61_000)
    assert [a.state for a in out] == [AlertState.FIRING]
    assert {s.rule: s.health for s in rules.rule_health()}["Queued"] == RuleHealth.OK
    remote.value = []
    (resolved,) = rules.evaluate_group("g", 62_000)
    assert resolved.resolved_at_ms == 62_000  # resolves only when the backend says so


def test_evidence_comes_from_query_range_around_the_onset(prom: FakePromAPI) -> None:
    from sentinel.respond.diagnose.gather import SERIES_NAMES
    from sentinel.respond.diagnose.gather_remote import remote_series

    prom.script = [ok("matrix", [{"metric": {}, "values": [[1000, "0.5"], [1060, "0.97"]]}])]
    read = remote_series(api(prom.url))
    out = read('g"1', 1_060_000)
    assert [s.name for s in out] == list(SERIES_NAMES)
    assert out[0].points == ((-60, 0.5), (0, 0.97))
    path, form, _ = prom.requests[0]
    assert path == "/api/v1/query_range"
    assert form["query"] == [f'max({{__name__="{SERIES_NAMES[0]}",target="g\\"1"}})']
    assert form["start"] == ["760.000"] and form["end"] == ["1120.000"]


def test_rule_health_is_on_metrics_and_an_error_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from prometheus_client import CollectorRegistry

    from sentinel.daemon.rulehealth import RuleHealthCollector

    (tmp_path / "r.yaml").write_text(
        "groups:\n- name: g\n  rules:\n  - alert: Queued\n    expr: x > 0\n")
    groups = load_rule_files([str(tmp_path / "r.yaml")])
    remote = Down()
    routed = RoutedBackend(Engine(MemoryStore()), remote)
    routed.learn(groups)
    rules = RuleManager(groups, routed)
    registry = CollectorRegistry()
    registry.register(RuleHealthCollector(lambda: rules))

    def health(h: str) -> float | None:
        return registry.get_sample_value("sentinel_rule_health",
                                         {"group": "g", "rule": "Queued", "health": h})

    assert health("unknown") == 1
    rules.evaluate_group("g", 0)
    assert health("ok") == 1 and health("err") is None
    remote.down = True
    with caplog.at_level("WARNING", logger="sentinel.rules.manager"):
        for t in (1000, 2000, 3000):
            rules.evaluate_group("g", t)
    assert health("err") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "rule g/Queued: query backend: connection refused"]


def test_google_credentials_get_a_token_from_the_token_uri_and_send_it(
        prom: FakePromAPI, tmp_path: Path) -> None:
    """Managed Service for Prometheus: a service-account key; its token from a local token_uri."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    grants: list[dict[str, list[str]]] = []

    class Token(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length", 0))
            grants.append(parse_qs(self.rfile.read(n).decode()))
            body = json.dumps({"access_token": "ya29.loopback", "expires_in": 3600,
                               "token_type": "Bearer"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Token)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        (tmp_path / "sa.json").write_text(json.dumps({
            "type": "service_account", "project_id": "p", "private_key_id": "1",
            "private_key": pem, "client_email": "sentinel@p.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": f"http://127.0.0.1:{server.server_address[1]}/token",
        }))
        prom.script = [ok("vector", [])]
        a = api(prom.url, google_credentials=str(tmp_path / "sa.json"))
        a.query("up", 0)
        a.query("up", 1000)
        assert [r[2]["Authorization"] for r in prom.requests] == ["Bearer ya29.loopback"] * 2
        assert len(grants) == 1  # cached until it expires
        assert grants[0]["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    finally:
        server.shutdown()
        server.server_close()


def test_get_puts_the_parameters_in_the_url(prom: FakePromAPI) -> None:
    prom.script = [ok("scalar", [1, "1"])]
    assert api(prom.url, method="GET").query("vector(1)", 1_000) == 1.0
    path, params, _ = prom.requests[0]
    assert path == "/api/v1/query" and params["query"] == ["vector(1)"]
    assert params["time"] == ["1.000"]
