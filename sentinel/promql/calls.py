"""Evaluation of function calls: argument evaluation, name dropping, absent()."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector, is_stale, labels_of
from sentinel.promql import extended, fused, info, prom3funcs
from sentinel.promql import functions as fn
from sentinel.promql import nodes as n
from sentinel.promql.errors import PromQLError
from sentinel.promql.mathfuncs import DATE, date_value
from sentinel.promql.rangefuncs import RANGE_FUNCTIONS as RANGE_FUNCTIONS_2
from sentinel.promql.rangefuncs import SUMMARY_FUNCTIONS, SummaryFunc, Window
from sentinel.store.memory import Series, Summary

RANGE_FUNCTIONS = {**RANGE_FUNCTIONS_2, **prom3funcs.RANGE_FUNCTIONS_3}
# Range functions whose result keeps the series' name.
_KEEP_NAME = frozenset({"last_over_time", "first_over_time"})


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a range vector: its labels and non-stale samples."""

    labels: Labels
    ts: list[int]
    vs: list[float]


class Evaluator(Protocol):
    """The part of the engine's evaluator that calls need."""

    at_ms: int
    lookback_ms: int
    open_ms: int  # 1: Prometheus 3 (left-open windows and its arithmetic), 0: 2.x
    bounds: tuple[int, int]  # the query's start and end
    query_step_ms: int  # the query's step (0: an instant query)

    def eval(self, e: n.Expr) -> object:
        """Evaluate any sub-expression."""
        ...

    def scalar(self, e: n.Expr) -> float:
        """Evaluate a scalar sub-expression."""
        ...

    def vector(self, e: n.Expr) -> Vector:
        """Evaluate an instant-vector sub-expression."""
        ...

    def instant(self, sel: n.VectorSelector) -> list[tuple[Labels, int, float]]:
        """Labels, timestamp and value of each series an instant selector picks."""
        ...

    def matrix(self, e: n.MatrixSelector) -> list[RangeSeries]:
        """The series of a range selector."""
        ...

    def subquery(self, e: n.Subquery) -> list[RangeSeries]:
        """The series of a subquery."""
        ...

    def summaries(self, e: n.MatrixSelector) -> list[Summary] | None:
        """Summaries of a range selector's series, or None when the store has none."""
        ...

    def summary_values(self, e: n.MatrixSelector, func: SummaryFunc, window: Window
                       ) -> list[tuple[Labels, float]] | None:
        """`func` of each series' summary, or None when the store has no summaries."""
        ...

    def base_ms(self, at: n.At) -> int:
        """The time a selector or subquery reads at, before its offset."""
        ...

    def select(self, sel: n.VectorSelector, start_ms: int, end_ms: int) -> list[Series]:
        """The selector's series with their samples in [start_ms, end_ms]."""
        ...


def check_unique(vec: Vector) -> Vector:
    """Prometheus refuses a vector in which two samples have the same labels."""
    if len({s.labels for s in vec}) != len(vec):
        raise PromQLError("vector cannot contain metrics with the same labelset")
    return vec


def absent_labels(arg: n.Expr) -> Labels:
    """The labels absent() reports: those fixed by one equality matcher each (not the name)."""
    arg = n.unwrap_parens(arg)
    if isinstance(arg, n.MatrixSelector):
        arg = arg.selector
    if not isinstance(arg, n.VectorSelector):
        return ()
    found: dict[str, str] = {}
    ambiguous: set[str] = set()
    for m in arg.matchers:
        if m.name == METRIC_NAME:
            continue
        if m.op == "=" and m.name not in found:
            found[m.name] = m.value
        else:
            ambiguous.add(m.name)
    return labels_of({k: v for k, v in found.items() if k not in ambiguous})


