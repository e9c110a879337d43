"""Duration expressions (Prometheus 3, behind promql-duration-expr) and step()/range()."""

from __future__ import annotations

import pytest

from sentinel.promql import Engine, PromQLError
from sentinel.promql.durexpr import rewrite
from sentinel.promql.features import ALL, DURATION_EXPR
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.store.memory import MemoryStore


@pytest.mark.parametrize(("text", "want"), [
    ("x[5m]", "x[5m]"),  # plain: untouched
    ("x[26m+4m]", "x[1800000ms]"),
    ("x[60*30]", "x[1800000ms]"),
    ("x[1h30m % 1h]", "x[1800000ms]"),
    ("x[24m+((1.5*2m)+2m)]", "x[1740000ms]"),
    ("x[29s+1s:5s+5s]", "x[30000ms:10000ms]"),
    ("x[5m:]", "x[5m:]"),
    ("x[step()]", "x[15000ms]"),
    ("x[max_of(min_of(step()+1,1h),1ms)]", "x[16000ms]"),
    ('x{a="[1+1]"}[1m+1m]', 'x{a="[1+1]"}[120000ms]'),  # strings are not read
    ("x offset (100 + 2)", "x offset 102000ms"),
    ("x offset 100 + 2", "x offset 100 + 2"),  # the offset takes one operand
    ("x offset -step()*2", "x offset -15000ms*2"),
    ("x offset (-2 ^ 2)", "x offset -4000ms"),  # ^ binds tighter than the sign
    ("x offset min_of(step(), 1s)+8000", "x offset 1000ms+8000"),
    ("x offset range()", "x "),  # an offset of 0 is none
])
def test_rewrite(text: str, want: str) -> None:
    assert rewrite(text, 15_000, 0) == want


@pytest.mark.parametrize("text", ["x[1m-2m]", "x[5m/0]", "x[foo()]", "x[(1m]"])
def test_bad_duration_expressions_are_parse_errors(text: str) -> None:
    with pytest.raises(PromQLError, match="parse error"):
        rewrite(text, 0, 0)


def _engine(features: frozenset[str]) -> Engine:
    store = MemoryStore(retention_ms=10**12)
    for i, v in enumerate(expand_values("0+1x100")):
        assert v is not None
        store.add(parse_series("m"), i * 1000, v)
    return Engine(store, features=features)


def test_duration_expressions_need_their_feature() -> None:
    with pytest.raises(PromQLError):
        _engine(frozenset()).query("count_over_time(m[5s+5s])", 50_000)
    got = _engine(frozenset({DURATION_EXPR})).query("count_over_time(m[5s+5s])", 50_000)
    assert [s.value for s in got] == [10.0]  # type: ignore[union-attr]


def test_step_range_start_end_are_the_querys() -> None:
    e = _engine(ALL)
    for t in (10_000, 15_000, 20_000):
        kw = {"start_ms": 10_000, "end_ms": 20_000, "step_ms": 5_000}
        assert e.query("step()", t, **kw) == 5.0  # type: ignore[arg-type]
        assert e.query("range()", t, **kw) == 10.0  # type: ignore[arg-type]
        assert e.query("start()", t, **kw) == 10.0  # type: ignore[arg-type]
        assert e.query("end()", t, **kw) == 20.0  # type: ignore[arg-type]
        got = e.query("count_over_time(m[range()])", t, **kw)  # type: ignore[arg-type]
        assert [s.value for s in got] == [10.0]  # type: ignore[union-attr]
    assert e.query("step()", 7_000) == 0.0  # an instant query
    with pytest.raises(PromQLError, match="experimental"):
        _engine(frozenset({DURATION_EXPR})).query("step()", 0)


def test_at_takes_a_duration_with_the_feature() -> None:
    e = _engine(frozenset({DURATION_EXPR}))
    assert [s.value for s in e.query("m @ 1m40s", 0)] == [100.0]  # type: ignore[union-attr]
    with pytest.raises(PromQLError, match="unexpected duration"):
        _engine(frozenset()).query("m @ 1m40s", 0)
