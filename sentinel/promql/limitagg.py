"""`limitk` and `limit_ratio` (Prometheus 3, experimental aggregations).

`limitk(k, v)` keeps the first k series of each group, in input order.
`limit_ratio(r, v)` keeps a series when its label set's hash, as a fraction of
2^64 - 1, is below r (r >= 0) or at least 1 + r (r < 0): the same series
whatever the evaluation time, and as Prometheus picks them, since the hash is
Prometheus's: xxHash64 of its `stringlabels` encoding of the sorted labels.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

from sentinel.model import InstantSample, Labels, Vector
from sentinel.promql.errors import PromQLError

_M = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _merge(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    """xxHash64 (github.com/cespare/xxhash's Sum64 with seed 0)."""
    n, i = len(data), 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M
        while i + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, i)
        h = (_rotl(h ^ _round(0, lane), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (_rotl(h ^ ((lane * _P1) & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def _size(n: int) -> bytes:
    return bytes([n]) if n < 255 else bytes([255, n & 0xFF, (n >> 8) & 0xFF, (n >> 16) & 0xFF])


def labels_hash(labels: Labels) -> int:
    """Prometheus's Labels.Hash() (stringlabels: each name and value after its length)."""
    out = bytearray()
    for name, value in labels:
        for part in (name.encode(), value.encode()):
            out += _size(len(part)) + part
    return xxh64(bytes(out))


def in_ratio(labels: Labels, ratio: float) -> bool:
    """HashRatioSampler.AddRatioSample."""
    offset = float(labels_hash(labels)) / float(_M)
    return offset < ratio if ratio >= 0 else offset >= 1 + ratio


def limit(op: str, vec: Vector, key_of: Callable[[Labels], Labels], param: float) -> Vector:
    """`limitk` / `limit_ratio` of `vec`, grouped by `key_of`."""
    if op == "limit_ratio":
        if math.isnan(param):
            raise PromQLError("Ratio value is NaN")
        if param == 0:
            return []
        ratio = max(-1.0, min(1.0, param))
        return [s for s in vec if in_ratio(s.labels, ratio)]
    k = min(int(param), len(vec))
    if k < 1:
        return []
    kept: dict[Labels, int] = {}
    out: list[InstantSample] = []
    for s in vec:
        key = key_of(s.labels)
        if kept.get(key, 0) < k:
            kept[key] = kept.get(key, 0) + 1
            out.append(s)
    return out
