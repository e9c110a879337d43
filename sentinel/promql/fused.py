"""Aggregations of range functions, and histogram quantiles of them, in one pass.

`histogram_quantile(φ, sum by (target, le) (rate(x_bucket[5m])))` is how every
latency rule reads a classic histogram, and at fleet size it is most of the
rule engine's work: 5,000 targets × ~20 buckets × each histogram, every
interval. The general path builds a sample per series, drops its name,
groups it by (target, le) into new samples, then groups those again without
`le`. Here each series' rate goes straight into its group (and bucket) from
the store's one-pass summaries (`MemoryStore.summarize_apply`).

The results are the general path's, bit for bit: sums fold in the same
order, groups and buckets come out in the order the general path forms
them, and `a or b` keeps a right-hand series only when no left-hand one has
its labels (tests/test_promql_fused.py compares both on random stores).

Taken only where that holds: `sum|min|max|count|group by (...)` (not
`without`, not by `__name__`) over range functions a store summary answers
(`rate`, `increase`, ...), or a plain `or` of them, each over a selector
with one metric name (so dropping the name leaves the series unique, and no
"same labelset" error is skipped).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector
from sentinel.promql import floatops as f
from sentinel.promql import nodes as n
from sentinel.promql.aggregate import kahan_sums
from sentinel.promql.functions import drop_name, parse_bound
from sentinel.promql.histogram import bucket_quantile
from sentinel.promql.rangefuncs import SUMMARY_FUNCTIONS, SummaryFunc, Window

# Off only to compare with the general path (tests, bench/ruleeval.py --no-fused).
ENABLED = True
_FOLDS = ("sum", "min", "max", "count", "group")
Operand = tuple[str, n.MatrixSelector]  # (range function, its selector)


class Evaluator(Protocol):
    """What the one-pass forms need of the engine's evaluator (calls.Evaluator has it)."""

    def scalar(self, e: n.Expr) -> float:
        """Evaluate a scalar sub-expression."""
        ...

    def base_ms(self, at: n.At) -> int:
        """The time a selector reads at, before its offset."""
        ...

    def summary_values(self, e: n.MatrixSelector, func: SummaryFunc, window: Window
                       ) -> list[tuple[Labels, float]] | None:
        """`func` of each series' summary, or None when the store has no summaries."""
        ...



def aggregate(ev: Evaluator, e: n.Aggregate) -> Vector | None:
    """`e` evaluated in one pass, or None when it is not of the fused form."""
    operands = _operands(ev, e)
    if operands is None:
        return None
    values = _values(ev, operands)
    if values is None:
        return None
    names = frozenset(e.grouping)
    op = e.op
    if op == "sum" and getattr(ev, "open_ms", 1) == 1:  # Prometheus 3: compensated sums
        return kahan_sums(((tuple([kv for kv in labels if kv[0] in names]), v)
                           for labels, v in values))
    folded: dict[Labels, float] = {}
    get = folded.get
    for labels, v in values:
        key = tuple([kv for kv in labels if kv[0] in names])
        cur = get(key)
        if cur is None:
            folded[key] = v if op in ("sum", "min", "max") else 1.0
        elif op == "sum":
            folded[key] = cur + v
        elif op == "max":
            folded[key] = v if cur < v or cur != cur else cur
        elif op == "min":
            folded[key] = v if cur > v or cur != cur else cur
        elif op == "count":
            folded[key] = cur + 1.0
    return [InstantSample(k, v) for k, v in folded.items()]


