"""The PromQL engine, family by family, with hand-computed values."""

from __future__ import annotations

import math

import pytest

from sentinel.model import STALE_NAN, InstantSample, Vector, labels_of
from sentinel.promql import Engine, PromQLError
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.store.memory import MemoryStore

M = 60_000


def engine_for(series: dict[str, str], step_ms: int = M, semantics: int = 3) -> Engine:
    store = MemoryStore(retention_ms=10**12)
    for text, values in series.items():
        for i, v in enumerate(expand_values(values)):
            if v is not None:
                store.add(parse_series(text), i * step_ms, v)
    return Engine(store, semantics=semantics)


def as_dict(result: Vector | float) -> dict[str, float]:
    assert isinstance(result, list)
    return {",".join(f"{k}={v}" for k, v in s.labels): s.value for s in result}


def test_instant_selector_lookback_and_staleness() -> None:
    e = engine_for({'g{t="a"}': "1 2 stale 4", 'g{t="b"}': "7"}, semantics=2)
    assert as_dict(e.query("g", 1 * M)) == {"__name__=g,t=a": 2.0, "__name__=g,t=b": 7.0}
    assert as_dict(e.query("g", 2 * M)) == {"__name__=g,t=b": 7.0}  # stale marker: absent
    # 2.x: b's only sample is exactly 5m old at 5m: still in; a millisecond later it is not.
    assert as_dict(e.query("g", 5 * M)) == {"__name__=g,t=a": 4.0, "__name__=g,t=b": 7.0}
    assert as_dict(e.query("g", 5 * M + 1)) == {"__name__=g,t=a": 4.0}
    assert as_dict(e.query("g offset 1m", 2 * M)) == {"__name__=g,t=a": 2.0, "__name__=g,t=b": 7.0}


def test_lookback_is_left_open_in_prometheus_3() -> None:
    """3.x: a sample exactly 5m old is out of the lookback window (t - 5m, t]."""
    e = engine_for({'g{t="a"}': "1 2 stale 4", 'g{t="b"}': "7"})
    assert as_dict(e.query("g", 5 * M - 1)) == {"__name__=g,t=a": 4.0, "__name__=g,t=b": 7.0}
    assert as_dict(e.query("g", 5 * M)) == {"__name__=g,t=a": 4.0}


def test_range_is_left_open_in_prometheus_3() -> None:
    """3.x: (t - range, t], so a sample on the window's start is left out."""
    e = engine_for({"c": "1 2 stale 4 5"})
    assert e.query("count_over_time(c[2m])", 2 * M) == [InstantSample((), 1.0)]
    assert e.query("count_over_time(c[2m])", 4 * M) == [InstantSample((), 2.0)]
    assert e.query("count_over_time(c[3m])", 4 * M) == [InstantSample((), 2.0)]
    assert e.query("count_over_time(c[3m])", 4 * M - 1) == [InstantSample((), 2.0)]
    # A subquery's steps too: [3m:1m] at 3m steps at 1m, 2m, 3m (2.x: also 0m).
    assert e.query("count_over_time(vector(1)[3m:1m])", 3 * M) == [InstantSample((), 3.0)]
    closed = engine_for({"c": "1"}, semantics=2)
    assert closed.query("count_over_time(vector(1)[3m:1m])", 3 * M) == [InstantSample((), 4.0)]


def test_semantics_must_be_2_or_3() -> None:
    with pytest.raises(ValueError, match="semantics"):
        Engine(MemoryStore(), semantics=4)


def test_range_is_closed_on_both_ends_and_skips_stale() -> None:
    e = engine_for({"c": "1 2 stale 4 5"}, semantics=2)
    assert e.query("count_over_time(c[2m])", 2 * M) == [InstantSample((), 2.0)]
    assert e.query("count_over_time(c[2m])", 4 * M) == [InstantSample((), 2.0)]
    assert e.query("count_over_time(c[3m])", 4 * M) == [InstantSample((), 3.0)]


