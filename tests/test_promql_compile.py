"""Compiling PromQL: the supported subset, rejections with positions, lookback sizing."""

from __future__ import annotations

import pytest

from sentinel.promql import PromQLError, compile_expr, max_lookback_ms
from sentinel.promql import nodes as n


def test_selector_compiles_name_and_all_four_matchers() -> None:
    expr = compile_expr('x{a="1", b!="2", c=~"3.*", d!~"4"} offset 1m')
    assert isinstance(expr, n.VectorSelector)
    assert [(m.name, m.op, m.value) for m in expr.matchers] == [
        ("__name__", "=", "x"),
        ("a", "=", "1"),
        ("b", "!=", "2"),
        ("c", "=~", "3.*"),
        ("d", "!~", "4"),
    ]
    assert expr.offset_ms == 60_000


def test_matrix_aggregate_and_binary_structure() -> None:
    expr = compile_expr("sum without (i) (rate(x[5m] offset -30s)) / on(a) group_left(b) y")
    assert isinstance(expr, n.Binary)
    assert expr.op == "/"
    assert expr.matching == n.Matching("many-to-one", True, ("a",), ("b",))
    agg = expr.lhs
    assert isinstance(agg, n.Aggregate)
    assert (agg.op, agg.grouping, agg.without) == ("sum", ("i",), True)
    call = agg.expr
    assert isinstance(call, n.Call) and call.func == "rate"
    (matrix,) = call.args
    assert isinstance(matrix, n.MatrixSelector)
    assert (matrix.range_ms, matrix.selector.offset_ms) == (300_000, -30_000)


def test_set_operators_and_bool_modifier() -> None:
    expr = compile_expr("a unless ignoring(x) b")
    assert isinstance(expr, n.Binary)
    assert expr.matching == n.Matching("many-to-many", False, ("x",))
    cmp = compile_expr("a > bool 3")
    assert isinstance(cmp, n.Binary) and cmp.return_bool


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("predict_linear_x(x[5m])", None),  # unknown to the parser
        ("  mad_over_time(x[5m])", "mad_over_time("),  # Prometheus 3 only
        ("sum(limitk(2, x))", "limitk"),
        ("limit_ratio(0.5, x)", "limit_ratio"),
        ("sort_by_label(x, \"a\")", "sort_by_label("),
    ],
)
def test_unsupported_constructs_are_rejected_with_position(text: str, needle: str | None) -> None:
    with pytest.raises(PromQLError) as info:
        compile_expr(text)
    if needle is not None:
        assert info.value.position == text.index(needle)
        # Prometheus 3's experimental functions: refused without their feature flag.
        assert "not supported" in info.value.message or "experimental" in info.value.message


def test_subqueries_at_and_holt_winters_compile() -> None:
    sub = compile_expr("max_over_time(x[10m:1m] offset 2m @ 100)")
    assert isinstance(sub, n.Call)
    arg = sub.args[0]
    assert isinstance(arg, n.Subquery)
    assert (arg.range_ms, arg.step_ms, arg.offset_ms, arg.at) == (600_000, 60_000, 120_000, 100_000)
    sel = compile_expr("x @ start()")
    assert isinstance(sel, n.VectorSelector) and sel.at == n.AT_START
    sel = compile_expr("x @ end()")
    assert isinstance(sel, n.VectorSelector) and sel.at == n.AT_END
    # holt_winters (Prometheus 2) and double_exponential_smoothing (3) are one function.
    old = compile_expr('holt_winters(x{a="holt_winters("}[5m], 0.5, 0.5)')
    new = compile_expr('double_exponential_smoothing(x{a="holt_winters("}[5m], 0.5, 0.5)')
    assert old == new


def test_unknown_function_position_points_at_the_name() -> None:
    text = 'sum(foo_bar(x{a="foo_bar("}))'
    with pytest.raises(PromQLError) as info:
        compile_expr(text)
    assert info.value.position == 4  # the one outside the string literal
    assert "foo_bar" in str(info.value)


def test_parse_errors_are_promql_errors() -> None:
    with pytest.raises(PromQLError, match="parse error"):
        compile_expr("sum(")
    with pytest.raises(PromQLError, match="comparisons between scalars"):
        compile_expr("1 > 2")


def test_range_vector_and_string_results_are_rejected() -> None:
    with pytest.raises(PromQLError, match="range vector|matrix"):
        compile_expr("x[5m]")
    with pytest.raises(PromQLError, match="string"):
        compile_expr('"text"')


def test_invalid_regex_is_a_compile_error() -> None:
    with pytest.raises(PromQLError, match="regex"):
        compile_expr('x{a=~"("}')


def test_max_lookback_covers_ranges_offsets_and_lookback_delta() -> None:
    assert max_lookback_ms("x") == 300_000
    assert max_lookback_ms("x offset 10m") == 900_000
    assert max_lookback_ms("rate(x[15m]) > y") == 900_000
    assert max_lookback_ms("rate(x[1m] offset 1h)", lookback_ms=1000) == 3_660_000
    assert max_lookback_ms("time()") == 0
    assert max_lookback_ms("x offset -10m") == 0


def test_compiled_expressions_are_hashable_values() -> None:
    assert compile_expr("rate(x[5m])") == compile_expr("rate(x[5m])")
    assert hash(compile_expr('x{a=~"b"}')) == hash(compile_expr('x{a=~"b"}'))
