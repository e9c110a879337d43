"""Prometheus 3's `anchored` and `smoothed` range selectors (experimental).

Behind `promql-extended-range-selectors`, as in Prometheus:

- `x[5m] anchored` also reads the newest sample at or before the window's start
  (within the lookback), so `increase`/`rate`/`delta` take the difference of
  the values at both ends with no extrapolation, and `resets`/`changes` count
  from that sample;
- `x[5m] smoothed` reads the lookback around both ends too and interpolates
  the value at each end between its neighbours (a counter reset counted as a
  drop to 0); only `rate`, `increase` and `delta` take it.

promql-parser does not know the keywords: `mark` turns `sel[5m] anchored` into
`sel{__sentinel_anchored__="1"}[5m]` before parsing, and the compiler moves the
marker into `VectorSelector.extend`.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

from sentinel.promql.errors import PromQLError

ANCHORED = "anchored"
SMOOTHED = "smoothed"
MARKS = {ANCHORED: "__sentinel_anchored__", SMOOTHED: "__sentinel_smoothed__"}
SAFE = {
    ANCHORED: ("changes", "delta", "increase", "rate", "resets"),
    SMOOTHED: ("delta", "increase", "rate"),
}
_KEYWORD = re.compile(r"\b(anchored|smoothed)\b")


def mark(text: str, masked: str) -> str:
    """`sel[r] anchored` → `sel{__sentinel_anchored__="1"}[r]` (the same for smoothed and
    for an instant selector), keywords outside strings only (`masked` blanks them)."""
    edits: list[tuple[int, int, str]] = []
    for m in _KEYWORD.finditer(masked):
        end = len(masked[:m.start()].rstrip())
        sel_end = _selector_end(masked, end)
        if sel_end is None:
            continue
        insert = _insertion(masked, sel_end)
        if insert is None:
            continue
        at, wrap = insert
        marker = f'{MARKS[m.group(1)]}="1"'
        edits.append((m.start(), m.end(), ""))
        edits.append((at, at, "{" + marker + "}" if wrap else marker + ", "))
    for start, stop, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[stop:]
    return text


def _selector_end(masked: str, end: int) -> int | None:
    """Where the selector's name or braces end, before its range, offset and @."""
    head = masked[:end]
    # Strip trailing modifiers: `offset -100`, `@ 100`, `@ start()`, a range `[...]`.
    while True:
        m = re.search(r"(?:\boffset\s+[-+]?[\w.]+|@\s*[-+]?[\w.]+(?:\(\))?)\s*$", head)
        if m is not None:
            head = head[:m.start()].rstrip()
            continue
        if head.endswith("]"):
            head = head[:head.rfind("[")].rstrip()
            continue
        break
    return len(head) if head and (head[-1] == "}" or head[-1].isalnum() or head[-1] in "_:")\
        else None


def _insertion(masked: str, sel_end: int) -> tuple[int, bool] | None:
    """Where the marker goes: inside `{` (False) or as a new `{...}` after the name (True)."""
    if masked[sel_end - 1] == "}":
        depth, i = 0, sel_end - 1
        while i >= 0:
            depth += (masked[i] == "}") - (masked[i] == "{")
            if depth == 0:
                return i + 1, False
            i -= 1
        return None
    return sel_end, True


def check_safe(extend: str, func: str) -> None:
    """Prometheus refuses an extended range in a function that cannot use it."""
    if func not in SAFE[extend]:
        raise PromQLError(f"{extend} modifier can only be used with: "
                          f"{', '.join(SAFE[extend])} - not with {func}")


def extended_rate(ts: Sequence[int], vs: Sequence[float], start: int, end: int,
                  range_s: float, smoothed: bool, is_counter: bool, is_rate: bool
                  ) -> float | None:
    """extendedRate: the change between the window's ends, picked or interpolated."""
    last = len(vs) - 1
    if last < 0:
        return None
    first = max(0, _search(ts, last, lambda t: t > start) - 1)
    if smoothed:
        last = _search(ts, last, lambda t: t >= end)
    if ts[last] <= start or (smoothed and ts[first] > end):
        return None
    left = vs[first]
    if smoothed and ts[first] < start:
        left = _interpolate(ts, vs, first, first + 1, start, is_counter)
    right = vs[last]
    if smoothed and last > 0 and ts[last] > end:
        right = _interpolate(ts, vs, last - 1, last, end, is_counter)
    result = right - left
    if is_counter:
        lo = first + 1 if ts[first] <= start else first
        hi = last - 1 if ts[last] >= end else last
        prev, correction = left, 0.0
        for v in vs[lo:hi + 1]:
            if v < prev:
                correction += prev
            prev = v
        if right < prev:
            correction += prev
        result += correction
    return result / range_s if is_rate else result


def _search(ts: Sequence[int], n: int, pred: object) -> int:
    """Go's sort.Search over the first n timestamps."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(ts[mid]):  # type: ignore[operator]
            hi = mid
        else:
            lo = mid + 1
    return lo


def _interpolate(ts: Sequence[int], vs: Sequence[float], i: int, j: int, t: int,
                 is_counter: bool) -> float:
    y1, y2 = vs[i], vs[j]
    if is_counter and y2 < y1:
        y1 = 0.0
    return y1 + (y2 - y1) * float(t - ts[i]) / float(ts[j] - ts[i])


def anchored_start(ts: Sequence[int], start: int) -> int | None:
    """pickFirstSampleIndices for floats: the newest sample at or before the start (or the
    first), None without a sample after the start."""
    at_or_before = bisect_right(ts, start) - 1
    if at_or_before + 1 >= len(ts):
        return None
    return max(at_or_before, 0)


def interpolate_at(ts: Sequence[int], vs: Sequence[float], t: int) -> float | None:
    """smoothSeries for floats: the sample at t, else the line between its neighbours,
    else the newest before it; None with nothing at or before t."""
    i = _search(ts, len(ts), lambda x: x >= t)
    if i < len(ts) and ts[i] == t:
        return vs[i]
    if 0 < i < len(ts):
        return _interpolate(ts, vs, i - 1, i, t, False)
    return vs[i - 1] if i > 0 else None
