"""Prometheus 3 behaviour and the deviations from Prometheus fixed for issue 52."""

from __future__ import annotations

import io
import math
from pathlib import Path

from sentinel.model import labels_of
from sentinel.promql import Engine
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.rules import ruletest
from sentinel.store.memory import MemoryStore

M = 60_000


def engine_for(series: dict[str, str], step_ms: int = M, semantics: int = 3) -> Engine:
    store = MemoryStore(retention_ms=10**12)
    for text, values in series.items():
        for i, v in enumerate(expand_values(values)):
            if v is not None:
                store.add(parse_series(text), i * step_ms, v)
    return Engine(store, semantics=semantics)


def _pairs(result: object) -> list[tuple[str, float]]:
    assert isinstance(result, list)
    return [(dict(s.labels).get("i", ""), s.value) for s in result]


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and (x[1] == y[1] or (math.isnan(x[1]) and math.isnan(y[1])))
        for x, y in zip(a, b, strict=True))


def test_topk_and_bottomk_put_nan_last() -> None:
    """Prometheus sorts the heap with a Less in which NaN is least, reversed: NaN last."""
    e = engine_for({'h{i="0"}': "100", 'h{i="1"}': "200", 'h{i="2"}': "NaN"})
    assert _same(_pairs(e.query("topk(3, h)", 0)), [("1", 200.0), ("0", 100.0), ("2", math.nan)])
    assert _same(_pairs(e.query("bottomk(3, h)", 0)),
                 [("0", 100.0), ("1", 200.0), ("2", math.nan)])
    # A NaN is only kept when there is room for it.
    assert _pairs(e.query("topk(2, h)", 0)) == [("1", 200.0), ("0", 100.0)]
    assert _pairs(e.query("bottomk(1, h)", 0)) == [("0", 100.0)]


def test_predict_linear_extrapolates_from_the_evaluation_time_not_the_at_time() -> None:
    """Prometheus 2.42's functions.test: the regression's intercept is at the evaluation
    time (enh.Ts) even when the range is pinned with `@`."""
    e = engine_for({"c": "0+10x4 0+10x5"}, step_ms=5 * M, semantics=2)
    expr = "predict_linear(c[100m] @ 3000, 3600)"
    at_50m, at_10m, at_70m = (e.query(expr, t * M) for t in (50, 10, 70))
    assert _pairs(at_50m) == [("", 76.81818181818181)]
    assert _pairs(at_10m) == [("", 51.36363636363637)]
    assert _pairs(at_70m) == [("", 89.54545454545455)]


def test_at_start_and_end_are_the_range_querys_ends() -> None:
    e = engine_for({"g": "0+1x10"})
    for t in (2 * M, 3 * M, 4 * M):
        assert _pairs(e.query("g @ start()", t, start_ms=2 * M, end_ms=4 * M)) == [("", 2.0)]
        assert _pairs(e.query("g @ end()", t, start_ms=2 * M, end_ms=4 * M)) == [("", 4.0)]
    assert _pairs(e.query("g @ start()", 5 * M)) == [("", 5.0)]  # an instant query: its time


TWICE = """\
rule_files: []
tests:
  - interval: 1m
    input_series:
      - {series: 'x{a="1"}', values: '1 1 1'}
      - {series: 'y', values: '5'}
      - {series: 'x{a="1"}', values: '7 7 7'}
    promql_expr_test:
      - expr: x
        eval_time: 2m
        exp_samples: [{labels: 'x{a="1"}', value: 7}]
"""


def test_a_series_listed_twice_keeps_its_last_definition(tmp_path: Path) -> None:
    """As promtool: its load command keys the definitions by label set."""
    path = tmp_path / "twice_test.yaml"
    path.write_text(TWICE)
    out = io.StringIO()
    assert ruletest.run_rule_tests([str(path)], out) == 0, out.getvalue()


