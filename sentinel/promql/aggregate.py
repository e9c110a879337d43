"""Aggregation operators, step for step as Prometheus 2.42's evaluator.aggregation.

Summation order and the topk/bottomk heap follow Prometheus exactly, so
results (and which series win ties) are bit-for-bit the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector, labels_of
from sentinel.promql import floatops as f
from sentinel.promql.errors import PromQLError
from sentinel.promql.functions import _LABEL_NAME
from sentinel.promql.histogram import quantile
from sentinel.promql.limitagg import limit

_MAX_INT64 = 9223372036854774784.0
_MIN_INT64 = -9223372036854775808.0


class _Group:
    __slots__ = ("labels", "value", "mean", "count", "heap", "values", "comp", "incremental")

    def __init__(self, labels: Labels, first: InstantSample) -> None:
        self.labels = labels
        self.value = first.value
        self.mean = first.value
        self.count = 1
        self.comp = 0.0  # Prometheus 3's avg: the Kahan compensation
        self.incremental = False  # Prometheus 3's avg: the sum overflowed
        self.heap: list[InstantSample] = [first]
        self.values: list[float] = [first.value]


def _grouping_key(names: frozenset[str], without: bool) -> Callable[[Labels], Labels]:
    """The function that gives a series' group: its labels `by` the names, or all but them
    and the metric name (`without`). The labels are sorted, so the key is too."""
    if without:
        dropped = names | {METRIC_NAME}
        return lambda labels: tuple([kv for kv in labels if kv[0] not in dropped])
    if len(names) == 1:  # `by (target)`, the common case: no list, no set lookups
        (only,) = names

        def by_one(labels: Labels) -> Labels:
            for kv in labels:
                if kv[0] == only:
                    return (kv,)
            return ()
        return by_one
    return lambda labels: tuple([kv for kv in labels if kv[0] in names])


# Aggregations folded into one float per group in a single pass, as Prometheus folds
# them (same order of operations, so the same bits): no group object per group.
_FOLDS: dict[str, Callable[[float, float], float]] = {
    "sum": lambda cur, v: cur + v,
    "max": lambda cur, v: v if cur < v or cur != cur else cur,
    "min": lambda cur, v: v if cur > v or cur != cur else cur,
    "count": lambda cur, v: cur + 1.0,
    "group": lambda cur, v: 1.0,
}


def _fold(op: str, vec: Vector, key_of: Callable[[Labels], Labels]) -> Vector:
    fold = _FOLDS[op]
    first_is_value = op in ("sum", "max", "min")
    values: dict[Labels, float] = {}
    get = values.get
    for s in vec:
        key = key_of(s.labels)
        cur = get(key)
        if cur is None:
            values[key] = s.value if first_is_value else 1.0
        else:
            values[key] = fold(cur, s.value)
    return [InstantSample(k, v) for k, v in values.items()]


def aggregate(
    op: str, vec: Vector, grouping: tuple[str, ...], without: bool, param: float | str | None,
    v3: bool = True,
) -> Vector:
    """Apply aggregation `op` to `vec` grouped `by` (or `without`) the labels.

    `v3`: Prometheus 3's arithmetic (compensated `sum` and `avg`, a NaN or infinite
    first value makes `stddev`/`stdvar` NaN); False: Prometheus 2.42's, bit for bit.
    """
    k = 0
    if op in ("limitk", "limit_ratio"):  # Prometheus 3, experimental
        assert isinstance(param, float)
        if op == "limitk" and not _MIN_INT64 <= param <= _MAX_INT64:
            raise PromQLError(f"Scalar value {param} overflows int64")
        return limit(op, vec, _grouping_key(frozenset(grouping), without), param)
    if op in ("topk", "bottomk"):
        assert isinstance(param, float)
        if not _MIN_INT64 <= param <= _MAX_INT64:
            raise PromQLError(f"Scalar value {param} overflows int64")
        k = int(param)
        if k < 1:
            return []
    names = frozenset(grouping)
    if op == "count_values":
        assert isinstance(param, str)
        if not _LABEL_NAME.fullmatch(param):
            raise PromQLError(f'invalid label name "{param}"')
        if not without:
            names = names | {param}
        vec = [
            InstantSample(
                labels_of([*(kv for kv in s.labels if kv[0] != param),
                           (param, f.format_float(s.value))]),
                s.value,
            )
            for s in vec
        ]  # fmt: skip
    key_of = _grouping_key(names, without)
    if op == "sum" and v3:
        return kahan_sums((key_of(s.labels), s.value) for s in vec)
    if op in _FOLDS:
        return _fold(op, vec, key_of)
    groups: dict[Labels, _Group] = {}
    for s in vec:
        key = key_of(s.labels)
        group = groups.get(key)
        if group is None:
            groups[key] = _Group(key, s)
            if op in ("stddev", "stdvar"):
                bad = v3 and (math.isnan(s.value) or math.isinf(s.value))
                groups[key].value = math.nan if bad else 0.0
            continue
        if op == "avg" and v3:
            _avg3(group, s.value)
            continue
        _accumulate(op, group, s, k)
    if op == "avg" and v3:
        for g in groups.values():
            g.value = (g.mean + g.comp if g.incremental
                       else g.value / g.count + g.comp / g.count)
        return [InstantSample(g.labels, g.value) for g in groups.values()]
    return _results(op, groups.values(), param)


def _avg3(g: _Group, v: float) -> None:
    """Prometheus 3's avg step: a compensated sum, incremental once the sum would overflow."""
    g.count += 1
    if not g.incremental:
        total, comp = f.kahan_inc3(v, g.value, g.comp)
        if not math.isinf(total):
            g.value, g.comp = total, comp
            return
        g.incremental = True
        g.mean = g.value / (g.count - 1)
        g.comp /= g.count - 1
    q = (g.count - 1) / g.count
    g.mean, g.comp = f.kahan_inc3(v / g.count, q * g.mean, q * g.comp)