def test_rate_extrapolates_and_handles_resets() -> None:  # 2.x: closed windows
    e = engine_for({"r": "0 10 20 30 40 50"}, semantics=2)
    # Samples cover 0..5m exactly: 50 over 300s.
    assert as_dict(e.query("rate(r[5m])", 5 * M)) == {"": pytest.approx(50 / 300)}
    assert as_dict(e.query("increase(r[5m])", 5 * M)) == {"": pytest.approx(50.0)}
    reset = engine_for({"r": "10 20 5 15"}, semantics=2)
    # 10 + 5 (reset adds the pre-reset value 20: 15 - 10 + 20 = 25) over 3m, extrapolated
    # to the start (30s avg/2 is not used: first sample sits on the boundary).
    assert as_dict(reset.query("increase(r[3m])", 3 * M)) == {"": pytest.approx(25.0)}
    assert as_dict(reset.query("resets(r[3m])", 3 * M)) == {"": 1.0}
    assert as_dict(reset.query("irate(r[3m])", 2 * M)) == {"": pytest.approx(5 / 60)}
    assert as_dict(reset.query("idelta(r[3m])", 2 * M)) == {"": -15.0}
    assert reset.query("rate(r[1m])", 0) == []  # fewer than two samples: no output


def test_counter_zero_point_limits_extrapolation() -> None:
    e = engine_for({"r": "_ _ _ 1 3 5"})  # starts at 3m, would reach 0 at 2.5m
    # Range 5m ends at 5m: sampled 120s, avg 60s; to start 180s > 66s threshold,
    # but the zero point is 30s before the first sample, so extrapolate 30s.
    assert as_dict(e.query("increase(r[5m])", 5 * M)) == {"": pytest.approx(4 * 150 / 120)}


def test_delta_over_time_and_changes() -> None:  # 2.x: the sample at 0 is in [4m]
    e = engine_for({"g": "4 1 3 3 8"}, semantics=2)
    assert as_dict(e.query("delta(g[4m])", 4 * M)) == {"": 4.0}
    assert as_dict(e.query("avg_over_time(g[4m])", 4 * M)) == {"": pytest.approx(19 / 5)}
    assert as_dict(e.query("sum_over_time(g[4m])", 4 * M)) == {"": 19.0}
    assert as_dict(e.query("min_over_time(g[4m])", 4 * M)) == {"": 1.0}
    assert as_dict(e.query("max_over_time(g[4m])", 4 * M)) == {"": 8.0}
    assert as_dict(e.query("last_over_time(g[4m])", 4 * M)) == {"__name__=g": 8.0}
    assert as_dict(e.query("present_over_time(g[4m])", 4 * M)) == {"": 1.0}
    assert as_dict(e.query("quantile_over_time(0.5, g[4m])", 4 * M)) == {"": 3.0}
    assert as_dict(e.query("stdvar_over_time(g[4m])", 4 * M)) == {"": pytest.approx(5.36)}
    assert as_dict(e.query("stddev_over_time(g[4m])", 4 * M)) == {
        "": pytest.approx(math.sqrt(5.36))
    }
    assert as_dict(e.query("changes(g[4m])", 4 * M)) == {"": 3.0}
    assert as_dict(e.query("deriv(g[4m])", 4 * M)) == {"": pytest.approx(1 / 60)}


def test_histogram_quantile() -> None:
    e = engine_for(
        {
            'h_bucket{le="1"}': "10",
            'h_bucket{le="2"}': "30",
            'h_bucket{le="+Inf"}': "40",
            'g_bucket{le="1"}': "5",  # no +Inf bucket
            'k_bucket{le="+Inf"}': "5",  # a single bucket
        }
    )
    out = as_dict(e.query("histogram_quantile(0.5, h_bucket)", 0))
    assert out == {"": pytest.approx(1.5)}
    for name in ("g_bucket", "k_bucket"):
        (got,) = e.query(f"histogram_quantile(0.5, {name})", 0)  # type: ignore[misc]
        assert math.isnan(got.value)
    with pytest.raises(PromQLError, match="same labelset"):  # both lose their names
        e.query('histogram_quantile(0.5, {__name__=~"g_bucket|k_bucket"})', 0)
    assert as_dict(e.query("histogram_quantile(0.99, h_bucket)", 0)) == {"": 2.0}


