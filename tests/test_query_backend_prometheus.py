"""The remote query backend against the real Prometheus (Debian's package) over loopback.

Same alerts: Prometheus scrapes three simulators every second while the test
drives their states (POST /sim/state: a queue, a full KV cache, a target
down for 38 s, traffic). Then the same rule files (the shipped rules/vllm.yaml
and a recording-rule pack) are evaluated at the same evaluation times twice,
through the two implementations of the seam:

- embedded: `promql.Engine` over a MemoryStore holding exactly the samples
  Prometheus stored (copied raw through `/api/v1/query` of `{job="vllm"}[…]`,
  with the staleness markers Prometheus writes when a scrape fails put back,
  since the API does not return them); Sentinel evaluates the recording rules
  itself, in order, over the scrapes Prometheus's own evaluation had (the
  pack records, per target, the last scrape it saw);
- remote: `RoutedBackend` → `PrometheusAPI` (POST /api/v1/query, time=t);
  the recording rules run in Prometheus (the same file in its rule_files).

Each evaluation's alerts (name, labels, state, value, annotations, active,
fired and resolved times) must be equal: both daemons' rules see the same
data at the same times, so they fire at the same evaluation. (Two live
daemons scraping on their own would see samples taken milliseconds apart, and
equality would only hold up to that jitter.) The evaluation times are those
at which Prometheus evaluated the pack, so a recorded sample exists at each.

Outage: a real daemon with `query_backend:` on that Prometheus, Prometheus
SIGSTOPped for 60 s (longer than every `for` here and 60 evaluation
intervals; a hung backend is the harder case than a refused connection,
since every query waits for its timeout). No alert resolves, the rule's
health is "err" with the error, the error counter counts, the self-alert
SentinelQueryBackendDown fires, and evaluation resumes after SIGCONT.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_e2e import bodies_with_status, wait_for
from fixtures_http import http
from fixtures_prometheus import Prometheus, prometheus_binary

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.demo import WebhookSink
from sentinel.model import STALE_NAN, Labels, label_value, labels_of
from sentinel.promql import Engine
from sentinel.rules.alerting import RuleHealth
from sentinel.rules.backend import RoutedBackend
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.rules.prometheus_api import PrometheusAPI, parse_float
from sentinel.sim.server import SimServer, start_sim
from sentinel.store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT / "tests" / "data" / "remote_recording_pack.yaml"
RULE_FILES = [str(ROOT / "rules" / "vllm.yaml"), str(PACK)]
# Series Prometheus writes for every scrape, failed or not (never stale on failure).
REPORT_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                 "scrape_samples_post_metric_relabeling", "scrape_series_added"}


@pytest.fixture
def sims() -> Iterator[dict[str, SimServer]]:
    servers = {f"t{i}": start_sim() for i in range(3)}
    yield servers
    for s in servers.values():
        s.stop()


def post_state(sim: SimServer, **fields: Any) -> None:
    http.post(f"{sim.url}/sim/state", json=fields, timeout=5).raise_for_status()


def raw(prom: Prometheus, expr: str, at_ms: int) -> list[dict[str, Any]]:
    r = http.post(f"{prom.url}/api/v1/query", data={"query": expr, "time": at_ms / 1000},
                  timeout=30)
    r.raise_for_status()
    return list(r.json()["data"]["result"])


def copy_samples(prom: Prometheus, end_ms: int, window_s: int,
                 ) -> dict[str, list[tuple[int, Labels, float]]]:
    """Prometheus's raw samples of the scraped series, staleness markers put back, as
    target → [(timestamp, labels, value)] in time order."""
    series: dict[Labels, list[tuple[int, float]]] = {}
    for s in raw(prom, f'{{job="vllm"}}[{window_s}s]', end_ms):
        series[labels_of(s["metric"])] = [(round(float(t) * 1000), parse_float(v))
                                          for t, v in s["values"]]
    # A failed scrape marks every series of the target's previous scrape stale, at the
    # failed scrape's time (Prometheus's scrape loop); the query API does not show them.
    for labels, points in list(series.items()):
        if label_value(labels, "__name__") != "up":
            continue
        target = label_value(labels, "target")
        prev = None
        for t, v in points:
            if v == 0 and prev is not None and prev[1] == 1:
                for other, pts in series.items():
                    if (label_value(other, "target") == target
                            and label_value(other, "__name__") not in REPORT_SERIES
                            and any(pt == prev[0] for pt, _ in pts)):
                        pts.append((t, STALE_NAN))
            prev = (t, v)
    out: dict[str, list[tuple[int, Labels, float]]] = {}
    for labels, points in series.items():
        out.setdefault(label_value(labels, "target"), []).extend(
            (t, labels, v) for t, v in points)
    for samples in out.values():
        samples.sort(key=lambda e: e[0])
    return out


def evaluation_times(prom: Prometheus, end_ms: int, window_s: int) -> list[int]:
    """When Prometheus evaluated the recording pack (its first rule records at each)."""
    return sorted({round(float(t) * 1000)
                   for s in raw(prom, f"target:scrape_seen:timestamp[{window_s}s]", end_ms)
                   for t, _v in s["values"]})


class Feed:
    """Hands the embedded store each target's samples in time order, up to a time."""

    def __init__(self, store: MemoryStore,
                 samples: dict[str, list[tuple[int, Labels, float]]]) -> None:
        self.store, self.samples = store, samples
        self.fed = dict.fromkeys(samples, 0)

    def up_to(self, target: str, at_ms: int) -> None:
        points, i = self.samples[target], self.fed[target]
        while i < len(points) and points[i][0] <= at_ms:
            t, labels, value = points[i]
            self.store.add(labels, t, value)
            i += 1
        self.fed[target] = i


