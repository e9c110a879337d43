"""Float arithmetic with Go's IEEE semantics (Python raises where Go returns Inf or NaN)."""

from __future__ import annotations

import math
from decimal import Decimal

INF = math.inf
NAN = math.nan


def div(a: float, b: float) -> float:
    """a / b as Go computes it: ±Inf or NaN on division by zero."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)
    return a / b


def mod(a: float, b: float) -> float:
    """Go's math.Mod: the sign of a, NaN for x%0 and Inf%y."""
    try:
        return math.fmod(a, b)
    except ValueError:
        return NAN


def _odd_int(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0


def power(x: float, y: float) -> float:
    """Go's math.Pow."""
    try:
        return math.pow(x, y)
    except OverflowError:
        return -INF if x < 0 and _odd_int(y) else INF
    except ValueError:
        if x == 0:  # 0 ** negative
            return math.copysign(INF, x) if _odd_int(y) else INF
        return NAN


def floor(x: float) -> float:
    """math.Floor, keeping NaN and ±Inf."""
    return float(math.floor(x)) if math.isfinite(x) else x


def ceil(x: float) -> float:
    """math.Ceil, keeping NaN and ±Inf."""
    return float(math.ceil(x)) if math.isfinite(x) else x


def sqrt(x: float) -> float:
    """math.Sqrt: NaN for negatives."""
    return math.sqrt(x) if x >= 0 or math.isnan(x) else NAN


def log(x: float, base: float | None = None) -> float:
    """math.Log / Log2 / Log10: -Inf at 0, NaN below."""
    if math.isnan(x) or x < 0:
        return NAN
    if x == 0:
        return -INF
    if x == INF:
        return INF
    if base == 2:
        return math.log2(x)
    if base == 10:
        return math.log10(x)
    return math.log(x)


def exp(x: float) -> float:
    """math.Exp: +Inf on overflow."""
    try:
        return math.exp(x)
    except OverflowError:
        return INF


def kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    """One step of Neumaier-compensated summation, as Prometheus's kahanSumInc."""
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


def kahan_inc3(inc: float, total: float, c: float) -> tuple[float, float]:
    """Prometheus 3's kahansum.Inc: kahan_inc, but the compensation is reset to 0 when the
    sum overflows (so an infinite sum is not turned into NaN by an infinite compensation)."""
    t = total + inc
    if t in (INF, -INF):
        return t, 0.0
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


def is_nan(x: float) -> bool:
    """math.IsNaN (for readability beside the other helpers)."""
    return x != x


def format_float(v: float) -> str:
    """A value as Prometheus prints it (API, count_values): shortest digits, no exponent.

    Go's strconv.FormatFloat(v, 'f', -1, 64): "NaN", "+Inf", "-Inf", "0.1", "1000000".
    """
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    text = format(Decimal(repr(v)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