def test_aggregations() -> None:
    e = engine_for(
        {
            'm{job="a", i="1"}': "1",
            'm{job="a", i="2"}': "3",
            'm{job="b", i="3"}': "10",
        }
    )
    assert as_dict(e.query("sum by (job) (m)", 0)) == {"job=a": 4.0, "job=b": 10.0}
    assert as_dict(e.query("avg without (i) (m)", 0)) == {"job=a": 2.0, "job=b": 10.0}
    assert as_dict(e.query("min(m)", 0)) == {"": 1.0}
    assert as_dict(e.query("max(m)", 0)) == {"": 10.0}
    assert as_dict(e.query("count by (job) (m)", 0)) == {"job=a": 2.0, "job=b": 1.0}
    assert as_dict(e.query("group(m)", 0)) == {"": 1.0}
    assert as_dict(e.query("stdvar by (job) (m)", 0)) == {"job=a": 1.0, "job=b": 0.0}
    assert as_dict(e.query("stddev by (job) (m)", 0)) == {"job=a": 1.0, "job=b": 0.0}
    assert as_dict(e.query("topk(1, m)", 0)) == {"__name__=m,i=3,job=b": 10.0}
    assert as_dict(e.query("bottomk by (job) (1, m)", 0)) == {
        "__name__=m,i=1,job=a": 1.0,
        "__name__=m,i=3,job=b": 10.0,
    }
    assert e.query("topk(0, m)", 0) == []
    assert as_dict(e.query("quantile(0.5, m)", 0)) == {"": 3.0}
    assert as_dict(e.query('count_values("v", m)', 0)) == {"v=1": 1.0, "v=3": 1.0, "v=10": 1.0}


def test_topk_ties_keep_the_first_series_as_prometheus_heap_does() -> None:
    e = engine_for({'m{i="a"}': "0.4", 'm{i="b"}': "0.7", 'm{i="c"}': "0.7", 'm{i="d"}': "0.7"})
    assert set(as_dict(e.query("topk(2, m)", 0))) == {"__name__=m,i=b", "__name__=m,i=c"}


def test_binary_arithmetic_comparison_and_names() -> None:
    e = engine_for({'a{t="1"}': "6", 'a{t="2"}': "2", 'b{t="1"}': "3"})
    assert as_dict(e.query("a / b", 0)) == {"t=1": 2.0}
    assert as_dict(e.query("a > 3", 0)) == {"__name__=a,t=1": 6.0}
    assert as_dict(e.query("a > bool 3", 0)) == {"t=1": 1.0, "t=2": 0.0}
    assert as_dict(e.query("3 < a", 0)) == {"__name__=a,t=1": 6.0}
    assert as_dict(e.query("a > b", 0)) == {"__name__=a,t=1": 6.0}
    assert as_dict(e.query("a ^ 2 % 5", 0)) == {"t=1": 1.0, "t=2": 4.0}
    assert as_dict(e.query("-a", 0)) == {"t=1": -6.0, "t=2": -2.0}
    assert as_dict(e.query("a / 0", 0)) == {"t=1": math.inf, "t=2": math.inf}
    assert e.query("2 * (3 + 4)", 0) == 14.0
    assert e.query("0 / 0", 0) != e.query("0 / 0", 0)  # NaN
    assert e.query("(-8) ^ (1/3)", 0) != e.query("(-8) ^ (1/3)", 0)