def evaluate_call(ev: Evaluator, e: n.Call) -> float | Vector:
    """The value of a function call."""
    name = e.func
    if name in RANGE_FUNCTIONS:
        return check_unique(_range_call(ev, e))
    if name == "info":  # its second argument is a selector of labels, not evaluated
        return check_unique(info.info(ev, e))  # type: ignore[arg-type]
    if name == "absent_over_time":
        matrix = _range_arg(ev, _matrix_arg(e))
        return [] if matrix else [InstantSample(absent_labels(e.args[0]), 1.0)]
    if name == "absent":
        vec = ev.vector(e.args[0])
        return [] if vec else [InstantSample(absent_labels(e.args[0]), 1.0)]
    if name == "time":
        return ev.at_ms / 1000
    if name in ("min_of", "max_of"):  # Prometheus 3, experimental: Go's math.Min/Max
        a, b = ev.scalar(e.args[0]), ev.scalar(e.args[1])
        return fn.go_min(a, b) if name == "min_of" else fn.go_max(a, b)
    if name in ("start", "end", "range", "step"):  # Prometheus 3, experimental
        start, end = ev.bounds
        ms = {"start": start, "end": end, "range": end - start, "step": ev.query_step_ms}
        return ms[name] / 1000
    if name == "pi":
        return math.pi
    if name in DATE:
        if not e.args:
            return [InstantSample((), date_value(name, ev.at_ms // 1000))]
        return check_unique([InstantSample(fn.drop_name(s.labels), date_value(name, s.value))
                             for s in ev.vector(e.args[0])])
    if name == "scalar":
        vec = ev.vector(e.args[0])
        return vec[0].value if len(vec) == 1 else fn.f.NAN
    if name == "vector":
        return [InstantSample((), ev.scalar(e.args[0]))]
    if name == "timestamp":
        return check_unique(_timestamp(ev, e.args[0]))
    return check_unique(_instant_call(ev, e))


def _matrix_arg(e: n.Call) -> n.MatrixSelector | n.Subquery:
    for arg in e.args:
        inner = n.unwrap_parens(arg)
        if isinstance(inner, n.MatrixSelector | n.Subquery):
            return inner
    raise PromQLError(f"{e.func}() needs a range vector selector")


def _range_arg(ev: Evaluator, arg: n.MatrixSelector | n.Subquery) -> list[RangeSeries]:
    return ev.matrix(arg) if isinstance(arg, n.MatrixSelector) else ev.subquery(arg)


def _range_call(ev: Evaluator, e: n.Call) -> Vector:
    sel = _matrix_arg(e)
    if isinstance(sel, n.MatrixSelector) and sel.selector.extend:
        return _extended_call(ev, e, sel)
    scalars = tuple(ev.scalar(a) for a in e.args if n.value_type(a) == n.SCALAR)
    if isinstance(sel, n.MatrixSelector):
        at, offset = sel.selector.at, sel.selector.offset_ms
    else:
        at, offset = sel.at, sel.offset_ms
    window = Window(ev.base_ms(at), sel.range_ms, offset, scalars, ev.at_ms,
                    ev.open_ms == 1)
    keep_name = e.func in _KEEP_NAME
    quick = SUMMARY_FUNCTIONS.get(e.func)
    if quick is not None and isinstance(sel, n.MatrixSelector):
        # One pass in the store: its summary of each series fed straight to the function.
        values = ev.summary_values(sel, quick, window)
        if values is not None:
            if keep_name:
                return [InstantSample(labels, v) for labels, v in values]
            drop = fn.drop_name
            return [InstantSample(drop(labels), v) for labels, v in values]
        summaries = ev.summaries(sel)
        if summaries is not None:
            # First/last sample, count and counter drops come from the store's
            # indexes: the samples in the range are not copied or walked.
            vec = []
            for su in summaries:
                value = quick(su.count, su.t_first, su.v_first, su.t_last, su.v_last,
                              su.corrections, window)
                if value is not None:
                    vec.append(InstantSample(su.labels if keep_name else fn.drop_name(su.labels),
                                             value))
            return vec
    func = RANGE_FUNCTIONS[e.func]
    out = []
    for s in _range_arg(ev, sel):
        value = func(s.ts, s.vs, window)
        if value is not None:
            out.append(InstantSample(s.labels if keep_name else fn.drop_name(s.labels), value))
    return out


def _extended_call(ev: Evaluator, e: n.Call, sel: n.MatrixSelector) -> Vector:
    """A range function over an `anchored` or `smoothed` range (sentinel/promql/extended.py)."""
    kind = sel.selector.extend
    extended.check_safe(kind, e.func)
    end = ev.base_ms(sel.selector.at) - sel.selector.offset_ms
    start = end - sel.range_ms
    lookback = ev.lookback_ms
    out = []
    for s in ev.select(sel.selector, start - lookback + 1,
                       end + (lookback if kind == extended.SMOOTHED else 0)):
        keep = [i for i, v in enumerate(s.vs) if not is_stale(v)]
        ts, vs = [s.ts[i] for i in keep], [s.vs[i] for i in keep]
        if e.func in ("rate", "increase", "delta"):
            value = extended.extended_rate(ts, vs, start, end, sel.range_ms / 1000,
                                           kind == extended.SMOOTHED, e.func != "delta",
                                           e.func == "rate")
        else:  # resets, changes: from the newest sample at or before the start
            first = extended.anchored_start(ts, start)
            value = None if first is None else RANGE_FUNCTIONS[e.func](
                ts[first:], vs[first:], Window(end, sel.range_ms, 0))
        if value is not None:
            out.append(InstantSample(fn.drop_name(s.labels), value))
    return out


def _timestamp(ev: Evaluator, arg: n.Expr) -> Vector:
    inner = n.unwrap_parens(arg)
    if isinstance(inner, n.VectorSelector):
        # Of a selector, timestamp() reports when each sample was taken.
        return [InstantSample(fn.drop_name(lb), t / 1000) for lb, t, _ in ev.instant(inner)]
    return [InstantSample(fn.drop_name(s.labels), ev.at_ms / 1000) for s in ev.vector(arg)]


def _instant_call(ev: Evaluator, e: n.Call) -> Vector:
    if e.func == "histogram_quantile" and fused.ENABLED:
        quick = fused.histogram_quantile(ev, e)
        if quick is not None:
            return quick
    args = [ev.eval(a) for a in e.args]
    name = e.func
    vec = args[0]
    if name in fn.SIMPLE:
        return fn.simple(name, vec)  # type: ignore[arg-type]
    if name == "histogram_quantile":
        return fn.histogram_quantile(args[0], args[1], ev.open_ms == 1)  # type: ignore[arg-type]
    handlers = {
        "round": fn.round_,
        "clamp": fn.clamp,
        "clamp_min": fn.clamp_min,
        "clamp_max": fn.clamp_max,
        "sort": fn.sort,
        "sort_desc": fn.sort_desc,
        "label_replace": fn.label_replace,
        "label_join": fn.label_join,
        "sort_by_label": prom3funcs.sort_by_label,
        "sort_by_label_desc": prom3funcs.sort_by_label_desc,
        "histogram_fraction": prom3funcs.histogram_fraction,
        "histogram_quantiles": prom3funcs.histogram_quantiles,
    }
    if name not in handlers:
        raise PromQLError(f"function {name}() is not supported")
    return handlers[name](*args)  # type: ignore[operator]
