"""A real Prometheus client reads the fleet through Sentinel as it reads Prometheus.

The same samples go into Sentinel's store (served on its real listener) and
into a real `prometheus` (a block backfilled with `promtool tsdb`); then
`promtool query instant|range|series|labels` runs against both and must print
the same. /federate is read by a real Prometheus that federates from Sentinel.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from datasource_helpers import (
    POINTS,
    STEP_MS,
    SentinelApi,
    fleet_samples,
    prometheus_over,
    serve_store,
    store_of,
)
from fixtures_e2e import wait_for
from fixtures_prometheus import prometheus_binary, start_listening

pytestmark = pytest.mark.integration

# A fixed past time, minute-aligned: both sides hold the same 30 minutes from it.
T0_MS = (int(time.time()) // 3600 - 3) * 3600 * 1000
END_MS = T0_MS + (POINTS - 1) * STEP_MS
INSTANT = [
    "vllm:num_requests_waiting",
    'vllm:kv_cache_usage_perc{target="tpu-b"}',
    "sum by (target) (rate(vllm:request_success_total[5m]))",
    'sum by (finished_reason) (increase(vllm:request_success_total{finished_reason!="stop"}[10m]))',
    "histogram_quantile(0.5, sum by (target, le) "
    "(rate(vllm:time_to_first_token_seconds_bucket[5m])))",
    "vllm:num_preemptions_total",  # gone: its last sample is older than the lookback
    "up",
    "scalar(sum(vllm:num_requests_waiting))",
    "max_over_time(vllm:kv_cache_usage_perc[10m]) > 0.5",
]
RANGE = [
    "vllm:num_requests_waiting",
    "sum by (target) (rate(vllm:request_success_total[2m]))",
    "histogram_quantile(0.3, rate(vllm:time_to_first_token_seconds_bucket[3m]))",
    "vllm:num_preemptions_total",  # ends half way
    "up",  # starts late
    "time()",
    "1 + vllm:kv_cache_usage_perc",
    "vllm:num_requests_waiting @ start()",  # the range's ends, the same at every step
    "rate(vllm:request_success_total[5m] @ end()) - rate(vllm:request_success_total[5m])",
    'label_replace(up @ end(), "note", "@ start()", "", "")',  # not inside a string
]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    prometheus_binary()
    samples = fleet_samples(T0_MS)
    # The Prometheus compared with is Debian's 2.42: Sentinel answers as it with
    # `promql_semantics: 2` (closed windows, 2.x arithmetic), the default being 3's.
    api = serve_store(store_of(samples), lambda: END_MS + 60_000, semantics=2)
    proc, prom_url = prometheus_over(samples, tmp_path_factory.mktemp("prom"))
    try:
        yield api.url, prom_url
    finally:
        api.stop()
        proc.terminate()
        proc.wait(30)


def promtool(*args: str) -> str:
    done = subprocess.run(["promtool", "query", *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _s(ms: int) -> str:
    return f"{ms / 1000:.3f}"


@pytest.mark.parametrize("expr", INSTANT)
def test_instant_query_prints_what_prometheus_prints(both: tuple[str, str], expr: str) -> None:
    sentinel, prom = both
    printed = ""
    for at in (T0_MS + 20 * STEP_MS, END_MS, END_MS + 4 * 60_000):
        ours = promtool("instant", f"--time={_s(at)}", sentinel, expr)
        theirs = promtool("instant", f"--time={_s(at)}", prom, expr)
        if expr.startswith("histogram_quantile("):
            # Prometheus prints histogram_quantile's series in an order that varies from run
            # to run (seen here: its buckets are grouped in a Go map); Sentinel's is fixed.
            ours, theirs = "".join(sorted(ours.splitlines(True))), \
                "".join(sorted(theirs.splitlines(True)))
        assert ours == theirs, (expr, at)
        printed += ours
    assert printed.strip(), expr


@pytest.mark.parametrize("expr", RANGE)
def test_range_query_prints_what_prometheus_prints(both: tuple[str, str], expr: str) -> None:
    sentinel, prom = both
    printed = ""
    for start, end in ((T0_MS - 60_000, END_MS + 120_000), (T0_MS + 600_000, END_MS - 600_000)):
        args = [f"--start={_s(start)}", f"--end={_s(end)}", "--step=37s"]
        ours = promtool("range", *args, sentinel, expr)
        theirs = promtool("range", *args, prom, expr)
        assert ours == theirs, (expr, start, end)
        printed += ours
    assert printed.strip(), expr


@pytest.mark.parametrize("matches", [
    ["vllm:num_requests_waiting"],
    ['{target="tpu-a"}'],
    ['{__name__=~"vllm:.*", finished_reason=~"stop|abort"}', "up"],
])
def test_series_query_prints_what_prometheus_prints(both: tuple[str, str],
                                                     matches: list[str]) -> None:
    sentinel, prom = both
    flags = [f"--match={m}" for m in matches]
    for window in ([], [f"--start={_s(T0_MS)}", f"--end={_s(T0_MS + 5 * STEP_MS)}"]):
        ours = promtool("series", *flags, *window, sentinel)
        theirs = promtool("series", *flags, *window, prom)
        assert ours.strip()
        assert ours == theirs, (matches, window)


@pytest.mark.parametrize("name", ["__name__", "target", "finished_reason", "le", "absent"])
def test_label_values_print_what_prometheus_prints(both: tuple[str, str], name: str) -> None:
    sentinel, prom = both
    assert promtool("labels", sentinel, name) == promtool("labels", prom, name)
    flags = ["--match=vllm:request_success_total", f"--start={_s(T0_MS)}", f"--end={_s(END_MS)}"]
    assert promtool("labels", *flags, sentinel, name) == promtool("labels", *flags, prom, name)


def test_label_names_and_buildinfo_answer_as_prometheus(both: tuple[str, str]) -> None:
    sentinel, prom = both
    for params in ({}, {"match[]": "up"}):
        ours = httpx.get(f"{sentinel}/api/v1/labels", params=params, timeout=30).json()
        theirs = httpx.get(f"{prom}/api/v1/labels", params=params, timeout=30).json()
        assert ours == theirs
    info = httpx.get(f"{sentinel}/api/v1/status/buildinfo", timeout=30).json()
    assert info["status"] == "success"
    assert set(httpx.get(f"{prom}/api/v1/status/buildinfo").json()["data"]) <= set(info["data"])


def test_range_query_is_refused_as_prometheus_refuses_it(both: tuple[str, str]) -> None:
    sentinel, _ = both
    base = {"query": "up", "start": _s(T0_MS), "end": _s(END_MS), "step": "15s"}
    for change, param in (({"step": "0"}, "step"), ({"end": _s(T0_MS - 1000)}, "end"),
                          ({"step": "0.01"}, "step"), ({"start": ""}, "start")):
        r = httpx.post(f"{sentinel}/api/v1/query_range", data=base | change, timeout=30)
        assert r.status_code == 400 and r.json()["param"] == param, r.text
    r = httpx.get(f"{sentinel}/api/v1/query_range", params=base | {"query": "sum("}, timeout=30)
    assert r.status_code == 400 and r.json()["errorType"] == "bad_data"
    r = httpx.get(f"{sentinel}/api/v1/series", timeout=30)
    assert r.status_code == 400 and r.json()["param"] == "match[]"


def test_a_real_prometheus_federates_the_selected_series(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    samples = fleet_samples(now_ms - (POINTS - 1) * STEP_MS)
    api: SentinelApi = serve_store(store_of(samples), lambda: int(time.time() * 1000))
    try:
        host_port = api.url.removeprefix("http://")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: federate\n"
            "    honor_labels: true\n"
            "    metrics_path: /federate\n"
            "    params: {'match[]': ['vllm:num_requests_waiting', "
            "'{__name__=\"vllm:request_success_total\", finished_reason=\"abort\"}']}\n"
            f"    static_configs: [{{targets: ['{host_port}']}}]\n")
        proc, prom = start_listening(
            [prometheus_binary(), f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", "--web.listen-address=127.0.0.1:0",
             "--log.level=info"], tmp_path / "prometheus.log")
        try:
            def federated() -> list[dict[str, str]] | None:
                body = httpx.get(f"{prom}/api/v1/series",
                                 params={"match[]": '{job="vllm"}'}, timeout=10).json()
                return body["data"] if len(body["data"]) >= 4 else None

            got = wait_for(federated, 120, "Prometheus to federate the series from Sentinel")
            assert got is not None
            names = sorted((s["__name__"], s["target"], s.get("finished_reason", ""))
                           for s in got)
            assert names == [("vllm:num_requests_waiting", "tpu-a", ""),
                             ("vllm:num_requests_waiting", "tpu-b", ""),
                             ("vllm:request_success_total", "tpu-a", "abort"),
                             ("vllm:request_success_total", "tpu-b", "abort")]
            # Each sample at the time Sentinel stored it, with its value.
            last_t, _ = samples[next(k for k in samples if dict(k)["__name__"] ==
                                     "vllm:num_requests_waiting")][-1]
            body = httpx.get(f"{prom}/api/v1/query", timeout=10, params={
                "query": "timestamp(vllm:num_requests_waiting)",
                "time": f"{last_t / 1000 + 1:.3f}"}).json()
            assert {float(s["value"][1]) for s in body["data"]["result"]} == {last_t / 1000}
        finally:
            proc.terminate()
            proc.wait(30)
    finally:
        api.stop()