def test_vector_matching_on_ignoring_and_groups() -> None:
    e = engine_for(
        {
            'used{t="a", e="0"}': "2",
            'used{t="a", e="1"}': "4",
            'info{t="a", v="x"}': "1",
            'cap{t="a"}': "8",
        }
    )
    assert as_dict(e.query("used / on(t) group_left cap", 0)) == {"e=0,t=a": 0.25, "e=1,t=a": 0.5}
    assert as_dict(e.query("used * on(t) group_left(v) info", 0)) == {
        "e=0,t=a,v=x": 2.0,
        "e=1,t=a,v=x": 4.0,
    }
    assert as_dict(e.query("cap - on(t) group_right used", 0)) == {"e=0,t=a": 6.0, "e=1,t=a": 4.0}
    assert as_dict(e.query("used + ignoring(e) group_left cap", 0)) == {
        "e=0,t=a": 10.0,
        "e=1,t=a": 12.0,
    }
    with pytest.raises(PromQLError, match="many-to-many matching not allowed"):
        e.query("cap / on(t) used", 0)
    with pytest.raises(PromQLError, match="many-to-one matching must be explicit"):
        e.query("used / on(t) cap", 0)


def test_set_operators() -> None:
    e = engine_for({'a{t="1"}': "1", 'a{t="2"}': "2", 'b{t="2"}': "5", 'b{t="3"}': "6"})
    assert as_dict(e.query("a and b", 0)) == {"__name__=a,t=2": 2.0}  # names never match
    assert as_dict(e.query('a and on(t) b{t="3"}', 0)) == {}
    assert as_dict(e.query("a and on(t) b", 0)) == {"__name__=a,t=2": 2.0}
    assert as_dict(e.query("a unless on(t) b", 0)) == {"__name__=a,t=1": 1.0}
    assert as_dict(e.query("a or on(t) b", 0)) == {
        "__name__=a,t=1": 1.0,
        "__name__=a,t=2": 2.0,
        "__name__=b,t=3": 6.0,
    }
    assert len(as_dict(e.query("a or b", 0))) == 3  # b{t="2"} is matched by a{t="2"}


def test_an_empty_left_side_of_and_or_unless_leaves_the_right_side_unevaluated() -> None:
    e = engine_for({'a{t="1"}': "1", 'b{t="1", e="0"}': "5", 'b{t="1", e="1"}': "6"})
    failing = "(b * on(t) b)"  # many-to-many: an error whenever it is evaluated
    with pytest.raises(PromQLError, match="many-to-many"):
        e.query(f"a and {failing}", 0)
    with pytest.raises(PromQLError, match="many-to-many"):
        e.query(f"a unless {failing}", 0)
    # Empty whatever the right side holds: not evaluated, so no error (Prometheus 2.42
    # would raise it; results agree wherever neither side fails, tests/promql_cases).
    assert e.query(f"a > 10 and {failing}", 0) == []
    assert e.query(f"a > 10 unless {failing}", 0) == []
    with pytest.raises(PromQLError, match="many-to-many"):  # `or` still needs both
        e.query(f"a > 10 or {failing}", 0)


def test_functions() -> None:
    e = engine_for({'x{a="1", b="v-2"}': "-2.5"})
    assert as_dict(e.query("abs(x)", 0)) == {"a=1,b=v-2": 2.5}
    assert as_dict(e.query("ceil(x)", 0)) == {"a=1,b=v-2": -2.0}
    assert as_dict(e.query("floor(x)", 0)) == {"a=1,b=v-2": -3.0}
    assert as_dict(e.query("round(x)", 0)) == {"a=1,b=v-2": -2.0}  # ties round up
    assert as_dict(e.query("clamp(x, -1, 1)", 0)) == {"a=1,b=v-2": -1.0}
    assert e.query("clamp(x, 1, -1)", 0) == []
    assert as_dict(e.query("clamp_min(x, 0)", 0)) == {"a=1,b=v-2": 0.0}
    assert as_dict(e.query("clamp_max(x, -3)", 0)) == {"a=1,b=v-2": -3.0}
    assert e.query("time()", 90_000) == 90.0
    assert as_dict(e.query("timestamp(x)", 2 * M)) == {"a=1,b=v-2": 0.0}
    assert as_dict(e.query("vector(1)", 0)) == {"": 1.0}
    assert e.query("scalar(x)", 0) == -2.5
    assert as_dict(e.query('label_replace(x, "n", "$1", "b", "v-(.*)")', 0)) == {
        "__name__=x,a=1,b=v-2,n=2": -2.5
    }
    assert as_dict(e.query('label_replace(x, "b", "", "b", ".*")', 0)) == {"__name__=x,a=1": -2.5}
    assert as_dict(e.query('label_join(x, "j", ":", "a", "b")', 0)) == {
        "__name__=x,a=1,b=v-2,j=1:v-2": -2.5
    }
    with pytest.raises(PromQLError, match="destination label name"):
        e.query('label_replace(x, "1bad", "", "b", ".*")', 0)


