"""Trigonometric and date functions, with Go's math and time semantics.

Python's math raises where Go returns NaN (outside a function's domain) or
±Inf (overflow); these wrappers return what Go returns, so results compare
with Prometheus bit for bit. Date functions read a value as Unix seconds
(truncated to a whole second, as Go's int64 conversion does) in UTC.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
from collections.abc import Callable

from sentinel.promql import gotrig
from sentinel.promql.errors import PromQLError


def _go(fn: Callable[[float], float]) -> Callable[[float], float]:
    def call(v: float) -> float:
        try:
            return fn(v)
        except OverflowError:
            return math.inf
        except ValueError:
            return math.nan

    return call


def _atanh(v: float) -> float:
    if v in (1.0, -1.0):
        return math.copysign(math.inf, v)
    return math.atanh(v)


TRIG: dict[str, Callable[[float], float]] = {
    "sin": gotrig.sin,
    "cos": gotrig.cos,
    "tan": gotrig.tan,
    "asin": gotrig.asin,
    "acos": gotrig.acos,
    "atan": gotrig.atan,
    "sinh": gotrig.sinh,
    "cosh": gotrig.cosh,
    "tanh": gotrig.tanh,
    "asinh": _go(math.asinh),
    "acosh": _go(math.acosh),
    "atanh": _go(_atanh),
    "deg": lambda v: v * 180 / math.pi,
    "rad": lambda v: v * math.pi / 180,
}


def _days_in_month(t: dt.datetime) -> float:
    return float(calendar.monthrange(t.year, t.month)[1])


DATE: dict[str, Callable[[dt.datetime], float]] = {
    "day_of_month": lambda t: float(t.day),
    "day_of_week": lambda t: float((t.weekday() + 1) % 7),  # Go: Sunday is 0
    "day_of_year": lambda t: float(t.timetuple().tm_yday),
    "days_in_month": _days_in_month,
    "hour": lambda t: float(t.hour),
    "minute": lambda t: float(t.minute),
    "month": lambda t: float(t.month),
    "year": lambda t: float(t.year),
}


def date_value(name: str, seconds: float) -> float:
    """A date function of Unix seconds; NaN where Go's time has no Python equivalent."""
    if math.isnan(seconds) or math.isinf(seconds):
        return math.nan  # Go converts these to MinInt64 (year -292277022657): not modelled
    try:
        t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=int(seconds))
    except OverflowError:
        return math.nan
    return DATE[name](t)


def double_exponential_smoothing(vs: list[float], sf: float, tf: float) -> float | None:
    """holt_winters / double_exponential_smoothing over a series' values, as Prometheus 2.42."""
    if not 0 < sf < 1:
        raise PromQLError(f"invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:f}")
    if not 0 < tf < 1:
        raise PromQLError(f"invalid trend factor. Expected: 0 < tf < 1, got: {tf:f}")
    if len(vs) < 2:
        return None
    s0, s1 = 0.0, vs[0]
    b = vs[1] - vs[0]
    for i in range(1, len(vs)):
        x = sf * vs[i]
        if i - 1 != 0:
            b = tf * (s1 - s0) + (1 - tf) * b
        y = (1 - sf) * (s1 + b)
        s0, s1 = s1, x + y
    return s1


