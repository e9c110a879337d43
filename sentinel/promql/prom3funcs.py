"""Functions Prometheus 3 added, as it computes them (promql/functions.go, quantile.go).

Range functions take (timestamps, values, Window) like `rangefuncs`; the rest
take evaluated arguments. Experimental ones are refused by the compiler unless
`promql-experimental-functions` is on (sentinel/promql/features.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import cmp_to_key

from sentinel.model import InstantSample, Vector, label_value
from sentinel.promql import floatops as f
from sentinel.promql.functions import classic_groups
from sentinel.promql.histogram import bucket_quantile, quantile
from sentinel.promql.rangefuncs import RangeFunc, Window


def first_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """The oldest value in the range (the series keeps its name, as with last_over_time)."""
    return vs[0]


def ts_of_first_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """When the oldest sample in the range was taken, in seconds."""
    return ts[0] / 1000


def ts_of_last_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """When the newest sample in the range was taken, in seconds."""
    return ts[-1] / 1000


def _ts_of_extreme(ts: Sequence[int], vs: Sequence[float], want_max: bool) -> float:
    best, when = vs[0], ts[0]
    for t, v in zip(ts, vs, strict=True):
        # >= (<=): the last of equal extremes wins; a NaN is replaced by anything.
        if (v >= best if want_max else v <= best) or math.isnan(best):
            best, when = v, t
    return when / 1000


def ts_of_max_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """When the largest value in the range was taken (the last of equal ones), in seconds."""
    return _ts_of_extreme(ts, vs, True)


def ts_of_min_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """When the smallest value in the range was taken (the last of equal ones), in seconds."""
    return _ts_of_extreme(ts, vs, False)


def mad_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Median absolute deviation from the median; NaN when a value is NaN."""
    if any(math.isnan(v) for v in vs):
        return f.NAN
    median = quantile(0.5, list(vs))
    return quantile(0.5, [abs(v - median) for v in vs])


RANGE_FUNCTIONS_3: dict[str, RangeFunc] = {
    "first_over_time": first_over_time,
    "ts_of_first_over_time": ts_of_first_over_time,
    "ts_of_last_over_time": ts_of_last_over_time,
    "ts_of_max_over_time": ts_of_max_over_time,
    "ts_of_min_over_time": ts_of_min_over_time,
    "mad_over_time": mad_over_time,
}

_CHUNK = re.compile(r"\d+|\D+")


def natural_less(a: str, b: str) -> bool:
    """github.com/facette/natsort's Compare: runs of digits compare as numbers."""
    ca, cb = _CHUNK.findall(a), _CHUNK.findall(b)
    for i, x in enumerate(ca):
        if i >= len(cb):
            return False
        y = cb[i]
        if x.isdigit() and y.isdigit() and int(x) == int(y) or x == y:
            if i == len(ca) - 1:
                return True
            if i == len(cb) - 1:
                return False
            continue
        if x.isdigit() and y.isdigit():
            return int(x) < int(y)
        return x < y
    return False


def _by_labels(names: Sequence[str], desc: bool):  # type: ignore[no-untyped-def]
    sign = -1 if desc else 1

    def compare(a: InstantSample, b: InstantSample) -> int:
        for name in names:
            x, y = label_value(a.labels, name), label_value(b.labels, name)
            if x != y:
                return -sign if natural_less(x, y) else sign
        # All equal: by the whole label set, so the order is total.
        return sign * ((a.labels > b.labels) - (a.labels < b.labels))
    return cmp_to_key(compare)


def sort_by_label(vec: Vector, *names: str) -> Vector:
    """Ascending by the labels' values in natural order, then by the whole label set."""
    return sorted(vec, key=_by_labels(names, False))


def sort_by_label_desc(vec: Vector, *names: str) -> Vector:
    """Descending by the labels' values in natural order, then by the whole label set."""
    return sorted(vec, key=_by_labels(names, True))


def histogram_fraction(lower: float, upper: float, vec: Vector) -> Vector:
    """The fraction of observations between two bounds, of classic histograms."""
    return [InstantSample(labels, bucket_fraction(lower, upper, b))
            for labels, b in classic_groups(vec)]


def histogram_quantiles(vec: Vector, label: str, *qs: float) -> Vector:
    """Several quantiles at once, each series labelled `label`="<φ>" (experimental)."""
    groups = classic_groups(vec)
    out: Vector = []
    for q in qs:
        text = _openmetrics_float(q)
        for labels, buckets in groups:
            tagged = tuple(sorted([*(kv for kv in labels if kv[0] != label), (label, text)]))
            out.append(InstantSample(tagged, bucket_quantile(q, buckets)))
    return out


def _openmetrics_float(q: float) -> str:
    """labels.FormatOpenMetricsFloat: like Go's %g but always with a `.0` on integers."""
    if math.isnan(q):
        return "NaN"
    if math.isinf(q):
        return "+Inf" if q > 0 else "-Inf"
    text = repr(q)
    return text if any(c in text for c in ".eE") else text + ".0"


def bucket_fraction(lower: float, upper: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's BucketFraction: linear interpolation inside the buckets that hold the
    bounds; NaN without a +Inf bucket or observations."""
    merged: list[list[float]] = []
    for bound, count in sorted(buckets, key=lambda b: b[0]):
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    if not merged or not math.isinf(merged[-1][0]) or merged[-1][0] < 0:
        return f.NAN
    count = merged[-1][1]
    if count == 0 or math.isnan(lower) or math.isnan(upper):
        return f.NAN
    if lower >= upper:
        return 0.0
    rank = lower_rank = upper_rank = 0.0
    lower_set = upper_set = False
    lower_bound = -f.INF if merged[0][0] <= 0 else 0.0
    for i, (upper_bound, b_count) in enumerate(merged):
        if i > 0:
            lower_bound = merged[i - 1][0]

        def interpolate(v: float, lb: float = lower_bound, ub: float = upper_bound,
                        bc: float = b_count, r: float = rank) -> float:
            if lb == -f.INF:
                return bc
            return r + (bc - r) * (v - lb) / (ub - lb)

        if not lower_set and lower_bound >= lower:
            lower_rank, lower_set = rank, True
        if not upper_set and lower_bound >= upper:
            upper_rank, upper_set = rank, True
        if lower_set and upper_set:
            break
        if not lower_set and lower_bound < lower < upper_bound:
            lower_rank, lower_set = interpolate(lower), True
        if not upper_set and lower_bound < upper < upper_bound:
            upper_rank, upper_set = interpolate(upper), True
        if lower_set and upper_set:
            break
        rank = b_count
    if not lower_set or lower_rank > count:
        lower_rank = count
    if not upper_set or upper_rank > count:
        upper_rank = count
    return (upper_rank - lower_rank) / count