def snapshot(alerts: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((a.rule, a.labels, a.state.value, repr(a.value), a.annotations,
                   a.active_at_ms, a.fired_at_ms, a.resolved_at_ms) for a in alerts)


def test_remote_backend_gives_the_same_alerts_at_the_same_evaluation(
        tmp_path: Path, sims: dict[str, SimServer]) -> None:
    prometheus_binary()
    prom = Prometheus(tmp_path, {n: f"127.0.0.1:{s.port}" for n, s in sims.items()},
                      "1s", (str(PACK),)).start()
    try:
        t0, t1, t2 = sims["t0"], sims["t1"], sims["t2"]
        start_ms = int(time.time() * 1000)
        post_state(t0, num_requests_waiting=3, load_rps=20)
        post_state(t1, load_rps=5)
        time.sleep(2)
        post_state(t2, down=True)
        time.sleep(8)
        post_state(t1, kv_cache_usage=0.93, num_requests_waiting=2)
        time.sleep(12)
        post_state(t1, kv_cache_usage=0.2, num_requests_waiting=0)
        # t2 has been down 20 s: 18 s more make 38 s, clearing VLLMTargetDown's 30 s
        # `for` by ~8 s for a loaded machine's late scrapes (34 s missed once on CI).
        time.sleep(18)
        post_state(t2, down=False)
        time.sleep(5)
        end_ms = int(time.time() * 1000) - 2000  # past Prometheus's last rule evaluation
        window_s = (end_ms - start_ms) // 1000 + 10
        samples = copy_samples(prom, end_ms, window_s)
        grid = evaluation_times(prom, end_ms, window_s)
        store = MemoryStore(retention_ms=3_600_000)
        feed = Feed(store, samples)
        assert len(grid) >= 30, grid

        groups = load_rule_files(RULE_FILES)
        embedded = RuleManager(groups, Engine(store, subquery_step_ms=1000),
                               default_interval_ms=1000, store=store)
        routed = RoutedBackend(Engine(MemoryStore()),
                               PrometheusAPI(load_remote_config(prom.url)))
        routed.learn(groups)
        remote = RuleManager(groups, routed, default_interval_ms=1000, store=MemoryStore())
        remote.evaluates_recording = routed.evaluates_recording
        # The pack's recorded values were computed live, but its value rules read 3 s back,
        # past any scrape still landing (the pack says why), so both sides see every
        # sample up to t. The recording group runs first, as its alerts read its output.
        ordered = ["vllm-recording"] + [g for g in embedded.groups if g != "vllm-recording"]

        fired: dict[tuple[str, Labels], int] = {}
        resolved: set[tuple[str, Labels]] = set()
        for step, t in enumerate(grid):
            for target in samples:
                feed.up_to(target, t)
            for name in ordered:
                a = snapshot(embedded.evaluate_group(name, t))
                b = snapshot(remote.evaluate_group(name, t))
                assert a == b, (f"evaluation {step} at {t}, group {name}",
                                 [(s.rule, s.last_error) for s in remote.rule_health()])
                embedded.acknowledge(embedded.active_alerts())
                for rule, labels, state, *_rest in a:
                    if state == "firing":
                        fired.setdefault((rule, labels), step)
                    if state == "inactive":
                        resolved.add((rule, labels))
            for manager in (embedded, remote):
                errs = [(s.rule, s.last_error) for s in manager.rule_health()
                        if s.health == RuleHealth.ERR]
                assert not errs
        # Recording rules ran in Prometheus, not in the remote Sentinel.
        assert {s.rule: s.health for s in remote.rule_health()}[
            "target:vllm_requests_waiting:sum"] == RuleHealth.UNKNOWN
        names = {(rule, label_value(labels, "target")) for rule, labels in fired}
        assert {("VLLMRequestsQueued", "t0"), ("VLLMTargetDown", "t2"), ("RecordedQueue", "t0"),
                ("RecordedQueue", "t1"), ("RecordedKVHigh", "t1"),
                ("RecordedTraffic", "t0")} <= names, names
        assert {(r, label_value(lb, "target")) for r, lb in resolved} >= {
            ("VLLMTargetDown", "t2"), ("RecordedKVHigh", "t1")}
    finally:
        prom.stop()


class HangingProxy:
    """A TCP relay in front of Prometheus that can hang: while paused it accepts
    connections and reads requests but answers nothing (a hung backend, as Sentinel sees
    it), and Prometheus behind it keeps scraping. Stopping Prometheus itself (SIGSTOP)
    hung its scrapes too: one caught in flight failed on SIGCONT, Prometheus marked the
    target's series stale, and the alert resolved on data, not on the outage."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.running = threading.Event()  # set: relaying; clear: hung
        self.running.set()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def stop(self) -> None:
        self.closed.set()
        self.running.set()
        for sock in [self.listener, *self.sockets]:
            sock.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Relay bytes; while paused, hold them (the peer waits, as on a hung server)."""
        try:
            while data := src.recv(65536):
                self.running.wait()
                if self.closed.is_set():
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def load_remote_config(url: str) -> Any:
    from sentinel.config.querybackend import QueryBackendConfig

    return QueryBackendConfig.model_validate({"url": url, "timeout": "10s"})


OUTAGE_EVALUATIONS = 60  # the figure (60 s at 1 s): longer than every `for` here


def test_backend_outage_resolves_nothing_fires_the_self_alert_and_evaluation_resumes(
        tmp_path: Path, sims: dict[str, SimServer]) -> None:
    prometheus_binary()
    t0 = sims["t0"]
    # Scrapes every 5 s with as long to answer: one failed scrape (a 1 s timeout did on a
    # loaded machine) marks t0's series stale, and the alert resolves on data, correctly.
    prom = Prometheus(tmp_path, {"t0": f"127.0.0.1:{t0.port}"}, "5s").start()
    backend = HangingProxy(prom.port)
    sink = WebhookSink().start()
    (tmp_path / "rules.yaml").write_text(
        "groups:\n- name: load\n  interval: 1s\n  rules:\n"
        "  - alert: Queued\n    expr: sum by (target) (vllm:num_requests_waiting) > 0\n"
        "    for: 2s\n")
    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\nlisten: 127.0.0.1:0\n"
        f"rule_files: [rules.yaml, '{ROOT / 'rules' / 'sentinel.yaml'}']\n"
        "evaluation_interval: 1s\nprobe_interval: 0s\n"
        f"query_backend: {{url: '{backend.url}', timeout: 1s}}\n"
        f"targets:\n  - {{name: t0, url: '{t0.url}'}}\n"
        f"receivers:\n  - name: oncall\n    webhook: {{url: '{sink.url}', timeout: 2s}}\n")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    try:
        assert app.pipeline is not None and app.query is not None
        rules = app.pipeline.rules
        post_state(t0, num_requests_waiting=4)
        wait_for(lambda: [a for a in rules.active_alerts() if a.rule == "Queued"
                          and a.state.value == "firing"], 30, "Queued firing via Prometheus")
        assert t0.state.num_requests_waiting == 4
        errors_before = _errors(app)

        failed_before = _failed_evaluations(app)
        backend.pause()
        wait_for(lambda: _health(app, "Queued")[0] == RuleHealth.ERR, 30, "health err")
        self_alert = wait_for(lambda: [a for a in rules.active_alerts()
                                       if a.rule == "SentinelQueryBackendDown"
                                       and a.state.value == "firing"], 120,
                              "SentinelQueryBackendDown firing")
        assert self_alert
        # The outage lasts as many evaluations as the issue says (an event, not a sleep:
        # on a loaded machine they take longer than their 1 s interval).
        wait_for(lambda: _failed_evaluations(app) >= failed_before + OUTAGE_EVALUATIONS,
                 600, f"{OUTAGE_EVALUATIONS} failed evaluations")
        health, error = _health(app, "Queued")
        assert health == RuleHealth.ERR and "no answer" in error, error
        assert app.metrics.registry.get_sample_value(
            "sentinel_rule_health", {"group": "load", "rule": "Queued", "health": "err"}) == 1
        assert _errors(app) > errors_before
        assert [a.state.value for a in rules.active_alerts() if a.rule == "Queued"] == ["firing"]
        backend.resume()

        wait_for(lambda: _health(app, "Queued")[0] == RuleHealth.OK, 60, "evaluation resumes")
        wait_for(lambda: not [a for a in rules.active_alerts()
                              if a.rule == "SentinelQueryBackendDown"], 60, "self-alert resolves")
        # Nothing about the queue resolved during or after the outage...
        assert not [b for _, b in bodies_with_status(sink, "resolved")
                    if any(x["labels"]["alertname"] == "Queued" for x in b["alerts"])]
        # ...and the backend still decides: clear the queue, the alert resolves.
        post_state(t0, num_requests_waiting=0)
        wait_for(lambda: not [a for a in rules.active_alerts() if a.rule == "Queued"], 60,
                 "Queued resolves once the data says so")
        # Sentinel scraped nothing itself: the store holds its own series only.
        assert app.engine is not None
        assert app.engine.query('{__name__=~"vllm:.+"}', int(time.time() * 1000)) == []
    finally:
        app.stop()
        sink.stop()
        backend.stop()
        prom.stop()


def _failed_evaluations(app: App) -> float:
    value = app.metrics.registry.get_sample_value(
        "sentinel_rule_evaluation_failures_total", {"group": "load"})
    return value or 0.0


def _health(app: App, rule: str) -> tuple[RuleHealth, str]:
    assert app.pipeline is not None
    for s in app.pipeline.rules.rule_health():
        if s.rule == rule:
            return s.health, s.last_error
    raise AssertionError(rule)


def _errors(app: App) -> float:
    value = app.metrics.registry.get_sample_value(
        "sentinel_query_backend_errors_total", {"reason": "timeout"})
    return value or 0.0

