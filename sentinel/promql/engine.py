"""Instant evaluation of compiled PromQL over the series store.

Semantics are Prometheus 2.42's for an instant query at `at_ms`:

- an instant selector takes each series' newest sample in the closed window
  [t - offset - lookback, t - offset]; when that sample is a staleness
  marker the series is absent;
- a range selector takes the samples in the closed window
  [t - offset - range, t - offset], staleness markers skipped;
- series come out in the order the store created them, as Prometheus's
  head block returns them (postings are ordered by series reference), so
  floating-point sums, `first` in templates and aggregation outputs run in
  the same order as promtool's;
- `@ T` pins a selector or subquery to time T (`@ start()` and `@ end()` are
  the query's own time, also inside subqueries);
- a subquery `e[R:S] offset D` evaluates `e` at every multiple of the step S
  (the default evaluation interval when omitted) in the closed window
  [t - D - R, t - D], as Prometheus aligns subquery steps to absolute time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from sentinel.model import InstantSample, Labels, Vector, is_stale
from sentinel.promql import durexpr, fused
from sentinel.promql import functions as fn
from sentinel.promql import nodes as n
from sentinel.promql.aggregate import aggregate
from sentinel.promql.binary import scalar_op, set_op, vector_scalar, vector_vector
from sentinel.promql.calls import RangeSeries, check_unique, evaluate_call
from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError
from sentinel.promql.extended import interpolate_at
from sentinel.promql.features import DURATION_EXPR
from sentinel.promql.features import check as check_features
from sentinel.promql.limits import MAX_POINTS, QUERY_TIMEOUT_S, Budget
from sentinel.promql.rangefuncs import SummaryFunc, Window
from sentinel.promql.stepcache import StepCache
from sentinel.store.memory import Matcher, Series, Summary

DEFAULT_LOOKBACK_MS = 300_000
DEFAULT_SUBQUERY_STEP_MS = 60_000
_STEPS_KEPT = 4096  # compiled nodes whose subquery step count an Engine remembers


class SeriesSource(Protocol):
    """What the engine needs from a store (MemoryStore implements it)."""

    def select(self, matchers: Sequence[Matcher], start_ms: int, end_ms: int) -> list[Series]:
        """Series matching all matchers, with their samples in [start_ms, end_ms].

        In the order the series were created, as Prometheus's head returns them.
        """
        ...


Value = float | Vector | list[RangeSeries] | str
# Parts of an expression answered elsewhere (a remote backend, sentinel/rules/split.py):
# id(node) → a call that returns that node's value at the query's time, made only if needed.
Given = Mapping[int, Callable[[], "Vector | float"]]


class Engine:
    """Evaluates PromQL expressions over a series store at a given time."""

    def __init__(self, store: SeriesSource, lookback_ms: int = DEFAULT_LOOKBACK_MS,
                 subquery_step_ms: int = DEFAULT_SUBQUERY_STEP_MS,
                 max_points: int = MAX_POINTS, timeout_s: float = QUERY_TIMEOUT_S,
                 step_cache: StepCache | None = None, semantics: int = 3,
                 features: frozenset[str] = frozenset()) -> None:
        if semantics not in (2, 3):
            raise ValueError(f"semantics must be 2 or 3, not {semantics!r}")
        # Prometheus's experimental PromQL flags, for expressions given as text
        # (sentinel/promql/features.py).
        self.features = check_features(features)
        self.store = store
        # Prometheus 3 (the default) reads left-open windows (t - range, t] for range
        # selectors, lookback and subqueries; 2 reads them closed [t - range, t], as
        # Prometheus 2.x and the Debian promtool (2.42) do.
        self.semantics = semantics
        # Subquery steps kept across queries, for a caller that seals its data as final
        # (sentinel/promql/stepcache.py: `sentinel rules test`); None: evaluate every step.
        self.step_cache = step_cache
        self._steps: dict[int, tuple[n.Expr, int]] = {}  # id(node) -> (node, subquery steps)
        # Each query's bounds (sentinel/promql/limits.py): rules, the API, the page, MCP.
        self.max_points = max_points
        self.timeout_s = timeout_s
        self.lookback_ms = lookback_ms
        # The step of subqueries written without one: Prometheus's global
        # evaluation_interval (promtool: the test file's evaluation_interval).
        self.subquery_step_ms = subquery_step_ms

    def query(self, expr: str | n.Expr, at_ms: int, given: Given | None = None, *,
              start_ms: int | None = None, end_ms: int | None = None,
              step_ms: int = 0) -> Vector | float:
        """The expression's value at `at_ms`: a Vector, or a float for a scalar result.

        `given` answers some nodes of the tree instead of the store (see `Given`);
        only nodes outside subqueries, which are evaluated at `at_ms` alone.
        `start_ms`/`end_ms` are what `@ start()`/`@ end()` mean: a range query's
        first and last step when this is one of its steps; `at_ms` by default.
        `step_ms` is a range query's step (`step()`; 0 for an instant query).
        Raises PromQLError for expressions that do not compile and for
        evaluation errors (e.g. many-to-many matching).
        """
        result = self._evaluate(expr, at_ms, given, start_ms, end_ms, step_ms, False)
        if isinstance(result, float | list):
            return result  # type: ignore[return-value]
        raise PromQLError("expression must return an instant vector or a scalar")

    def query_value(self, expr: str | n.Expr, at_ms: int, *, start_ms: int | None = None,
                    end_ms: int | None = None, step_ms: int = 0) -> Value:
        """As `query`, for any result an instant query may have: a Vector, a float, a str
        or a range vector (list[RangeSeries], in label order)."""
        return self._evaluate(expr, at_ms, None, start_ms, end_ms, step_ms, True)

    def _evaluate(self, expr: str | n.Expr, at_ms: int, given: Given | None,
                  start_ms: int | None, end_ms: int | None, step_ms: int,
                  any_type: bool) -> Value:
        bounds = (at_ms if start_ms is None else start_ms, at_ms if end_ms is None else end_ms)
        node = (self.compile(expr, step_ms=step_ms, range_ms=bounds[1] - bounds[0],
                             any_type=any_type) if isinstance(expr, str) else expr)
        budget = Budget(self.max_points, self.timeout_s)
        budget.precheck_steps(self._steps_of(node))
        evaluator = _Evaluator(self.store, self.lookback_ms, at_ms, bounds,
                               self.subquery_step_ms, budget, self.step_cache)
        evaluator.open_ms = 1 if self.semantics == 3 else 0
        evaluator.query_step_ms = step_ms
        evaluator.given = given
        return evaluator.eval(node)

    def compile(self, expr: str, *, step_ms: int = 0, range_ms: int = 0,
                any_type: bool = False) -> n.Expr:
        """The tree `query` evaluates for `expr`, compiled with this engine's features.

        Duration expressions (with their feature on) are folded for a query of this
        step and range (`step()`, `range()`), so a range query compiles its text once
        and hands the tree to `query` at each step, with the same bounds and step.
        PromQLError when the text does not compile.
        """
        if DURATION_EXPR in self.features:
            expr = durexpr.rewrite(expr, step_ms, range_ms)
        return compile_expr(expr, self.features, any_type)

    def _steps_of(self, node: n.Expr) -> int:
        """subquery_steps(node), remembered: rules query the same compiled nodes every
        interval, and the walk over a large rule's tree costs as much as a cheap query."""
        known = self._steps.get(id(node))
        if known is not None and known[0] is node:  # the node is held: its id is not reused
            return known[1]
        steps = subquery_steps(node, self.subquery_step_ms)
        if len(self._steps) >= _STEPS_KEPT:  # API queries bring new nodes: stay bounded
            self._steps.clear()
        self._steps[id(node)] = (node, steps)
        return steps

    def max_lookback_ms(self, expr: str | n.Expr) -> int:
        """How far back from the evaluation time the expression reads data."""
        return max_lookback_ms(expr, self.lookback_ms)


