"""Functions Prometheus 3 added (sentinel/promql/prom3funcs.py), checked by hand."""

from __future__ import annotations

import math

import pytest

from sentinel.promql import Engine, PromQLError, compile_expr
from sentinel.promql.features import ALL
from sentinel.promql.prom3funcs import bucket_fraction, natural_less
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.store.memory import MemoryStore

M = 60_000


def engine_for(series: dict[str, str], step_ms: int = M) -> Engine:
    store = MemoryStore(retention_ms=10**12)
    for text, values in series.items():
        for i, v in enumerate(expand_values(values)):
            if v is not None:
                store.add(parse_series(text), i * step_ms, v)
    return Engine(store, features=ALL)


def values(result: object) -> list[float]:
    assert isinstance(result, list)
    return [s.value for s in result]


def test_over_time_functions() -> None:
    e = engine_for({"m": "3 1 4 1 5 NaN 9"})
    assert values(e.query("first_over_time(m[3m])", 4 * M)) == [4.0]  # (1m, 4m]: 4 1 5
    assert [s.labels for s in e.query("first_over_time(m[3m])", 4 * M)] == [  # type: ignore[union-attr]
        (("__name__", "m"),)]
    assert values(e.query("ts_of_first_over_time(m[3m])", 4 * M)) == [120.0]
    assert values(e.query("ts_of_last_over_time(m[3m])", 4 * M)) == [240.0]
    assert values(e.query("ts_of_max_over_time(m[5m])", 4 * M)) == [240.0]
    assert values(e.query("ts_of_min_over_time(m[5m])", 4 * M)) == [180.0]  # the last 1
    assert values(e.query("mad_over_time(m[5m])", 4 * M)) == [2.0]  # median 3: |0 2 1 2 2|
    assert math.isnan(values(e.query("mad_over_time(m[5m])", 6 * M))[0])


def test_min_of_max_of_are_gos_min_max() -> None:
    e = engine_for({})
    assert e.query("min_of(3, 5)", 0) == 3.0 and e.query("max_of(3, 5)", 0) == 5.0
    assert math.isnan(e.query("max_of(NaN, 3)", 0))  # type: ignore[arg-type]


@pytest.mark.parametrize(("a", "b", "less"), [
    ("a2", "a10", True), ("a10", "a2", False), ("a", "b", True), ("x1y2", "x1y10", True),
    ("10", "9", False), ("abc", "abc", True),  # facette/natsort: equal is "less"
])
def test_natural_order(a: str, b: str, less: bool) -> None:
    assert natural_less(a, b) is less


def test_sort_by_label_is_natural_then_by_labels() -> None:
    e = engine_for({'h{i="10",g="a"}': "1", 'h{i="2",g="a"}': "2", 'h{i="2",g="b"}': "3"})
    up = e.query('sort_by_label(h, "i")', 0)
    assert values(up) == [2.0, 3.0, 1.0]
    assert values(e.query('sort_by_label_desc(h, "i")', 0)) == [1.0, 3.0, 2.0]
    with pytest.raises(PromQLError, match="experimental"):
        compile_expr('sort_by_label(h, "i")')


def test_histogram_fraction_and_quantiles_of_classic_buckets() -> None:
    buckets = [(1.0, 10.0), (2.0, 30.0), (math.inf, 40.0)]
    assert bucket_fraction(0, 1, buckets) == 0.25
    assert bucket_fraction(1, 1.5, buckets) == 0.25  # half of the (1, 2] bucket's 20
    assert bucket_fraction(-math.inf, math.inf, buckets) == 1.0
    assert bucket_fraction(2, 1, buckets) == 0.0
    assert math.isnan(bucket_fraction(0, 1, [(1.0, 10.0)]))  # no +Inf bucket
    e = engine_for({'b_bucket{le="1"}': "10", 'b_bucket{le="2"}': "30",
                    'b_bucket{le="+Inf"}': "40"})
    (frac,) = e.query("histogram_fraction(0, 1.5, b_bucket)", 0)  # type: ignore[misc]
    assert frac.labels == () and frac.value == 0.5
    got = {dict(s.labels)["q"]: s.value
           for s in e.query('histogram_quantiles(b_bucket, "q", 0.5, 0.25)', 0)}  # type: ignore[union-attr]
    assert got == {"0.5": 1.5, "0.25": 1.0}


INFO = {
    'm{instance="a",job="1",label="v"}': "0 1 2",
    'o{instance="a",job="2"}': "5 5 5",
    'target_info{instance="a",job="1",data="info",more="x"}': "1 1 1",
    'build_info{instance="a",job="1",version="3"}': "1 1 1",
}


def test_info_adds_the_data_labels_of_the_matching_info_series() -> None:
    e = engine_for(INFO, step_ms=5 * M)

    def labels(expr: str) -> list[dict[str, str]]:
        return [dict(s.labels) for s in e.query(expr, 10 * M)]  # type: ignore[union-attr]

    assert labels("info(m)") == [{"__name__": "m", "instance": "a", "job": "1", "label": "v",
                                  "data": "info", "more": "x"}]
    assert labels('info(m, {data=~".+"})') == [
        {"__name__": "m", "instance": "a", "job": "1", "label": "v", "data": "info"}]
    assert labels('info(m, {__name__="build_info"})') == [
        {"__name__": "m", "instance": "a", "job": "1", "label": "v", "version": "3"}]
    assert labels("info(o)") == [{"__name__": "o", "instance": "a", "job": "2"}]  # no match
    assert labels('info(o, {data=~".+"})') == []  # a matcher that needs a value drops it
    assert labels('info(o, {data=~".*"})') == [{"__name__": "o", "instance": "a", "job": "2"}]
    assert labels("info(target_info)")[0]["data"] == "info"  # an info series passes as is
    with pytest.raises(PromQLError, match="experimental"):
        compile_expr("info(m)")


def test_xxh64_known_vectors() -> None:
    from sentinel.promql.limitagg import xxh64

    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    assert xxh64(b"Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1
    assert xxh64(bytes(range(100))) == xxh64(bytes(range(100)))  # the 32-byte stripes path


def test_limitk_keeps_the_first_k_of_each_group_and_limit_ratio_a_stable_share() -> None:
    series = {f'h{{i="{i}",g="{"ab"[i % 2]}"}}': str(i) for i in range(20)}
    e = engine_for(series)
    got = e.query("limitk by (g) (2, h)", 0)
    assert sorted(dict(s.labels)["g"] for s in got) == ["a", "a", "b", "b"]  # type: ignore[union-attr]
    assert e.query("limitk(0, h)", 0) == []
    half = {s.labels for s in e.query("limit_ratio(0.5, h)", 0)}  # type: ignore[union-attr]
    rest = {s.labels for s in e.query("limit_ratio(-0.5, h)", 0)}  # type: ignore[union-attr]
    assert half.isdisjoint(rest) and len(half | rest) == 20  # r and -(1-r) split the set
    assert 3 <= len(half) <= 17
    assert len(e.query("limit_ratio(1, h)", 0)) == 20  # type: ignore[arg-type]
    with pytest.raises(PromQLError, match="experimental"):
        compile_expr("limitk(1, h)")
