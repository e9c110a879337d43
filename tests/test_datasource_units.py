"""The data-source API's parts: a range query is the instant query at each step (property),
its limits, the /federate page, auth as /api/v1/query's, and incidents as annotations."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from datasource_helpers import POINTS, STEP_MS, fleet_samples, serve_store, store_of
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from sqlalchemy import insert

from sentinel.api import promdata
from sentinel.api.annotations import incident_annotations
from sentinel.api.auth import Auth
from sentinel.api.errors import ApiError
from sentinel.api.federate import exposition
from sentinel.api.querypool import QueryPool
from sentinel.api.routes import data_source_routes
from sentinel.api.service import ApiService
from sentinel.config import load_config
from sentinel.config.api import TokenConfig
from sentinel.daemon.http import StatusServer
from sentinel.incidents.convert import dt_to_ms
from sentinel.incidents.models import Incident
from sentinel.model import STALE_NAN, labels_of
from sentinel.promql.engine import Engine
from sentinel.promql.errors import PromQLError
from sentinel.promql.floatops import format_float
from sentinel.promql.limits import QueryLimitError

T0 = 1_700_000_000_000
SAMPLES = fleet_samples(T0)
ENGINE = Engine(store_of(SAMPLES))
EXPRS = ["vllm:num_requests_waiting", "sum by (target) (rate(vllm:request_success_total[1m]))",
         "up", "vllm:num_preemptions_total", "time()", "count(up) or vector(0)",
         "vllm:num_requests_waiting @ start()", "rate(vllm:request_success_total[1m] @ end())",
         "max_over_time(vllm:num_requests_waiting[5m:1m] @ start())"]


@settings(max_examples=60, deadline=None)
@given(expr=st.sampled_from(EXPRS), start=st.integers(-20, POINTS + 40),
       span=st.integers(0, 60), step_s=st.integers(1, 200))
def test_each_point_of_a_range_query_is_the_engine_s_query_at_that_step(
        expr: str, start: int, span: int, step_s: int) -> None:
    start_ms = T0 + start * STEP_MS
    end_ms = start_ms + span * STEP_MS
    step_ms = step_s * 1000
    at_fn = promdata.engine_steps(ENGINE, expr, start_ms, end_ms, step_ms)
    matrix = promdata.evaluate_range(at_fn, start_ms, end_ms, step_ms)
    seen = {tuple(sorted(s["metric"].items())): dict((t, v) for t, v in s["values"])
            for s in matrix}
    assert [s["metric"] for s in matrix] == sorted((s["metric"] for s in matrix),
                                                   key=lambda m: sorted(m.items()))
    points = 0
    for at in range(start_ms, end_ms + 1, step_ms):
        result = ENGINE.query(expr, at, start_ms=start_ms, end_ms=end_ms, step_ms=step_ms)
        instant = ({(): float(result)} if not isinstance(result, list)
                   else {s.labels: s.value for s in result})
        for labels, value in instant.items():
            assert seen[labels][at / 1000] == format_float(value)
            points += 1
    assert points == sum(len(s["values"]) for s in matrix)  # nothing more than the steps


def test_a_range_query_stops_at_the_deadline_for_the_whole_range() -> None:
    ticks = iter(range(1000))
    with pytest.raises(QueryLimitError) as caught:
        promdata.evaluate_range(lambda at: ENGINE.query("up", at), T0, T0 + 100 * STEP_MS,
                                STEP_MS,
                                timeout_s=5, clock=lambda: float(next(ticks)))
    assert caught.value.limit == "query_timeout"


def test_range_parameters_are_refused_as_prometheus_refuses_them() -> None:
    ok = {"start": "100", "end": "200", "step": "1"}
    assert promdata.range_steps(ok, 0) == (100_000, 200_000, 1000)
    assert promdata.range_steps(ok | {"step": "1m"}, 0)[2] == 60_000
    for bad, param in (({"step": "-1"}, "step"), ({"step": "x"}, "step"),
                       ({"end": "99"}, "end"), ({"end": "20000"}, "step"),
                       ({"step": "NaN"}, "step"), ({"start": "x"}, "start")):
        with pytest.raises(ApiError) as caught:
            promdata.range_steps(ok | bad, 0)
        assert caught.value.param == param, bad


def test_at_start_and_at_end_are_the_range_s_ends_at_every_step() -> None:
    start, end, step = T0 + 10 * STEP_MS, T0 + 50 * STEP_MS + 7_000, 60_000  # end off-step
    for expr, at in (("vllm:num_requests_waiting @ start()", start),
                     ("vllm:num_requests_waiting @ end()", end)):
        matrix = promdata.evaluate_range(promdata.engine_steps(ENGINE, expr, start, end, step),
                                         start, end, step)
        pinned = {dict(s.labels)["target"]: format_float(s.value)
                  for s in ENGINE.query("vllm:num_requests_waiting", at)}
        assert {s["metric"]["target"]: {v for _, v in s["values"]} for s in matrix} == {
            target: {value} for target, value in pinned.items()}, expr
        assert all(len(s["values"]) == 41 * STEP_MS // step + 1 for s in matrix)


def test_a_range_query_compiles_its_text_once() -> None:
    compiled: list[str] = []

    class Counting(Engine):
        def compile(self, expr: str, **kw: Any) -> Any:
            compiled.append(expr)
            return super().compile(expr, **kw)

    engine = Counting(store_of(SAMPLES))
    expr, end = "sum(vllm:num_requests_waiting)", T0 + 20 * STEP_MS
    matrix = promdata.evaluate_range(promdata.engine_steps(engine, expr, T0, end, STEP_MS),
                                     T0, end, STEP_MS)
    assert compiled == [expr] and len(matrix[0]["values"]) == 21


def test_a_text_the_compiler_refuses_is_refused_before_any_step() -> None:
    with pytest.raises(PromQLError):
        promdata.engine_steps(ENGINE, "up[5m", T0, T0 + STEP_MS, STEP_MS)
    with pytest.raises(PromQLError, match="experimental"):  # the engine's features: none
        promdata.engine_steps(ENGINE, "vector(step())", T0, T0 + STEP_MS, STEP_MS)


def test_the_federate_page_is_the_text_format_sorted_with_timestamps() -> None:
    page = exposition([
        (labels_of({"__name__": "b", "x": 'q"\\\nz'}), 5, 1.5),
        (labels_of({"__name__": "a", "t": "2"}), 7, math.inf),
        (labels_of({"__name__": "a", "t": "1"}), 6, 2.0)])
    assert page == ('# TYPE a untyped\na{t="1"} 2 6\na{t="2"} +Inf 7\n'
                    '# TYPE b untyped\nb{x="q\\"\\\\\\nz"} 1.5 5\n')
    assert exposition([]) == ""


def test_federate_leaves_out_a_series_whose_newest_sample_is_a_staleness_marker() -> None:
    store = store_of({})
    store.add(labels_of({"__name__": "m", "t": "live"}), T0, 1.0)
    store.add(labels_of({"__name__": "m", "t": "gone"}), T0 - 1000, 1.0)
    store.add(labels_of({"__name__": "m", "t": "gone"}), T0, STALE_NAN)
    api = serve_store(store, lambda: T0 + 1000)
    try:
        r = httpx.get(f"{api.url}/federate", params={"match[]": "m"}, timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert r.text == f'# TYPE m untyped\nm{{t="live"}} 1 {T0}\n'
        assert httpx.get(f"{api.url}/federate", timeout=30).status_code == 400
    finally:
        api.stop()


def test_series_and_labels_take_match_from_a_posted_form_as_promtool_sends_it() -> None:
    api = serve_store(store_of(SAMPLES), lambda: T0 + POINTS * STEP_MS)
    try:
        form = {"match[]": ["up", "vllm:num_preemptions_total"]}
        body = httpx.post(f"{api.url}/api/v1/series", data=form, timeout=30).json()
        assert sorted(s["__name__"] for s in body["data"]) == ["up", "vllm:num_preemptions_total"]
        body = httpx.get(f"{api.url}/api/v1/series", timeout=30, params=[
            ("match[]", '{job="vllm"}'), ("limit", "3")]).json()
        assert len(body["data"]) == 3 and body["warnings"]
        body = httpx.get(f"{api.url}/api/v1/metadata", timeout=30).json()
        assert "vllm:kv_cache_usage_perc" in body["data"]
        r = httpx.get(f"{api.url}/api/v1/label/1x/values", timeout=30)
        assert r.status_code == 400
    finally:
        api.stop()


def test_series_come_sorted_by_labels_whatever_order_the_store_made_them() -> None:
    store = store_of({})
    for labels in sorted(SAMPLES, reverse=True):  # the store keeps creation order
        for t, v in SAMPLES[labels][:3]:
            store.add(labels, t, v)
    api = serve_store(store, lambda: T0 + POINTS * STEP_MS)
    try:
        got = httpx.get(f"{api.url}/api/v1/series", params={"match[]": '{job="vllm"}'},
                        timeout=30).json()["data"]
        assert [tuple(sorted(m.items())) for m in got] == sorted(SAMPLES)
    finally:
        api.stop()


@pytest.fixture
def closed_api() -> Iterator[str]:
    service = ApiService(None, query_fn=ENGINE.query)  # type: ignore[arg-type]
    auth = Auth([TokenConfig(name="grafana", token="read-token-0123456789abcdef", role="read")],
                reads_open=False)
    server = StatusServer("127.0.0.1", 0, CollectorRegistry(), lambda: None,
                          data_source_routes(service, auth))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.address[1]}"
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/api/v1/query_range?query=up&start=1&end=2&step=1",
                                  "/api/v1/series?match[]=up", "/api/v1/labels",
                                  "/api/v1/label/target/values", "/api/v1/metadata",
                                  "/api/v1/status/buildinfo", "/federate?match[]=up",
                                  "/api/v1/query_exemplars?query=up"])
def test_reads_need_a_token_where_the_listener_is_not_loopback(closed_api: str,
                                                               path: str) -> None:
    assert httpx.get(closed_api + path, timeout=30).status_code == 401
    ok = httpx.get(closed_api + path, timeout=30,
                   headers={"Authorization": "Bearer read-token-0123456789abcdef"})
    assert ok.status_code == 200, ok.text


STORE_READS = ["/api/v1/query_range?query=up&start=1&end=2&step=1", "/api/v1/series?match[]=up",
               "/api/v1/labels", "/api/v1/label/target/values", "/api/v1/metadata",
               "/federate?match[]=up"]


def _serve(service: ApiService) -> tuple[StatusServer, str]:
    server = StatusServer("127.0.0.1", 0, CollectorRegistry(), lambda: None,
                          data_source_routes(service, Auth([], reads_open=True)))
    server.start()
    return server, f"http://127.0.0.1:{server.address[1]}"


@pytest.mark.parametrize("path", STORE_READS)
def test_every_store_read_takes_a_slot_of_the_query_pool(path: str) -> None:
    """With no slot free (max_concurrent_queries reached), each answers 503 at once."""
    server, url = _serve(ApiService(None, query_fn=ENGINE.query,  # type: ignore[arg-type]
                                    pool=QueryPool(max_concurrent=0)))
    try:
        r = httpx.get(url + path, timeout=30)
        assert r.status_code == 503 and "max_concurrent_queries" in r.json()["error"], r.text
    finally:
        server.stop()


def _range(url: str, expr: str, start: int, end: int, step: int) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/api/v1/query_range", timeout=60, params={
        "query": expr, "start": str(start / 1000), "end": str(end / 1000),
        "step": str(step / 1000)}).json()
    return body


def test_start_end_and_step_through_the_listener_with_duration_expressions_on(
        tmp_path: Path) -> None:
    """The daemon's `promql_features` on, each step evaluated in the query pool's child."""
    config = tmp_path / "sentinel.yml"
    config.write_text("promql_features: [promql-duration-expr, promql-experimental-functions]\n")
    features = frozenset(load_config(config, environ={}).promql_features)
    start, end, step = T0 + 20 * STEP_MS, T0 + 80 * STEP_MS + 7_000, 120_000
    steps = range(start, end + 1, step)
    api = serve_store(store_of(SAMPLES), lambda: T0 + POINTS * STEP_MS, features)
    try:
        def values(expr: str) -> dict[str, list[tuple[float, str]]]:
            body = _range(api.url, expr, start, end, step)
            assert body["status"] == "success", (expr, body)
            return {s["metric"].get("target", ""): [tuple(p) for p in s["values"]]
                    for s in body["data"]["result"]}

        def instant(expr: str, at: int) -> dict[str, str]:
            return {dict(s.labels)["target"]: format_float(s.value)
                    for s in ENGINE.query(expr, at)}

        waiting = "vllm:num_requests_waiting"
        for expr, at in ((f"{waiting} @ start()", start), (f"{waiting} @ end()", end)):
            assert values(expr) == {target: [(t / 1000, v) for t in steps]
                                    for target, v in instant(waiting, at).items()}, expr
        assert values("vector(step())") == {"": [(t / 1000, "120") for t in steps]}
        assert values("vector(end() - start())") == {
            "": [(t / 1000, format_float((end - start) / 1000)) for t in steps]}
        # A range of two steps (4m): 16 samples at 15 s in the left-open window.
        assert values(f"count_over_time({waiting}[step() * 2])") == {
            target: [(t / 1000, instant(f"count_over_time({waiting}[4m])", t)[target])
                     for t in steps] for target in ("tpu-a", "tpu-b")}
    finally:
        api.stop()


def test_with_a_remote_backend_at_start_and_end_are_refused_not_read_per_step() -> None:
    asked: list[tuple[str, int]] = []

    def remote(expr: str, at: int) -> float:
        asked.append((expr, at))
        return 1.0

    server, url = _serve(ApiService(None, query_fn=remote))  # type: ignore[arg-type]
    try:
        for expr in ("up @ start()", "sum(rate(up[5m:1m] @ end()))"):
            r = httpx.get(f"{url}/api/v1/query_range", timeout=30,
                          params={"query": expr, "start": "1", "end": "2", "step": "1"})
            assert r.status_code == 400, r.text
            assert r.json()["errorType"] == "bad_data" and "@ start()" in r.json()["error"]
        assert asked == []
    finally:
        server.stop()


def test_with_a_remote_backend_range_queries_work_and_store_reads_say_where_to_look() -> None:
    asked: list[tuple[str, int]] = []

    def remote(expr: str, at: int) -> float:
        asked.append((expr, at))
        return 1.0

    server, url = _serve(ApiService(None, query_fn=remote))  # type: ignore[arg-type]
    try:
        body = httpx.get(url + STORE_READS[0], timeout=30).json()
        assert body["data"] == {"resultType": "matrix", "result": [
            {"metric": {}, "values": [[1.0, "1"], [2.0, "1"]]}]}
        assert asked == [("up", 1000), ("up", 2000)]
        for path in STORE_READS[1:]:
            r = httpx.get(url + path, timeout=30)
            assert r.status_code == 503 and "query backend" in r.json()["error"], path
    finally:
        server.stop()


NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _incident(i: int, opened_h: float, resolved_h: float | None, target: str = "tpu-a"
              ) -> dict:
    opened = NOW - timedelta(hours=opened_h)
    return {"id": i, "group_key": f"k/{i}", "alertname": "VLLMDown", "target": target,
            "status": "open" if resolved_h is None else "resolved", "severity": "critical",
            "summary": "vLLM is down", "labels": {}, "opened_at": opened,
            "resolved_at": None if resolved_h is None else NOW - timedelta(hours=resolved_h),
            "updated_at": opened, "category": "down", "detect_ms": 0, "resolve_ms": None}


def test_annotations_are_the_incidents_overlapping_the_range(incident_db) -> None:  # noqa: ANN001
    with incident_db.session() as s:
        s.execute(insert(Incident), [
            _incident(1, 30, 29),  # before the range
            _incident(2, 10, 5),  # opened before, resolved inside
            _incident(3, 4, 3, "tpu-b"),  # inside
            _incident(4, 2, None),  # open
            _incident(5, -1, None)])  # after the range
    now = dt_to_ms(NOW)
    rows = incident_annotations(incident_db, {"from": str(now - 6 * 3600_000),
                                              "to": str(now - 1800_000)}, now)
    assert [r["id"] for r in rows] == [4, 3, 2]
    assert rows[0]["timeEnd"] == now and "open" in rows[0]["text"]
    assert rows[1] == {"id": 3, "time": now - 4 * 3600_000, "timeEnd": now - 3 * 3600_000,
                       "title": "VLLMDown on tpu-b",
                       "text": "#3 resolved (critical): vLLM is down",
                       "tags": "sentinel,VLLMDown,tpu-b,critical,resolved",
                       "status": "resolved", "severity": "critical", "alertname": "VLLMDown",
                       "target": "tpu-b"}
    assert [r["id"] for r in incident_annotations(incident_db, {"target": "tpu-b"}, now)] == [3]
    for bad in ({"from": "1.5"}, {"from": "9", "to": "8"}, {"since": "1"}):
        with pytest.raises(ApiError):
            incident_annotations(incident_db, bad, now)
