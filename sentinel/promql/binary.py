"""Binary operators: arithmetic, comparison and set operations, with vector matching."""

from __future__ import annotations

import math
from collections.abc import Callable

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector, format_labels
from sentinel.promql import floatops as f
from sentinel.promql.errors import PromQLError
from sentinel.promql.functions import METADATA_LABELS, drop_name
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
# Operators whose result drops the metric name (Prometheus 2.42's shouldDropMetricName:
# atan2 is arithmetic but keeps the name there; Prometheus 3 drops it for atan2 too).
DROPS_NAME = frozenset({"+", "-", "*", "/", "%", "^"})
DROPS_NAME_3 = DROPS_NAME | {"atan2"}
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
    op: str, vec: Vector, scalar: float, scalar_left: bool, return_bool: bool,
    v3: bool = True,
) -> Vector:
    """vector op scalar, or scalar op vector when `scalar_left` (`v3`: Prometheus 3)."""
    drops = DROPS_NAME_3 if v3 else DROPS_NAME
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
            labels = drop_name(s.labels) if op in drops or return_bool else s.labels
            out.append(InstantSample(labels, value))
    return out


def signature(labels: Labels, matching: Matching) -> Labels:
    """The labels two samples must share to match (`on` or `ignoring`)."""
    if matching.on:
        names = set(matching.labels)
        return tuple([kv for kv in labels if kv[0] in names])
    if not matching.labels:  # a plain `or`/`and`/`unless`: all labels but the name
        return drop_name(labels)  # (and Prometheus 3's __type__ and __unit__)
    names = {*METADATA_LABELS, *matching.labels}
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
    op: str, lhs: Vector, rhs: Vector, matching: Matching, return_bool: bool,
    v3: bool = True,
) -> Vector:
    """Arithmetic or comparison between two vectors, one-to-one or grouped.

    `v3`: Prometheus 3, which checks that matches are unique before a comparison
    filters them, and drops the name for atan2; False: 2.42.
    """
    fill_l, fill_r = matching.fill_lhs, matching.fill_rhs
    if (not lhs and not rhs) or ((not lhs or not rhs) and fill_l is None and fill_r is None):
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
    out: Vector = []
    drops = DROPS_NAME_3 if v3 else DROPS_NAME

    def one(ls: InstantSample, rs: InstantSample, sig: Labels) -> None:
        lv, rv = (rs.value, ls.value) if swapped else (ls.value, rs.value)
        value, keep = _elem(op, lv, rv)
        if return_bool:
            value = 1.0 if keep else 0.0
        elif not keep and not v3:
            return
        labels = _result_labels(ls.labels, rs.labels, op, matching, drops)
        if return_bool:
            labels = drop_name(labels)
        _check_unique(matched, sig, labels, matching)
        if keep or return_bool:
            out.append(InstantSample(labels, value))

    for ls in lhs:
        sig = signature(ls.labels, matching)
        match = one_side.get(sig)
        if match is None:
            if fill_r is None:
                continue
            match = InstantSample(match_labels(ls.labels, matching), fill_r)
        one(ls, match, sig)
    if fill_l is not None:
        for rs in rhs:
            sig = signature(rs.labels, matching)
            if sig in matched and (matching.card == "one-to-one" or matched[sig]):
                continue  # already matched
            one(InstantSample(match_labels(rs.labels, matching), fill_l), rs, sig)
    return out


def match_labels(labels: Labels, matching: Matching) -> Labels:
    """The labels a filled-in sample gets (Go's Labels.MatchLabels): those of `on`, or all
    but those of `ignoring` and the name."""
    if matching.on:
        names = set(matching.labels)
        return tuple([kv for kv in labels if kv[0] in names])
    names = {METRIC_NAME, *matching.labels}
    return tuple([kv for kv in labels if kv[0] not in names])


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


def _result_labels(lhs: Labels, rhs: Labels, op: str, matching: Matching,
                   drops: frozenset[str] = DROPS_NAME) -> Labels:
    out = dict(lhs)
    if op in drops:
        for name in METADATA_LABELS:
            out.pop(name, None)
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