def test_windows_at_a_sample_boundary_differ_between_2_and_3() -> None:
    """rate over [5m] with a sample exactly at t - 5m: 2.x sees 6 samples, 3.x 5."""
    series = {"r": "0 10 20 30 40 50"}
    two, three = engine_for(series, semantics=2), engine_for(series)
    assert _pairs(two.query("count_over_time(r[5m])", 5 * M)) == [("", 6.0)]
    assert _pairs(three.query("count_over_time(r[5m])", 5 * M)) == [("", 5.0)]
    # 3.x: 40 over 240s sampled, extrapolated by 60s to the window's start (avg step 60s
    # is under the 66s threshold): 50 over 300s, as 2.x gets from its sample at 0.
    (rate3,) = three.query("rate(r[5m])", 5 * M)  # type: ignore[misc]
    assert math.isclose(rate3.value, 50 / 300)
    assert labels_of({}) == rate3.labels


TEN = {'d{p="a"}': "2", 'd{p="b"}': "8", 'd{p="c"}': "1e100", 'd{p="d"}': "-1e100"}


def test_sum_and_avg_are_compensated_in_prometheus_3() -> None:
    """Prometheus 3 sums with Kahan-Neumaier compensation: 2 + 8 survive ±1e100."""
    three, two = engine_for(TEN), engine_for(TEN, semantics=2)
    assert _pairs(three.query("sum(d)", 0)) == [("", 10.0)]
    assert _pairs(three.query("avg(d)", 0)) == [("", 2.5)]
    assert _pairs(two.query("sum(d)", 0)) == [("", 0.0)]  # 2.x: plain addition


def test_avg_over_time_sums_then_divides_in_prometheus_3() -> None:
    series = {"m": "1 1e100 1 -1e100"}
    three = engine_for(series, step_ms=10_000)
    assert _pairs(three.query("avg_over_time(m[2m])", M)) == [("", 0.5)]
    assert _pairs(three.query("sum_over_time(m[2m])", M)) == [("", 2.0)]
    # Past the float range the sum overflows: the mean is taken incrementally instead.
    big = engine_for({"m": "1.5e308 1.5e308 -1.5e308"}, step_ms=10_000)
    (mean,) = _pairs(big.query("avg_over_time(m[2m])", M))
    assert math.isclose(mean[1], 0.5e308)


def test_stddev_of_a_group_that_starts_with_nan_or_inf_is_nan_in_prometheus_3() -> None:
    series = {'s{l="a"}': "NaN", 's{l="b"}': "1", 's{l="c"}': "Inf", 's{l="d"}': "2"}
    three, two = engine_for(series), engine_for(series, semantics=2)
    by_l = "stddev by (l) (s)"
    assert [(dict(s.labels)["l"], s.value) for s in three.query(by_l, 0)  # type: ignore[union-attr]
            if not math.isnan(s.value)] == [("b", 0.0), ("d", 0.0)]
    assert [s.value for s in two.query(by_l, 0)] == [0.0] * 4  # type: ignore[union-attr]


def test_counter_extrapolation_limits_the_halved_start_by_the_zero_point() -> None:
    """3.x: too far from the window start → half a step, then cut at the zero point
    (2.x checked the zero point against the full distance first)."""
    series = {"c": "10+10x10"}  # 10 at 0m ... 110 at 50m, one sample each 5m
    three = engine_for(series, step_ms=5 * M)
    two = engine_for(series, step_ms=5 * M, semantics=2)
    assert _pairs(three.query("increase(c[100m])", 50 * M)) == [("", 105.0)]
    assert _pairs(two.query("increase(c[100m])", 50 * M)) == [("", 110.00000000000001)]


