"""Go's math.Sin, Cos, Tan, Atan, Asin, Acos, Sinh, Cosh and Tanh, for bit-exact results.

Go computes these in pure Go (the Cephes polynomials), not with the C
library, and the two differ in the last bit often enough that a rule test
comparing floats exactly tells them apart. These are transcriptions of Go's
algorithms (src/math/{sin,tan,atan,asin,sinh,tanh}.go, BSD licence, from
Cephes by Stephen L. Moshier). Arguments at or above Go's reduceThreshold
(2**29) use Payne-Hanek reduction in Go; here they fall back to the C
library, which may differ in the last bit. Sinh and Cosh call Go's Exp,
which on amd64 is assembly that this module does not reproduce (nor does
`exp()`): they can differ from Prometheus in the last bit.
"""

from __future__ import annotations

import math

from sentinel.promql.floatops import exp

_NAN = math.nan
_PI4A = 7.85398125648498535156e-1
_PI4B = 3.77489470793079817668e-8
_PI4C = 2.69515142907905952645e-15
_FOUR_OVER_PI = 4 / math.pi  # the same float64 as Go's exact constant 4/Pi, rounded once
_REDUCE_THRESHOLD = 1 << 29
_SIN = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
        -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_COS = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
        2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)
_TAN_P = (-1.30936939181383777646e4, 1.15351664838587416140e6, -1.79565251976484877988e7)
_TAN_Q = (1.0, 1.36812963470692954678e4, -1.32089234440210967447e6,
          2.50083801823357915839e7, -5.38695755929454629881e7)


def _reduce(x: float) -> tuple[int, float]:
    """Octant j and remainder z of x >= 0, as Go (j already mapped to even)."""
    j = int(x * _FOUR_OVER_PI)
    y = float(j)
    if j & 1:
        j += 1
        y += 1
    return j, ((x - y * _PI4A) - y * _PI4B) - y * _PI4C


def _sin_poly(z: float, zz: float) -> float:
    s = _SIN
    return z + z * zz * ((((((s[0] * zz) + s[1]) * zz + s[2]) * zz + s[3]) * zz + s[4]) * zz
                         + s[5])


def _cos_poly(zz: float) -> float:
    c = _COS
    return 1.0 - 0.5 * zz + zz * zz * ((((((c[0] * zz) + c[1]) * zz + c[2]) * zz + c[3]) * zz
                                        + c[4]) * zz + c[5])


def sin(x: float) -> float:
    """Go's math.Sin."""
    if x == 0 or math.isnan(x):
        return x
    if math.isinf(x):
        return _NAN
    sign = x < 0
    x = abs(x)
    if x >= _REDUCE_THRESHOLD:
        return math.sin(-x if sign else x)
    j, z = _reduce(x)
    j &= 7
    if j > 3:
        sign = not sign
        j -= 4
    zz = z * z
    y = _cos_poly(zz) if j in (1, 2) else _sin_poly(z, zz)
    return -y if sign else y


def cos(x: float) -> float:
    """Go's math.Cos."""
    if math.isnan(x) or math.isinf(x):
        return _NAN
    x = abs(x)
    if x >= _REDUCE_THRESHOLD:
        return math.cos(x)
    j, z = _reduce(x)
    j &= 7
    sign = False
    if j > 3:
        j -= 4
        sign = not sign
    if j > 1:
        sign = not sign
    zz = z * z
    y = _sin_poly(z, zz) if j in (1, 2) else _cos_poly(zz)
    return -y if sign else y


def tan(x: float) -> float:
    """Go's math.Tan."""
    if x == 0 or math.isnan(x):
        return x
    if math.isinf(x):
        return _NAN
    sign = x < 0
    x = abs(x)
    if x >= _REDUCE_THRESHOLD:
        return math.tan(-x if sign else x)
    j, z = _reduce(x)
    zz = z * z
    p, q = _TAN_P, _TAN_Q
    if zz > 1e-14:
        y = z + z * (zz * (((p[0] * zz) + p[1]) * zz + p[2])
                     / ((((zz + q[1]) * zz + q[2]) * zz + q[3]) * zz + q[4]))
    else:
        y = z
    if j & 2:
        y = -1 / y
    return -y if sign else y


def _xatan(x: float) -> float:
    p0, p1, p2, p3, p4 = (-8.750608600031904122785e-01, -1.615753718733365076637e01,
                          -7.500855792314704667340e01, -1.228866684490136173410e02,
                          -6.485021904942025371773e01)
    q0, q1, q2, q3, q4 = (2.485846490142306297962e01, 1.650270098316988542046e02,
                          4.328810604912902668951e02, 4.853903996359136964868e02,
                          1.945506571482613964425e02)
    z = x * x
    z = z * ((((p0 * z + p1) * z + p2) * z + p3) * z + p4) / (
        ((((z + q0) * z + q1) * z + q2) * z + q3) * z + q4)
    return x * z + x


def _satan(x: float) -> float:
    morebits = 6.123233995736765886130e-17
    if x <= 0.66:
        return _xatan(x)
    if x > 2.41421356237309504880:
        return math.pi / 2 - _xatan(1 / x) + morebits
    return math.pi / 4 + _xatan((x - 1) / (x + 1)) + 0.5 * morebits


def atan(x: float) -> float:
    """Go's math.Atan."""
    if x == 0 or math.isnan(x):
        return x
    return _satan(x) if x > 0 else -_satan(-x)


def asin(x: float) -> float:
    """Go's math.Asin."""
    if x == 0 or math.isnan(x):
        return x
    sign = x < 0
    x = abs(x)
    if x > 1:
        return _NAN
    temp = math.sqrt(1 - x * x)
    temp = math.pi / 2 - _satan(temp / x) if x > 0.7 else _satan(x / temp)
    return -temp if sign else temp


def acos(x: float) -> float:
    """Go's math.Acos."""
    return math.pi / 2 - asin(x)


def sinh(x: float) -> float:
    """Go's math.Sinh."""
    p0, p1, p2, p3 = (-0.6307673640497716991184787251e6, -0.8991272022039509355398013511e5,
                      -0.2894211355989563807284660366e4, -0.2630563213397497062819489e2)
    q0, q1, q2 = (-0.6307673640497716991212077277e6, 0.1521517378790019070696485176e5,
                  -0.173678953558233699533450911e3)
    sign = x < 0
    x = abs(x)
    if x > 21:
        temp = exp(x) / 2
    elif x > 0.5:
        temp = (exp(x) - exp(-x)) / 2
    else:
        sq = x * x
        temp = (((p3 * sq + p2) * sq + p1) * sq + p0) * x
        temp = temp / (((sq + q2) * sq + q1) * sq + q0)
    return -temp if sign else temp


def cosh(x: float) -> float:
    """Go's math.Cosh."""
    x = abs(x)
    if x > 21:
        return exp(x) / 2
    return (exp(x) + exp(-x)) / 2


def tanh(x: float) -> float:
    """Go's math.Tanh."""
    maxlog = 8.8029691931113054295988e01
    z = abs(x)
    if z > 0.5 * maxlog:
        return -1.0 if x < 0 else 1.0
    if z >= 0.625:
        s = exp(2 * z)
        z = 1 - 2 / (s + 1)
        return -z if x < 0 else z
    if x == 0:
        return x
    s = x * x
    p, q = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3), (
        1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
    return x + x * s * ((p[0] * s + p[1]) * s + p[2]) / (((s + q[0]) * s + q[1]) * s + q[2])