def max_lookback_ms(expr: str | n.Expr, lookback_ms: int = DEFAULT_LOOKBACK_MS) -> int:
    """The oldest data an expression reads, in ms before the evaluation time."""
    node = compile_expr(expr) if isinstance(expr, str) else expr
    return max(0, _reach(node, lookback_ms))


def subquery_steps(e: n.Expr, default_step_ms: int) -> int:
    """Evaluations of the innermost expression that nested subqueries ask for (1 without)."""
    if isinstance(e, n.Subquery):
        step = e.step_ms or default_step_ms
        return (e.range_ms // max(1, step) + 1) * subquery_steps(e.expr, default_step_ms)
    return max((subquery_steps(c, default_step_ms) for c in _children(e)), default=1)


def _children(e: n.Expr) -> tuple[n.Expr, ...]:
    if isinstance(e, n.Call):
        return e.args
    if isinstance(e, n.Aggregate):
        return (e.expr,) if e.param is None else (e.expr, e.param)
    if isinstance(e, n.Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, n.Negate | n.Paren | n.Subquery):
        return (e.expr,)
    if isinstance(e, n.MatrixSelector):
        return (e.selector,)
    return ()


def _reach(e: n.Expr, lookback_ms: int) -> int:
    if isinstance(e, n.VectorSelector):
        return e.offset_ms + lookback_ms
    if isinstance(e, n.MatrixSelector):
        return e.selector.offset_ms + e.range_ms
    if isinstance(e, n.Subquery):
        return e.offset_ms + e.range_ms + _reach(e.expr, lookback_ms)
    children: tuple[n.Expr | None, ...] = ()
    if isinstance(e, n.Call):
        children = e.args
    elif isinstance(e, n.Aggregate):
        children = (e.expr, e.param)
    elif isinstance(e, n.Binary):
        children = (e.lhs, e.rhs)
    elif isinstance(e, n.Negate | n.Paren):
        children = (e.expr,)
    return max((_reach(c, lookback_ms) for c in children if c is not None), default=0)


class _Evaluator:
    def __init__(self, store: SeriesSource, lookback_ms: int, at_ms: int,
                 bounds: tuple[int, int], subquery_step_ms: int, budget: Budget,
                 step_cache: StepCache | None = None) -> None:
        self.store = store
        self.budget = budget  # shared with the evaluators of subquery steps
        self.step_cache = step_cache
        self.lookback_ms = lookback_ms
        self.at_ms = at_ms  # this evaluation's time (a step, inside a subquery)
        self.bounds = bounds  # the query's start() and end()
        self.query_step_ms = 0  # the query's step(): 0 for an instant query
        # 1: windows are left-open (t - range, t] (Prometheus 3); 0: closed (2.x). Sample
        # times are whole ms, so a window's first ms is its start + open_ms.
        self.open_ms = 1
        self.subquery_step_ms = subquery_step_ms
        self.given: Given | None = None  # set on the query's own evaluator only

    def base_ms(self, at: n.At) -> int:
        """The time a selector or subquery reads at, before its offset."""
        if at is None:
            return self.at_ms
        if at == n.AT_START:
            return self.bounds[0]
        return self.bounds[1] if at == n.AT_END else int(at)

    def eval(self, e: n.Expr) -> Value:
        if self.given is not None:
            answer = self.given.get(id(e))
            if answer is not None:
                return answer()
        if isinstance(e, n.NumberLiteral):
            return e.value
        if isinstance(e, n.StringLiteral):
            return e.value
        if isinstance(e, n.Paren):
            return self.eval(e.expr)
        if isinstance(e, n.VectorSelector):
            return [InstantSample(labels, v) for labels, _, v in self.instant(e)]
        if isinstance(e, n.MatrixSelector):
            return self.matrix(e)
        if isinstance(e, n.Subquery):
            return self.subquery(e)
        if isinstance(e, n.Negate):
            return self.negate(e)
        if isinstance(e, n.Aggregate):
            return self.aggregate(e)
        if isinstance(e, n.Binary):
            return self.binary(e)
        return self.call(e)

    def scalar(self, e: n.Expr) -> float:
        value = self.eval(e)
        assert isinstance(value, float)
        return value

    def vector(self, e: n.Expr) -> Vector:
        value = self.eval(e)
        assert isinstance(value, list)
        return value  # type: ignore[return-value]

    def select(self, sel: n.VectorSelector, start_ms: int, end_ms: int) -> list[Series]:
        return self.store.select(sel.matchers, start_ms, end_ms)

    def instant(self, sel: n.VectorSelector) -> list[tuple[Labels, int, float]]:
        ref = self.base_ms(sel.at) - sel.offset_ms
        if sel.extend:
            return self.smoothed(sel, ref)
        # Only the newest sample is read: a store that hands out just that
        # (MemoryStore.select_newest) copies no lookback window and builds no Series.
        newest = getattr(self.store, "select_newest", None)
        if newest is not None:
            found: list[tuple[Labels, int, float]] = newest(
                sel.matchers, ref - self.lookback_ms + self.open_ms, ref)
            self.budget.charge(len(found))
            return found
        selected = self.select(sel, ref - self.lookback_ms + self.open_ms, ref)
        self.budget.charge(len(selected))
        return [(s.labels, s.ts[-1], s.vs[-1]) for s in selected if not is_stale(s.vs[-1])]

    def smoothed(self, sel: n.VectorSelector, ref: int) -> list[tuple[Labels, int, float]]:
        """`x smoothed` (Prometheus 3, experimental): the value at `ref` interpolated
        between the samples around it within the lookback on either side."""
        if sel.extend != "smoothed":
            raise PromQLError(f"the {sel.extend} modifier needs a range selector")
        out = []
        for s in self.select(sel, ref - self.lookback_ms + 1, ref + self.lookback_ms):
            self.budget.charge(len(s.ts))
            ts = [t for t, v in zip(s.ts, s.vs, strict=True) if not is_stale(v)]
            vs = [v for v in s.vs if not is_stale(v)]
            value = interpolate_at(ts, vs, ref)
            if value is not None:
                out.append((s.labels, ref, value))
        return out

    def matrix(self, e: n.MatrixSelector) -> list[RangeSeries]:
        end = self.base_ms(e.selector.at) - e.selector.offset_ms
        out = []
        for s in self.select(e.selector, end - e.range_ms + self.open_ms, end):
            self.budget.charge(len(s.ts))
            # Only a NaN can be a staleness marker (NaN != NaN): skip the check without one.
            if any(v != v for v in s.vs):
                keep = [i for i, v in enumerate(s.vs) if not is_stale(v)]
                s.ts = [s.ts[i] for i in keep]
                s.vs = [s.vs[i] for i in keep]
            if s.ts:
                out.append(RangeSeries(s.labels, s.ts, s.vs))
        return out

    def summaries(self, e: n.MatrixSelector) -> list[Summary] | None:
        summarize = getattr(self.store, "summarize", None)
        if summarize is None:
            return None
        end = self.base_ms(e.selector.at) - e.selector.offset_ms
        found: list[Summary] = summarize(e.selector.matchers,
                                         end - e.range_ms + self.open_ms, end)
        self.budget.charge(len(found))
        return found

    def summary_values(self, e: n.MatrixSelector, func: SummaryFunc, window: Window
                       ) -> list[tuple[Labels, float]] | None:
        """`func` of each series' summary (MemoryStore.summarize_apply), None when the store
        has no such method."""
        apply = getattr(self.store, "summarize_apply", None)
        if apply is None:
            return None
        end = self.base_ms(e.selector.at) - e.selector.offset_ms
        found: list[tuple[Labels, float]] = apply(
            e.selector.matchers, end - e.range_ms + self.open_ms, end, func, window)
        self.budget.charge(len(found))
        return found

    def subquery(self, e: n.Subquery) -> list[RangeSeries]:
        end = self.base_ms(e.at) - e.offset_ms
        step = e.step_ms or self.subquery_step_ms
        # The first multiple of step in the window: >= end - range (closed), > (open).
        first = end - e.range_ms + self.open_ms
        start = -(-first // step) * step
        points: dict[Labels, RangeSeries] = {}
        cache = self.step_cache
        kept = cache.steps_of(e.expr) if cache is not None else None
        owed = 0  # the charge of kept steps, paid at once: they cost no time
        for t in range(start, end + 1, step):
            samples = kept.get(t) if kept is not None else None
            if samples is None:
                inner = _Evaluator(self.store, self.lookback_ms, t, self.bounds,
                                   self.subquery_step_ms, self.budget, cache)
                inner.open_ms = self.open_ms
                inner.query_step_ms = self.query_step_ms
                samples = inner.vector(e.expr)
                if kept is not None and cache is not None and cache.final(t):
                    kept[t] = samples
                self.budget.charge(owed + len(samples) + 1)  # +1: an empty step costs too
                owed = 0
            else:
                owed += len(samples) + 1
            for sample in samples:
                series = points.get(sample.labels)
                if series is None:
                    series = points[sample.labels] = RangeSeries(sample.labels, [], [])
                series.ts.append(t)
                series.vs.append(sample.value)
        if owed:
            self.budget.charge(owed)
        return [points[k] for k in sorted(points)]

    def negate(self, e: n.Negate) -> Value:
        value = self.eval(e.expr)
        if isinstance(value, float):
            return -value
        vec = [InstantSample(fn.drop_name(s.labels), -s.value) for s in value]  # type: ignore[union-attr]
        return check_unique(vec)

    def aggregate(self, e: n.Aggregate) -> Vector:
        if fused.ENABLED:
            quick = fused.aggregate(self, e)
            if quick is not None:
                return quick
        param: float | str | None = None
        if e.param is not None:
            p = self.eval(e.param)
            assert isinstance(p, float | str)
            param = p
        out = aggregate(e.op, self.vector(e.expr), e.grouping, e.without, param,
                        self.open_ms == 1)
        # One sample a group, keyed by its labels: unique but for topk and bottomk, which
        # hand back their input's samples.
        return check_unique(out) if e.op in ("topk", "bottomk", "limitk", "limit_ratio") else out

    def binary(self, e: n.Binary) -> Value:
        lhs = self.eval(e.lhs)
        if not lhs and isinstance(lhs, list) and e.op in ("and", "unless"):
            # Empty whatever the right side holds, so it is not evaluated (Prometheus 2.42
            # evaluates it: a right side that fails, e.g. on duplicate series, raises
            # there and not here). In shipped rules the right side is often the dearer
            # (`... > 2 unless on (target) sum by (target) (rate(...[5m])) > 0`).
            return []
        rhs = self.eval(e.rhs)
        if isinstance(lhs, float) and isinstance(rhs, float):
            return scalar_op(e.op, lhs, rhs)
        v3 = self.open_ms == 1
        if isinstance(rhs, float):
            out = vector_scalar(e.op, lhs, rhs, False, e.return_bool, v3)  # type: ignore[arg-type]
        elif isinstance(lhs, float):
            out = vector_scalar(e.op, rhs, lhs, True, e.return_bool, v3)  # type: ignore[arg-type]
        elif e.op in ("and", "or", "unless"):
            out = set_op(e.op, lhs, rhs, e.matching)  # type: ignore[arg-type]
        else:
            out = vector_vector(e.op, lhs, rhs, e.matching, e.return_bool,  # type: ignore[arg-type]
                                v3)
        return check_unique(out)

    def call(self, e: n.Call) -> Value:
        return evaluate_call(self, e)