def test_fill_modifiers_are_experimental_and_fill_the_missing_side() -> None:
    from sentinel.promql import PromQLError, compile_expr
    from sentinel.promql.features import FILL_MODIFIERS

    series = {'l{k="a"}': "10", 'l{k="c"}': "30", 'r{k="a"}': "100", 'r{k="d"}': "400"}
    store = engine_for(series).store
    with __import__("pytest").raises(PromQLError, match=FILL_MODIFIERS):
        compile_expr("l + fill(0) r")
    e = Engine(store, features=frozenset({FILL_MODIFIERS}))

    def by_k(expr: str) -> dict[str, float]:
        return {dict(s.labels)["k"]: s.value for s in e.query(expr, 0)}  # type: ignore[union-attr]

    assert by_k("l + fill(0) r") == {"a": 110.0, "c": 30.0, "d": 400.0}
    assert by_k("l + fill_left(5) r") == {"a": 110.0, "d": 405.0}
    assert by_k("l + fill_right(7) r") == {"a": 110.0, "c": 37.0}
    assert by_k("l + r") == {"a": 110.0}


def test_matches_must_be_unique_before_a_comparison_filters_them_in_prometheus_3() -> None:
    from sentinel.promql import PromQLError

    series = {'many{l="foo",job="t"}': "0", 'many{l="bar",job="t"}': "1", 'one{job="t"}': "1"}
    three, two = engine_for(series), engine_for(series, semantics=2)
    with __import__("pytest").raises(PromQLError, match="many-to-one matching must be explicit"):
        three.query("many > on(job) one", 0)
    assert two.query("many > on(job) one", 0) == []  # 2.42: filtered first, then checked


def test_atan2_and_metadata_labels_are_dropped_with_the_name_in_prometheus_3() -> None:
    e = engine_for({"y": "10", "x": "20",
                    'c{__type__="counter",__unit__="req",job="a"}': "5"})
    assert [s.labels for s in e.query("y atan2 x", 0)] == [()]  # type: ignore[union-attr]
    two = engine_for({"y": "10", "x": "20"}, semantics=2)
    assert [s.labels for s in two.query("y atan2 x", 0)] == [  # type: ignore[union-attr]
        (("__name__", "y"),)]
    assert [s.labels for s in e.query("-c", 0)] == [(("job", "a"),)]  # type: ignore[union-attr]
    assert [s.labels for s in e.query("c * 2", 0)] == [(("job", "a"),)]  # type: ignore[union-attr]
    (kept,) = e.query("c > 1", 0)  # type: ignore[misc]
    assert dict(kept.labels)["__type__"] == "counter"  # a filter keeps the series as it is


def test_quoted_utf8_names_select_series() -> None:
    e = engine_for({'{"my.metric", "a.b"="x"}': "3"})
    assert [s.value for s in e.query('{"my.metric"}', 0)] == [3.0]  # type: ignore[union-attr]
    assert [s.value for s in e.query('{"my.metric", "a.b"="x"}', 0)] == [3.0]  # type: ignore[union-attr]


def test_logarithms_are_gos() -> None:
    """Go's math.Log (amd64) and Log10 = Log·(1/Ln10) differ from C's in the last bit for
    some inputs; promtool 2.42 agrees with these (the oracle test below checks more)."""
    from sentinel.promql import floatops as f

    assert f.log(3.0) == 1.0986122886681096  # C: ...098
    assert f.log(3.0, 10) == 0.4771212547196624  # C: ...6625
    assert f.log(0.1, 10) == -0.9999999999999999  # C: -1.0
    assert f.log(8.0, 2) == 3.0 and f.log(0.5, 10) == -0.3010299956639812
    assert math.isnan(f.log(-1.0)) and f.log(0.0, 10) == -math.inf