def test_sort_orders() -> None:
    e = engine_for({'x{a="1"}': "3", 'x{a="2"}': "NaN", 'x{a="3"}': "1"})
    assert [s.labels[1][1] for s in e.query("sort(x)", 0)] == ["3", "1", "2"]  # type: ignore[union-attr]
    assert [s.labels[1][1] for s in e.query("sort_desc(x)", 0)] == ["1", "3", "2"]  # type: ignore[union-attr]


def test_absent() -> None:
    e = engine_for({'up{job="a"}': "1"})
    assert e.query('absent(up{job="a"})', 0) == []
    assert as_dict(e.query('absent(up{job="b", env=~"p.*"})', 0)) == {"job=b": 1.0}
    assert as_dict(e.query('absent_over_time(up{job="a"}[1m])', 10 * M)) == {"job=a": 1.0}
    assert e.query('absent_over_time(up{job="a"}[1m])', 30_000) == []


def test_duplicate_labelsets_are_an_error() -> None:
    e = engine_for({'a{t="1"}': "1", 'b{t="1"}': "2"})
    with pytest.raises(PromQLError, match="same labelset"):
        e.query('abs({__name__=~"a|b"})', 0)
    with pytest.raises(PromQLError, match="same labelset"):
        e.query('rate({__name__=~"a|b"}[5m]) or {__name__=~"a|b"} * 2', 0)


def test_regex_matchers_and_name_matchers() -> None:
    e = engine_for({'x{a="ab"}': "1", 'x{a="b"}': "2", 'y{a="ab"}': "3"})
    assert set(as_dict(e.query('x{a=~"a.*"}', 0))) == {"__name__=x,a=ab"}
    assert set(as_dict(e.query('x{a!~"a.*"}', 0))) == {"__name__=x,a=b"}
    assert set(as_dict(e.query('{__name__=~"x|y", a="ab"}', 0))) == {
        "__name__=x,a=ab",
        "__name__=y,a=ab",
    }
    assert e.query('x{a=~"a"}', 0) == []  # anchored


def test_query_accepts_compiled_expressions_and_string_errors() -> None:
    from sentinel.promql import compile_expr

    e = engine_for({"x": "1"})
    assert e.query(compile_expr("x + 1"), 0) == [InstantSample((), 2.0)]
    with pytest.raises(PromQLError):
        e.query("rate(", 0)
    assert e.max_lookback_ms("rate(x[10m])") == 600_000


def test_many_series_evaluate_quickly_enough() -> None:
    """~1000 series x 60 samples: one evaluation must not be quadratic (no timing asserted)."""
    store = MemoryStore(retention_ms=10**12)
    for i in range(1000):
        labels = labels_of({"__name__": "req_total", "target": f"t{i % 50}", "i": str(i)})
        for t in range(60):
            store.add(labels, t * 5000, float(t * i))
    result = Engine(store).query("sum by (target) (rate(req_total[1m]))", 59 * 5000)
    assert isinstance(result, list) and len(result) == 50


def test_stale_marker_constant_is_recognised_in_values() -> None:
    values = expand_values("1 stale")
    assert values[0] == 1.0
    assert values[1] is not None and math.isnan(values[1])
    assert str(STALE_NAN) == "nan"


@pytest.mark.parametrize(
    ("value", "text"),
    [(math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf"), (0.1, "0.1"),
     (1e22, "1" + "0" * 22), (1e-7, "0.0000001"), (-0.0, "-0"), (42.0, "42")],
)  # fmt: skip
def test_format_float_as_prometheus(value: float, text: str) -> None:
    from sentinel.promql import format_float

    assert format_float(value) == text
