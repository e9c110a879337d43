"""Binary operators: arithmetic, comparison and set operations, with vector matching."""

from __future__ import annotations

import math
from collections.abc import Callable

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector, format_labels
from sentinel.promql import floatops as f
from sentinel.promql.errors import PromQLError
from sentinel.promql.functions import drop_name
from sentinel.promql.nodes import Matching

ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": f.div,
    "%": f.mod,
    "^": f.power,
    "atan2": math.atan2,
}
# Operators whose result drops the metric name (Prometheus's shouldDropMetricName:
# atan2 is arithmetic but keeps the name, as in 2.42).
DROPS_NAME = frozenset({"+", "-", "*", "/", "%", "^"})
COMPARISON: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


def scalar_op(op: str, a: float, b: float) -> float:
    """scalar op scalar (comparisons give 1 or 0: the parser demands `bool`)."""
    if op in ARITHMETIC:
        return ARITHMETIC[op](a, b)
    return 1.0 if COMPARISON[op](a, b) else 0.0


def _elem(op: str, lv: float, rv: float) -> tuple[float, bool]:
    if op in ARITHMETIC:
        return ARITHMETIC[op](lv, rv), True
    return lv, COMPARISON[op](lv, rv)


def vector_scalar(
    op: str, vec: Vector, scalar: float, scalar_left: bool, return_bool: bool
) -> Vector:
    """vector op scalar, or scalar op vector when `scalar_left`."""
    compare = COMPARISON.get(op)
    if compare is not None and not return_bool:
        # A filter: each kept sample is the input's, labels and value (InstantSample is
        # frozen), so none is built. `max by (target) (...) == 0` over a fleet keeps few.
        if scalar_left:
            return [s for s in vec if compare(scalar, s.value)]
        return [s for s in vec if compare(s.value, scalar)]
    out = []
    arithmetic = op in ARITHMETIC
    for s in vec:
        lv, rv = (scalar, s.value) if scalar_left else (s.value, scalar)
        value, keep = _elem(op, lv, rv)
        if not arithmetic and scalar_left:
            value = rv  # a comparison filters but keeps the vector's value
        if return_bool:
            value, keep = (1.0 if keep else 0.0), True
        if keep:
            labels = drop_name(s.labels) if op in DROPS_NAME or return_bool else s.labels
            out.append(InstantSample(labels, value))
    return out


def signature(labels: Labels, matching: Matching) -> Labels:
    """The labels two samples must share to match (`on` or `ignoring`)."""
    if matching.on:
        names = set(matching.labels)
        return tuple([kv for kv in labels if kv[0] in names])
    if not matching.labels:  # a plain `or`/`and`/`unless`: all labels but the name
        return drop_name(labels)
    names = {METRIC_NAME, *matching.labels}
    return tuple([kv for kv in labels if kv[0] not in names])


def set_op(op: str, lhs: Vector, rhs: Vector, matching: Matching) -> Vector:
    """`and`, `or`, `unless`."""
    if op == "and":
        if not lhs or not rhs:
            return []
        right = {signature(s.labels, matching) for s in rhs}
        return [s for s in lhs if signature(s.labels, matching) in right]
    if op == "or":
        if not lhs or not rhs:
            return lhs + rhs
        left = {signature(s.labels, matching) for s in lhs}
        return lhs + [s for s in rhs if signature(s.labels, matching) not in left]
    if not lhs or not rhs:
        return list(lhs)
    right = {signature(s.labels, matching) for s in rhs}
    return [s for s in lhs if signature(s.labels, matching) not in right]


def vector_vector(
    op: str, lhs: Vector, rhs: Vector, matching: Matching, return_bool: bool
) -> Vector:
    """Arithmetic or comparison between two vectors, one-to-one or grouped."""
    if not lhs or not rhs:
        return []
    swapped = matching.card == "one-to-many"
    if swapped:
        lhs, rhs = rhs, lhs
    one_side: dict[Labels, InstantSample] = {}
    for rs in rhs:
        sig = signature(rs.labels, matching)
        dup = one_side.get(sig)
        if dup is not None:
            side = "left" if swapped else "right"
            raise PromQLError(
                f"found duplicate series for the match group {format_labels(sig)} on the "
                f"{side} hand-side of the operation: [{format_labels(rs.labels)}, "
                f"{format_labels(dup.labels)}];many-to-many matching not allowed: "
                "matching labels must be unique on one side"
            )
        one_side[sig] = rs
    matched: dict[Labels, set[Labels] | None] = {}
    out = []
    for ls in lhs:
        sig = signature(ls.labels, matching)
        match = one_side.get(sig)
        if match is None:
            continue
        lv, rv = (match.value, ls.value) if swapped else (ls.value, match.value)
        value, keep = _elem(op, lv, rv)
        if return_bool:
            value = 1.0 if keep else 0.0
        elif not keep:
            continue
        labels = _result_labels(ls.labels, match.labels, op, matching)
        if return_bool:
            labels = drop_name(labels)
        _check_unique(matched, sig, labels, matching)
        out.append(InstantSample(labels, value))
    return out


def _check_unique(
    matched: dict[Labels, set[Labels] | None], sig: Labels, labels: Labels, matching: Matching
) -> None:
    if matching.card == "one-to-one":
        if sig in matched:
            raise PromQLError(
                "multiple matches for labels: many-to-one matching must be explicit "
                "(group_left/group_right)"
            )
        matched[sig] = None
        return
    seen = matched.setdefault(sig, set())
    assert seen is not None
    if labels in seen:
        raise PromQLError("multiple matches for labels: grouping labels must ensure unique matches")
    seen.add(labels)


def _result_labels(lhs: Labels, rhs: Labels, op: str, matching: Matching) -> Labels:
    out = dict(lhs)
    if op in DROPS_NAME:
        out.pop(METRIC_NAME, None)
    if matching.card == "one-to-one":
        if matching.on:
            keep = set(matching.labels)
            out = {k: v for k, v in out.items() if k in keep}
        else:
            for name in matching.labels:
                out.pop(name, None)
    right = dict(rhs)
    for name in matching.include:
        value = right.get(name, "")
        if value:
            out[name] = value
        else:
            out.pop(name, None)
    return tuple(sorted(out.items()))