@__import__("pytest").mark.integration
def test_logarithms_agree_with_promtool_bit_for_bit(tmp_path: Path) -> None:
    import random
    import shutil
    import subprocess

    from sentinel.promql import floatops as f

    promtool = shutil.which("promtool")
    if promtool is None:
        __import__("pytest").skip("promtool is not installed")
    rng = random.Random(7)
    values = [3.0, 0.1, 7.0, 1e-5, 5e-324, 1.7e308] + [rng.lognormvariate(0, 10)
                                                       for _ in range(60)]
    series, exprs = [], []
    for i, v in enumerate(values):
        series.append(f"      - series: 'x{{i=\"{i}\"}}'\n        values: '{v!r}'")
        for name, base in (("log10", 10), ("log2", 2), ("ln", None)):
            exprs.append(f"      - expr: {name}(x{{i=\"{i}\"}})\n        eval_time: 0\n"
                         f"        exp_samples: [{{labels: '{{i=\"{i}\"}}', "
                         f"value: {f.log(v, base)!r}}}]")
    path = tmp_path / "logs_test.yaml"
    path.write_text("rule_files: []\ntests:\n  - interval: 1m\n    input_series:\n"
                    + "\n".join(series) + "\n    promql_expr_test:\n" + "\n".join(exprs) + "\n")
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_query_value_gives_range_vectors_and_strings() -> None:
    e = engine_for({'m{a="1"}': "1 2 3"})
    got = e.query_value("m[2m]", 2 * M)
    assert isinstance(got, list) and [(s.ts, s.vs) for s in got] == [  # type: ignore[union-attr]
        ([M, 2 * M], [2.0, 3.0])]
    assert e.query_value('"foo"', 0) == "foo"
    from sentinel.promql import PromQLError

    with __import__("pytest").raises(PromQLError, match="instant vector or a scalar"):
        e.query("m[2m]", 2 * M)  # a rule's query still refuses them


def test_dot_matches_a_newline_in_promql_regexes_as_in_prometheus_3() -> None:
    store = MemoryStore(retention_ms=10**12)
    store.add(labels_of({"__name__": "x", "a": "l1\nl2"}), 0, 1.0)
    e = Engine(store)
    assert len(e.query('x{a=~"l1.l2"}', 0)) == 1  # type: ignore[arg-type]
    assert e.query('x{a!~".*"}', 0) == []
    (s,) = e.query('label_replace(x, "b", "$1", "a", "(.*)")', 0)  # type: ignore[misc]
    assert dict(s.labels)["b"] == "l1\nl2"
    from sentinel.store.memory import Matcher

    assert not Matcher("a", "=~", "l1.l2").matches("l1\nl2")  # silences, routes: as before


def test_histogram_quantile_evens_out_float_noise_in_prometheus_3() -> None:
    """Counts within a relative 1e-12 are equal in Prometheus 3 (ensureMonotonicAndIgnore-
    SmallDeltas), so a rank just above the first count skips the noise bucket."""
    from sentinel.promql.histogram import bucket_quantile

    buckets = [(1.0, 10.0), (2.0, 10.000000000001), (math.inf, 20.0)]
    q = 0.50000000000004
    assert bucket_quantile(q, buckets) == 2.0
    assert 1.0 < bucket_quantile(q, buckets, v3=False) < 2.0  # 2.42: inside the (1, 2] bucket
    decreasing = [(1.0, 10.0), (2.0, 9.0), (math.inf, 20.0)]  # forced monotonic in both
    assert bucket_quantile(0.25, decreasing) == bucket_quantile(0.25, decreasing, v3=False)


def test_the_daemon_setting_for_prometheus_2_semantics(tmp_path: Path) -> None:
    from sentinel.config import ConfigError, load_config
    from sentinel.daemon.reload import RESTART_KEYS

    path = tmp_path / "sentinel.yaml"
    path.write_text("promql_semantics: 2\n")
    assert load_config(path, environ={}).promql_semantics == 2
    path.write_text("# nothing\n")
    assert load_config(path, environ={}).promql_semantics == 3  # Prometheus 3 by default
    path.write_text("promql_semantics: 4\n")
    with __import__("pytest").raises(ConfigError, match="promql_semantics"):
        load_config(path, environ={})
    assert "promql_semantics" in RESTART_KEYS  # the engine is built once
