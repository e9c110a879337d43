"""Float arithmetic with Go's IEEE semantics (Python raises where Go returns Inf or NaN)."""

from __future__ import annotations

import math
import struct
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
        return go_log2(x)
    if base == 10:
        return go_log(x) * _INV_LN10  # Go's math.Log10, not C's log10
    return go_log(x)


# Go's untyped constants are exact: these are 1/Ln10 and 1/Ln2 rounded once.
_INV_LN10 = 0.4342944819032518
_INV_LN2 = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_L1, _L2, _L3, _L4 = (6.666666666666735130e-01, 3.999999999940941908e-01,
                      2.857142874366239149e-01, 2.222219843214978396e-01)
_L5, _L6, _L7 = 1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01
_HALF_SQRT2 = 7.07106781186547524401e-01


def go_log(x: float) -> float:
    """Go's math.Log on amd64 (log_amd64.s, FreeBSD's algorithm), for a finite x > 0.

    It differs from C's log in the last bit for some inputs (ln(3)); the fraction and
    exponent are read from the bits, as the assembly does (subnormals included).
    """
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    f1 = struct.unpack("<d", struct.pack("<Q", (bits & 0x000FFFFFFFFFFFFF) | 0x3FE0000000000000))[0]
    k = float(((bits >> 52) & 0x7FF) - 0x3FE)
    if f1 < _HALF_SQRT2:
        k -= 1.0
        f1 *= 2.0
    f = f1 - 1.0
    s = f / (2.0 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_L1 + s4 * (_L3 + s4 * (_L5 + s4 * _L7)))
    t2 = s4 * (_L2 + s4 * (_L4 + s4 * _L6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def go_log2(x: float) -> float:
    """Go's math.Log2 for a finite x > 0: from the binary exponent and Log of the fraction,
    exact for powers of two (C's log2 rounds differently in the last bit)."""
    frac, exp = math.frexp(x)
    if frac == 0.5:
        return float(exp - 1)
    return go_log(frac) * _INV_LN2 + float(exp)


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
