"""What an alerting expression compares, and against which number: the plot's line and threshold.

For `x > 0.85` the series worth drawing is `x` (the comparison only keeps the
samples that fire) and the threshold is `> 0.85`. A guard after `and`/`unless`
(`x > 0.05 and on (target) traffic >= 20`) leaves the compared part as it is.
Anything else (`a or b`, `x > y`, `x > bool 1`, no comparison) has no single
threshold: the whole expression is drawn, with no line.

Works on the text, through promql-parser, and returns text: a remote query
backend needs the text of what it is asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import promql_parser as pp

COMPARISONS = ("==", "!=", ">", "<", ">=", "<=")
# `3 < x` compares x against 3 the other way round.
_FLIPPED = {"==": "==", "!=": "!=", ">": "<", "<": ">", ">=": "<=", "<=": ">="}
_GUARDS = ("and", "unless")


@dataclass(frozen=True, slots=True)
class Threshold:
    """`plotted <op> value` is the alert's condition."""

    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.op} {_fmt(self.value)}"


@dataclass(frozen=True, slots=True)
class AlertCondition:
    """The part of an alert expression to draw, and the threshold it is compared with."""

    plotted: str
    threshold: Threshold | None


@lru_cache(maxsize=512)
def split_condition(expr: str) -> AlertCondition:
    """The series to plot and the threshold of an alerting expression (see module doc)."""
    try:
        node = pp.parse(expr)
    except (ValueError, TypeError):
        return AlertCondition(expr, None)
    node = _unparen(node)
    found = _comparison(node)
    if found is None and isinstance(node, pp.BinaryExpr) and str(node.op) in _GUARDS:
        found = _comparison(_unparen(node.lhs))
    if found is None:
        return AlertCondition(expr, None)
    return found


def _comparison(node: Any) -> AlertCondition | None:
    if not isinstance(node, pp.BinaryExpr):
        return None
    op = str(node.op)
    if op not in COMPARISONS or (node.modifier is not None and node.modifier.return_bool):
        return None
    lhs, rhs = _unparen(node.lhs), _unparen(node.rhs)
    if _number(rhs) is not None and _number(lhs) is None:
        return _condition(str(lhs), op, _number(rhs))
    if _number(lhs) is not None and _number(rhs) is None:
        return _condition(str(rhs), _FLIPPED[op], _number(lhs))
    return None


def _condition(plotted: str, op: str, value: float | None) -> AlertCondition | None:
    try:
        pp.parse(plotted)  # the binding's printing must read back; else draw the whole
    except (ValueError, TypeError):
        return None
    ok = value is not None and math.isfinite(value)
    return AlertCondition(plotted, Threshold(op, value) if ok and value is not None else None)


def _number(node: Any) -> float | None:
    if isinstance(node, pp.NumberLiteral):
        return float(node.val)
    if isinstance(node, pp.UnaryExpr) and isinstance(_unparen(node.expr), pp.NumberLiteral):
        return -float(_unparen(node.expr).val)
    return None


def _unparen(node: Any) -> Any:
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    return node


def _fmt(v: float) -> str:
    return f"{v:.6g}"
