"""Functions over one series' samples in a range, as Prometheus 2.42 computes them.

Each takes the sample timestamps and values inside the closed range
[t - offset - range, t - offset] (stale markers already removed) and a
`Window`, and returns the value or None when the series yields no output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from sentinel.promql import floatops as f
from sentinel.promql.histogram import quantile
from sentinel.promql.mathfuncs import double_exponential_smoothing


@dataclass(frozen=True, slots=True)
class Window:
    """Where the range sits, and the call's scalar arguments."""

    eval_ms: int  # where the range ends before its offset: the `@` time, if any
    range_ms: int
    offset_ms: int
    scalars: tuple[float, ...] = ()
    now_ms: int | None = None  # the evaluation's own time (None: eval_ms)
    v3: bool = True  # Prometheus 3's arithmetic (False: 2.x, bit for bit)


RangeFunc = Callable[[Sequence[int], Sequence[float], Window], "float | None"]


def _extrapolated_rate(
    ts: Sequence[int], vs: Sequence[float], w: Window, is_counter: bool, is_rate: bool
) -> float | None:
    if len(vs) < 2:
        return None
    corrections = []
    if is_counter:
        last = 0.0
        for v in vs:
            if v < last:
                corrections.append(last)
            last = v
    return extrapolate(len(vs), ts[0], vs[0], ts[-1], vs[-1], corrections, w,
                       is_counter, is_rate)


def extrapolate(count: int, t_first: int, v_first: float, t_last: int, v_last: float,
                corrections: Sequence[float], w: Window, is_counter: bool, is_rate: bool
                ) -> float | None:
    """Prometheus's extrapolatedRate from the first and last sample, their number and the
    counter corrections (the value before each drop, in order): what rate(), increase()
    and delta() need, so a store can hand it over without copying the samples."""
    if count < 2:
        return None
    range_start = w.eval_ms - (w.range_ms + w.offset_ms)
    range_end = w.eval_ms - w.offset_ms
    result = v_last - v_first
    if is_counter:
        for c in corrections:
            result += c
    to_start = (t_first - range_start) / 1000
    to_end = (range_end - t_last) / 1000
    sampled = (t_last - t_first) / 1000
    avg_step = sampled / (count - 1)
    if w.v3:
        return _extrapolate3(result, v_first, to_start, to_end, sampled, avg_step, w,
                             is_counter, is_rate)
    if is_counter and result > 0 and v_first >= 0:
        # A counter cannot go below zero: do not extrapolate past its zero point.
        to_zero = sampled * (v_first / result)
        if to_zero < to_start:
            to_start = to_zero
    threshold = avg_step * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else avg_step / 2
    interval += to_end if to_end < threshold else avg_step / 2
    factor = interval / sampled
    if is_rate:
        seconds = w.range_ms / 1000
        factor = factor / seconds if seconds else f.div(factor, seconds)
    return result * factor


def _extrapolate3(result: float, v_first: float, to_start: float, to_end: float,
                  sampled: float, avg_step: float, w: Window, is_counter: bool,
                  is_rate: bool) -> float:
    """Prometheus 3's order: the start is first cut to half a step when it is too far,
    then to the counter's zero point when that is nearer."""
    threshold = avg_step * 1.1
    if to_start >= threshold:
        to_start = avg_step / 2
    if is_counter and result > 0 and v_first >= 0:
        to_zero = sampled * (v_first / result)
        if to_zero < to_start:
            to_start = to_zero
    if to_end >= threshold:
        to_end = avg_step / 2
    factor = (sampled + to_start + to_end) / sampled if sampled else 1.0
    if is_rate:
        seconds = w.range_ms / 1000
        factor = factor / seconds if seconds else f.div(factor, seconds)
    return result * factor