def _accumulate(op: str, g: _Group, s: InstantSample, k: int) -> None:
    v = s.value
    if op == "avg":
        g.count += 1
        if math.isinf(g.mean):
            if math.isinf(v) and (g.mean > 0) == (v > 0):
                return
            if not math.isinf(v) and not math.isnan(v):
                return
        g.mean += v / g.count - g.mean / g.count
    elif op == "count_values":
        g.count += 1
    elif op in ("stddev", "stdvar"):
        g.count += 1
        d = v - g.mean
        g.mean += d / g.count
        g.value += d * (v - g.mean)
    elif op == "topk":
        _heap_offer(g.heap, s, k, _less_top)
    elif op == "bottomk":
        _heap_offer(g.heap, s, k, _less_bottom)
    elif op == "quantile":
        g.values.append(v)


def _results(op: str, groups: object, param: float | str | None) -> Vector:
    out: Vector = []
    for g in groups:  # type: ignore[attr-defined]
        if op in ("topk", "bottomk"):
            # Prometheus sorts the heap in reverse with its Less, in which NaN is the
            # least: NaN comes last for topk and bottomk alike; ties keep heap order.
            sign = -1.0 if op == "topk" else 1.0
            out.extend(sorted(g.heap, key=lambda s: (s.value != s.value,
                                                     0.0 if s.value != s.value
                                                     else sign * s.value)))
            continue
        if op == "avg":
            value = g.mean
        elif op == "count_values":
            value = float(g.count)
        elif op == "stdvar":
            value = g.value / g.count
        elif op == "stddev":
            value = f.sqrt(g.value / g.count)
        elif op == "quantile":
            assert isinstance(param, float)
            value = quantile(param, g.values)
        else:
            value = g.value
        out.append(InstantSample(g.labels, value))
    return out


def _less_top(a: InstantSample, b: InstantSample) -> bool:
    return math.isnan(a.value) or a.value < b.value


def _less_bottom(a: InstantSample, b: InstantSample) -> bool:
    return math.isnan(a.value) or a.value > b.value


def _heap_offer(heap: list[InstantSample], s: InstantSample, k: int, less: object) -> None:
    """Prometheus's topk/bottomk step on a Go container/heap (its tie-breaking included)."""
    top = heap[0].value
    beats = s.value < top if less is _less_bottom else top < s.value
    if len(heap) < k or beats or math.isnan(top):
        if len(heap) == k:
            if k == 1:
                heap[0] = s
                return
            _pop(heap, less)
        heap.append(s)
        _up(heap, len(heap) - 1, less)


def _up(h: list[InstantSample], j: int, less: object) -> None:
    while True:
        i = (j - 1) // 2
        if j <= 0 or i == j or not less(h[j], h[i]):  # type: ignore[operator]
            break
        h[i], h[j] = h[j], h[i]
        j = i


def _down(h: list[InstantSample], i0: int, n: int, less: object) -> None:
    i = i0
    while True:
        j1 = 2 * i + 1
        if j1 >= n:
            break
        j = j1
        j2 = j1 + 1
        if j2 < n and less(h[j2], h[j1]):  # type: ignore[operator]
            j = j2
        if not less(h[j], h[i]):  # type: ignore[operator]
            break
        h[i], h[j] = h[j], h[i]
        i = j


def _pop(h: list[InstantSample], less: object) -> None:
    n = len(h) - 1
    h[0], h[n] = h[n], h[0]
    _down(h, 0, n, less)
    h.pop()


def kahan_sums(pairs: Iterable[tuple[Labels, float]]) -> Vector:
    """Prometheus 3's `sum`: each group's compensated sum (kahansum.Inc), in input order.

    `floatops.kahan_inc3` written out: the call was a third of a fleet-wide `sum by`.
    """
    sums: dict[Labels, list[float]] = {}  # key -> [sum, compensation]
    get = sums.get
    inf = math.inf
    for key, v in pairs:
        acc = get(key)
        if acc is None:
            sums[key] = [v, 0.0]
            continue
        total = acc[0]
        t = total + v
        if t == inf or t == -inf:
            acc[1] = 0.0
        elif abs(total) >= abs(v):
            acc[1] += (total - t) + v
        else:
            acc[1] += (v - t) + total
        acc[0] = t
    return [InstantSample(k, acc[0] + acc[1]) for k, acc in sums.items()]
