"""An incident's stored series, as plain data, and their compact encoding for the database.

A `SeriesSet` holds what an incident's page plots: one `Plot` per alert rule
of the incident (the compared part of its expression, restricted to the
incident's series) and one per diagnosis evidence series, sampled on one grid
(`step_ms`) over the covered window [start_ms, end_ms].

Size is bounded twice: a series never holds more than `MAX_POINTS` points (past
it, every series of the set is halved by `decimate`, which keeps spikes and
drops, and the step doubles so later extensions stay as sparse), and an encoded
set never exceeds `MAX_BYTES` (halved again until it fits). Encoded as JSON with
delta-coded timestamps and 6-significant-digit values, then zlib: a one-hour
incident with a few series is a few kilobytes.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sentinel.promql.threshold import Threshold

FORMAT = 1
MAX_POINTS = 360  # per series
MAX_SERIES = 8  # per plot
MAX_PLOTS = 10  # per incident: rules of the incident, then evidence series
MAX_BYTES = 64 * 1024  # per incident, encoded
RULE, EVIDENCE = "rule", "evidence"

Labels = tuple[tuple[str, str], ...]
Point = tuple[int, float]


@dataclass(frozen=True, slots=True)
class StoredSeries:
    """One series: its labels and (time in ms, value) points, oldest first."""

    labels: Labels
    points: tuple[Point, ...]


@dataclass(frozen=True, slots=True)
class Plot:
    """One chart: an alert rule's compared expression (RULE) or an evidence series (EVIDENCE)."""

    kind: str
    title: str  # the alertname, or the evidence series' name
    expr: str  # the rule's expression as written (what is queried, for evidence)
    plotted: str  # what was queried
    threshold: Threshold | None
    series: tuple[StoredSeries, ...]

    @property
    def key(self) -> tuple[str, str]:
        """Plots of two captures of one incident merge by (kind, title)."""
        return self.kind, self.title


@dataclass(frozen=True, slots=True)
class SeriesSet:
    """Every plot of one incident over [start_ms, end_ms], sampled every `step_ms`."""

    step_ms: int
    start_ms: int
    end_ms: int
    plots: tuple[Plot, ...]

    def points(self) -> int:
        """How many points the set holds, all series together."""
        return sum(len(s.points) for p in self.plots for s in p.series)


def merge(old: SeriesSet, new: SeriesSet) -> SeriesSet:
    """`old` extended by the later capture `new` (points after old.end_ms), then bounded."""
    plots: dict[tuple[str, str], Plot] = {p.key: p for p in old.plots}
    for p in new.plots:
        before = plots.get(p.key)
        if before is None:
            plots[p.key] = p
            continue
        series = {s.labels: s for s in before.series}
        for s in p.series:
            kept = series.get(s.labels)
            tail = tuple(pt for pt in s.points if kept is None or pt[0] > old.end_ms)
            series[s.labels] = StoredSeries(s.labels, (kept.points if kept else ()) + tail)
        # The rule as it reads now (a reloaded rule), its series capped as on capture.
        plots[p.key] = replace(p, series=tuple(series.values())[:MAX_SERIES])
    merged = SeriesSet(old.step_ms, min(old.start_ms, new.start_ms),
                       max(old.end_ms, new.end_ms), tuple(plots.values())[:MAX_PLOTS])
    return bound(merged)


def bound(s: SeriesSet, max_points: int = MAX_POINTS) -> SeriesSet:
    """`s` with no series over `max_points`: halved (and its step doubled) until so."""
    while max((len(x.points) for p in s.plots for x in p.series), default=0) > max_points:
        s = halve(s)
    return s


def halve(s: SeriesSet) -> SeriesSet:
    """Every series decimated by two, and the step doubled."""
    return SeriesSet(s.step_ms * 2, s.start_ms, s.end_ms, tuple(
        replace(p, series=tuple(StoredSeries(x.labels, decimate(x.points)) for x in p.series))
        for p in s.plots))


def decimate(points: Sequence[Point]) -> tuple[Point, ...]:
    """One point of each consecutive pair: the one further from the last point kept.

    A spike or a drop to 0 differs most from its neighbours, so it survives any
    number of halvings, where keeping every other point would lose it half the time.
    """
    out: list[Point] = []
    for i in range(0, len(points), 2):
        pair = points[i:i + 2]
        prev = out[-1][1] if out else pair[0][1]
        out.append(max(pair, key=lambda p: _distance(p[1], prev)))
    return tuple(out)


def _distance(v: float, prev: float) -> float:
    d = abs(v - prev)
    return d if d == d else math.inf  # NaN (inf - inf, or a NaN) counts as the furthest


# -- encoding -------------------------------------------------------------------------------


def encode(s: SeriesSet) -> tuple[bytes, SeriesSet]:
    """The set as compressed bytes (at most MAX_BYTES), and the set those bytes hold
    (values rounded to six digits, halved if it had to be)."""
    while True:
        blob = zlib.compress(json.dumps(_to_json(s), separators=(",", ":"),
                                        allow_nan=False).encode())
        if len(blob) <= MAX_BYTES or s.points() <= len(s.plots):
            return blob, decode(blob)
        s = halve(s)


def decode(blob: bytes) -> SeriesSet:
    """The set `encode` wrote. Raises ValueError on bytes it did not write."""
    try:
        data = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as exc:
        raise ValueError(f"not an encoded series set: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("unknown series set format")
    return SeriesSet(int(data["step"]), int(data["start"]), int(data["end"]), tuple(
        Plot(p["kind"], p["title"], p["expr"], p["plotted"],
             Threshold(p["threshold"][0], float(p["threshold"][1])) if p["threshold"] else None,
             tuple(StoredSeries(tuple(sorted(x["labels"].items())),
                                tuple(zip(_undelta(x["t"]), map(_value, x["v"]), strict=True)))
                   for x in p["series"]))
        for p in data["plots"]))


def _to_json(s: SeriesSet) -> dict[str, Any]:
    return {"format": FORMAT, "step": s.step_ms, "start": s.start_ms, "end": s.end_ms,
            "plots": [{"kind": p.kind, "title": p.title, "expr": p.expr, "plotted": p.plotted,
                       "threshold": [p.threshold.op, p.threshold.value] if p.threshold else None,
                       "series": [{"labels": dict(x.labels),
                                   "t": _delta(t for t, _ in x.points),
                                   "v": [_json_value(v) for _, v in x.points]}
                                  for x in p.series]}
                      for p in s.plots]}


def _delta(times: Iterable[int]) -> list[int]:
    out, prev = [], 0
    for t in times:
        out.append(t - prev)
        prev = t
    return out


def _undelta(deltas: Sequence[int]) -> list[int]:
    out, t = [], 0
    for d in deltas:
        t += int(d)
        out.append(t)
    return out


def _json_value(v: float) -> float | str:
    if math.isfinite(v):
        return float(f"{v:.6g}")  # six digits: more than a plot can show
    return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")


def _value(v: float | str) -> float:
    return float(v) if not isinstance(v, str) else float(v.replace("Inf", "inf"))
