"""Quantiles of a list of values and of classic histogram buckets."""

from __future__ import annotations

import math
from operator import itemgetter

from sentinel.promql import floatops as f

_BOUND = itemgetter(0)


def _nan_first(v: float) -> tuple[bool, float]:
    # Prometheus sorts NaN below every number.
    return (not math.isnan(v), 0.0 if math.isnan(v) else v)


def quantile(q: float, values: list[float]) -> float:
    """φ-quantile with linear interpolation between the closest ranks (Prometheus's quantile)."""
    if not values:
        return f.NAN
    if q < 0:
        return -f.INF
    if q > 1:
        return f.INF
    values = sorted(values, key=_nan_first)
    n = float(len(values))
    rank = q * (n - 1)
    lower = max(0.0, f.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - f.floor(rank)
    return values[int(lower)] * (1 - weight) + values[int(upper)] * weight


# Prometheus 3 treats counts within this relative difference as equal (float noise from
# summing buckets), before forcing monotonicity (promql/quantile.go).
SMALL_DELTA_TOLERANCE = 1e-12


def bucket_quantile(q: float, buckets: list[tuple[float, float]], v3: bool = True) -> float:
    """histogram_quantile over (upper bound, cumulative count) pairs.

    NaN when q is NaN, when the +Inf bucket is missing, with fewer than two
    buckets or no observations; monotonicity of the counts is forced, and
    buckets with the same bound are merged. `v3`: Prometheus 3 also evens out
    counts that differ by a relative 1e-12 or less; False: as Prometheus 2.42.
    """
    if math.isnan(q):
        return f.NAN
    if q < 0:
        return -f.INF
    if q > 1:
        return f.INF
    buckets = sorted(buckets, key=_BOUND)  # by bound alone: equal bounds keep their order
    if not math.isinf(buckets[-1][0]) or buckets[-1][0] < 0:
        return f.NAN
    merged: list[list[float]] = []
    for bound, count in buckets:
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    if v3:
        _ensure_monotonic3(merged)
    else:
        highest = -f.INF
        for b in merged:  # counts must not decrease with the bound
            if b[1] > highest:
                highest = b[1]
            elif b[1] < highest:
                b[1] = highest
    if len(merged) < 2:
        return f.NAN
    observations = merged[-1][1]
    if observations == 0:
        return f.NAN
    rank = q * observations
    counts = [b[1] for b in merged[:-1]]
    i = _search(counts, rank)
    if i == len(merged) - 1:
        return merged[-2][0]
    if i == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[i][0], merged[i][1]
    if i > 0:
        start = merged[i - 1][0]
        count -= merged[i - 1][1]
        rank -= merged[i - 1][1]
    return start + (end - start) * f.div(rank, count)


def _ensure_monotonic3(merged: list[list[float]]) -> None:
    """ensureMonotonicAndIgnoreSmallDeltas: a count within the tolerance of the previous
    one takes its value; a smaller one is raised to it."""
    prev = merged[0][1]
    for b in merged[1:]:
        cur = b[1]
        if cur == prev:
            continue
        if cur < prev:
            b[1] = prev
            continue
        if prev > 0 and cur + prev >= 2.2250738585072014e-308:  # almost.Equal written out
            small = (cur - prev) / (cur + prev) < SMALL_DELTA_TOLERANCE
        else:
            small = _almost_equal(prev, cur, SMALL_DELTA_TOLERANCE)
        if small:
            b[1] = prev
            continue
        prev = cur


def _almost_equal(a: float, b: float, epsilon: float) -> bool:
    """util/almost.Equal."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < 2.2250738585072014e-308:
        return diff < epsilon * 2.2250738585072014e-308
    return diff / min(abs_sum, 1.7976931348623157e308) < epsilon


def _search(counts: list[float], rank: float) -> int:
    """Go's sort.Search for the first count >= rank, step for step (NaN included)."""
    lo, hi = 0, len(counts)
    while lo < hi:
        mid = (lo + hi) // 2
        if not counts[mid] >= rank:
            lo = mid + 1
        else:
            hi = mid
    return lo