def rate(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Per-second increase of a counter, extrapolated to the range."""
    return _extrapolated_rate(ts, vs, w, True, True)


def increase(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Increase of a counter over the range, extrapolated."""
    return _extrapolated_rate(ts, vs, w, True, False)


def delta(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Change of a gauge over the range, extrapolated."""
    return _extrapolated_rate(ts, vs, w, False, False)


def _instant_value(ts: Sequence[int], vs: Sequence[float], is_rate: bool) -> float | None:
    if len(vs) < 2:
        return None
    last, prev = vs[-1], vs[-2]
    result = last if is_rate and last < prev else last - prev
    interval = ts[-1] - ts[-2]
    if interval == 0:
        return None
    return result / (interval / 1000) if is_rate else result


def irate(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Per-second rate from the last two samples."""
    return _instant_value(ts, vs, True)


def idelta(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Difference of the last two samples."""
    return _instant_value(ts, vs, False)


def avg_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Mean, computed incrementally with compensation as Prometheus does.

    `floatops.kahan_inc` written out in the loop: the call and its tuple were
    half the time of an `avg_over_time(...[5m])` over 1,000 series of 20 samples.
    Prometheus 3 sums first (compensated) and divides, turning incremental only
    where the sum would overflow.
    """
    if w.v3:
        return _avg3(vs)
    mean = count = c = 0.0
    isinf = math.isinf
    for v in vs:
        count += 1
        if isinf(mean):
            if isinf(v) and (mean > 0) == (v > 0):
                continue
            if not isinf(v) and not math.isnan(v):
                continue
        inc = v / count - mean / count
        t = mean + inc
        if abs(mean) >= abs(inc):
            c += (mean - t) + inc
        else:
            c += (inc - t) + mean
        mean = t
    return mean if isinf(mean) else mean + c


def _avg3(vs: Sequence[float]) -> float:
    """Prometheus 3's funcAvgOverTime for floats."""
    total, c, count = vs[0], 0.0, 1.0
    mean, incremental = 0.0, False
    for v in vs[1:]:
        count += 1
        if not incremental:
            new_total, new_c = f.kahan_inc3(v, total, c)
            if not math.isinf(new_total):
                total, c = new_total, new_c
                continue
            incremental = True
            mean = total / (count - 1)
            c /= count - 1
        q = (count - 1) / count
        mean, c = f.kahan_inc3(v / count, q * mean, q * c)
    if incremental:
        return mean + c
    return total / count + c / count


def sum_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Compensated sum (`floatops.kahan_inc`, written out in the loop)."""
    total = c = 0.0
    for v in vs:
        t = total + v
        if abs(total) >= abs(v):
            c += (total - t) + v
        else:
            c += (v - t) + total
        total = t
    return total if math.isinf(total) else total + c


def min_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Smallest value (NaN only if all are NaN)."""
    lo = vs[0]
    for v in vs:
        if v < lo or math.isnan(lo):
            lo = v
    return lo


def max_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Largest value (NaN only if all are NaN)."""
    hi = vs[0]
    for v in vs:
        if v > hi or math.isnan(hi):
            hi = v
    return hi


def count_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Number of samples."""
    return float(len(vs))


def last_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """The newest value."""
    return vs[-1]


def present_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """1 for any series with a sample in the range."""
    return 1.0


def _variance(vs: Sequence[float], v3: bool) -> float:
    inc = f.kahan_inc3 if v3 else f.kahan_inc
    count = mean = c_mean = aux = c_aux = 0.0
    for v in vs:
        count += 1
        d = v - (mean + c_mean)
        mean, c_mean = inc(d / count, mean, c_mean)
        aux, c_aux = inc(d * (v - (mean + c_mean)), aux, c_aux)
    return (aux + c_aux) / count


def stdvar_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Population variance."""
    return _variance(vs, w.v3)


def stddev_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Population standard deviation."""
    return f.sqrt(_variance(vs, w.v3))


def quantile_over_time(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """φ-quantile of the values (φ is the first scalar argument)."""
    return quantile(w.scalars[0], list(vs))


def changes(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """How often the value changed (NaN to NaN is no change)."""
    count = 0
    prev = vs[0]
    for cur in vs[1:]:
        if cur != prev and not (math.isnan(cur) and math.isnan(prev)):
            count += 1
        prev = cur
    return float(count)


def resets(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """How often the value decreased (counter resets)."""
    count = 0
    prev = vs[0]
    for cur in vs[1:]:
        if cur < prev:
            count += 1
        prev = cur
    return float(count)


def _linear_regression(
    ts: Sequence[int], vs: Sequence[float], intercept_ms: int
) -> tuple[float, float]:
    const_y = all(v == vs[0] for v in vs[1:])
    if const_y:
        return (f.NAN, f.NAN) if math.isinf(vs[0]) else (0.0, vs[0])
    n = sx = cx = sy = cy = sxy = cxy = sx2 = cx2 = 0.0
    for t, v in zip(ts, vs, strict=True):
        n += 1
        x = (t - intercept_ms) / 1e3
        sx, cx = f.kahan_inc(x, sx, cx)
        sy, cy = f.kahan_inc(v, sy, cy)
        sxy, cxy = f.kahan_inc(x * v, sxy, cxy)
        sx2, cx2 = f.kahan_inc(x * x, sx2, cx2)
    sx, sy, sxy, sx2 = sx + cx, sy + cy, sxy + cxy, sx2 + cx2
    cov = sxy - sx * sy / n
    var = sx2 - sx * sx / n
    slope = f.div(cov, var)
    return slope, sy / n - slope * sx / n


def deriv(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """Per-second slope of a least-squares line through the samples."""
    if len(vs) < 2:
        return None
    return _linear_regression(ts, vs, ts[0])[0]


def predict_linear(ts: Sequence[int], vs: Sequence[float], w: Window) -> float | None:
    """The least-squares line's value `scalars[0]` seconds after the evaluation time."""
    if len(vs) < 2:
        return None
    # From the evaluation time, not the `@` time (Prometheus: enh.Ts).
    slope, intercept = _linear_regression(ts, vs, w.eval_ms if w.now_ms is None else w.now_ms)
    return slope * w.scalars[0] + intercept


def _double_exponential_smoothing(ts: Sequence[int], vs: Sequence[float], w: Window
                                  ) -> float | None:
    return double_exponential_smoothing(list(vs), w.scalars[0], w.scalars[1])


# Range functions that need only a series' first and last sample, the number of
# samples and its counter drops: (count, t_first, v_first, t_last, v_last,
# corrections, window) -> value. The engine feeds them store summaries.
SummaryFunc = Callable[[int, int, float, int, float, Sequence[float], Window], "float | None"]

SUMMARY_FUNCTIONS: dict[str, SummaryFunc] = {
    # partial, not a lambda: one Python call a series where the store feeds thousands.
    "rate": partial(extrapolate, is_counter=True, is_rate=True),
    "increase": partial(extrapolate, is_counter=True, is_rate=False),
    "delta": partial(extrapolate, is_counter=False, is_rate=False),
    "count_over_time": lambda n, t0, v0, t1, v1, c, w: float(n),
    "last_over_time": lambda n, t0, v0, t1, v1, c, w: v1,
    "present_over_time": lambda n, t0, v0, t1, v1, c, w: 1.0,
}

RANGE_FUNCTIONS: dict[str, RangeFunc] = {
    "double_exponential_smoothing": _double_exponential_smoothing,
    "rate": rate,
    "increase": increase,
    "delta": delta,
    "irate": irate,
    "idelta": idelta,
    "avg_over_time": avg_over_time,
    "sum_over_time": sum_over_time,
    "min_over_time": min_over_time,
    "max_over_time": max_over_time,
    "count_over_time": count_over_time,
    "last_over_time": last_over_time,
    "present_over_time": present_over_time,
    "stddev_over_time": stddev_over_time,
    "stdvar_over_time": stdvar_over_time,
    "quantile_over_time": quantile_over_time,
    "changes": changes,
    "resets": resets,
    "deriv": deriv,
    "predict_linear": predict_linear,
}
