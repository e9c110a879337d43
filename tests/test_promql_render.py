"""Compiled PromQL printed back to text reads as the same tree (rules/split.py sends it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.promql.compile import compile_expr
from sentinel.promql.render import render
from sentinel.rules.loader import load_rule_files

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [r.expr for f in ("sentinel.yaml", "vllm.yaml")
           for g in load_rule_files([str(ROOT / "rules" / f)]) for r in g.rules]


@pytest.mark.parametrize("expr", SHIPPED + [
    "-2 ^ 2", "a - b - c", "a ^ b ^ c", "x > bool -1", "2 ^ -1", "x > -Inf", "x < NaN",
    "a * on (x) group_left (y, z) b", "a / ignoring (q) group_right b", "a or on () b",
    'rate(x{a=~"b.*", c!="\\n\\"q"}[5m] offset 1m @ 1700000000.5)',
    "max_over_time((a + b)[10m:30s] offset -1m)", "max_over_time(a[10m:])", "x @ end()",
    "topk(3, x)", 'count_values("v", x)', "quantile without (a) (0.9, x)",
    "sum without () (x)", '{__name__=~"vllm:.*"}', 'label_replace(x, "a", "$1", "b", "(.*)")',
    "x offset 1500ms", 'absent(nonexistent{job="x"})', "-(a)", "(1 + 2) * 3", 'x{a="é"}'])
def test_round_trip(expr: str) -> None:
    tree = compile_expr(expr)
    assert compile_expr(render(tree)) == tree


@pytest.mark.parametrize("text", [
    '{"my.metric", "a.b"="x"}',
    'sum(rate({"my.metric"}[5m]))',
    "a + fill(0) b",
    "a * on (x) fill_left(1) fill_right(2) b",
    "increase(m[1m] anchored)",
    "rate(m[5m] offset 1m smoothed)",
    "m smoothed",
    "limitk(2, m)",
    'info(m, {data=~".+"})',
    'sort_by_label(m, "a")',
])
def test_prometheus_3_constructs_render_back_to_the_same_tree(text: str) -> None:
    from sentinel.promql.features import ALL

    node = compile_expr(text, ALL)
    assert compile_expr(render(node), ALL) == node, render(node)