def histogram_quantile(ev: Evaluator, e: n.Call) -> Vector | None:
    """`histogram_quantile(φ, sum by (..., le) (...))` in one pass, or None when the
    second argument is not a fused sum (see the module's docstring)."""
    agg = n.unwrap_parens(e.args[1])
    if not isinstance(agg, n.Aggregate) or agg.op != "sum" or "le" not in agg.grouping:
        return None
    operands = _operands(ev, agg)
    if operands is None:
        return None
    q = ev.scalar(e.args[0])
    values = _values(ev, operands)
    if values is None:
        return None
    names = frozenset(agg.grouping) - {"le"}
    bounds: dict[str, float] = {}  # a fleet's histograms share a few `le` values
    refused: set[str] = set()
    groups: dict[Labels, dict[str, float]] = {}
    comps: dict[Labels, dict[str, float]] = {}  # Prometheus 3: each sum's compensation
    v3 = getattr(ev, "open_ms", 1) == 1
    for labels, v in values:
        le = ""
        key = []
        for kv in labels:
            if kv[0] in names:
                key.append(kv)
            elif kv[0] == "le":
                le = kv[1]
        if le not in bounds:
            if le in refused:
                continue  # the general path leaves such a bucket out before grouping
            bound = parse_bound(le)
            if bound is None:
                refused.add(le)
                continue
            bounds[le] = bound
        buckets = groups.get(k := tuple(key))
        if buckets is None:
            groups[k] = {le: v}
        elif v3:
            cur = buckets.get(le)
            if cur is None:
                buckets[le] = v
            else:  # a second series in the group: its compensation starts here
                comp = comps.get(k)
                if comp is None:
                    comp = comps[k] = {}
                buckets[le], comp[le] = f.kahan_inc3(v, cur, comp.get(le, 0.0))
        else:
            cur = buckets.get(le)
            buckets[le] = v if cur is None else cur + v
    for k, comp in comps.items():  # Prometheus 3 adds each sum's compensation at the end
        buckets = groups[k]
        for le, c in comp.items():
            buckets[le] += c
    return [InstantSample(k, bucket_quantile(q, [(bounds[le], v) for le, v in b.items()], v3))
            for k, b in groups.items()]



def _operands(ev: Evaluator, agg: n.Aggregate) -> list[Operand] | None:
    if (agg.op not in _FOLDS or agg.without or agg.param is not None
            or METRIC_NAME in agg.grouping or getattr(ev, "given", None)):
        return None
    found: list[Operand] = []
    return found if _collect(agg.expr, found) else None


def _collect(e: n.Expr, found: list[Operand]) -> bool:
    """Flatten `a or b or c` into its range calls; False at anything else."""
    e = n.unwrap_parens(e)
    if isinstance(e, n.Binary):
        plain = not e.return_bool and not e.matching.on and not e.matching.labels
        return e.op == "or" and plain and _collect(e.lhs, found) and _collect(e.rhs, found)
    if not isinstance(e, n.Call) or e.func not in SUMMARY_FUNCTIONS or len(e.args) != 1:
        return False
    sel = n.unwrap_parens(e.args[0])
    if not isinstance(sel, n.MatrixSelector):
        return False
    if not any(m.name == METRIC_NAME and m.op == "=" for m in sel.selector.matchers):
        return False
    found.append((e.func, sel))
    return True


def _values(ev: Evaluator, operands: list[Operand]) -> Iterator[tuple[Labels, float]] | None:
    """Each operand's (store labels, value), in the order `a or b or c` returns them."""
    results = []
    for func, sel in operands:
        s = sel.selector
        window = Window(ev.base_ms(s.at), sel.range_ms, s.offset_ms,
                        v3=getattr(ev, "open_ms", 1) == 1)
        got = ev.summary_values(sel, SUMMARY_FUNCTIONS[func], window)
        if got is None:
            return None  # a store without summaries: the general path
        results.append(got)
    if len(results) == 1:
        return iter(results[0])
    return _union(results)


def _union(results: list[list[tuple[Labels, float]]]) -> Iterator[tuple[Labels, float]]:
    seen: set[Labels] = set()
    for i, got in enumerate(results):
        fresh = []
        for labels, v in got:
            sig = drop_name(labels)
            if i and sig in seen:
                continue
            fresh.append(sig)
            yield labels, v
        seen.update(fresh)
