"""An incident's plots as server-drawn SVG: series, threshold, firing/resolved marks, hover values.

Input is the API's evidence answer (sentinel/api/evidence.py), so the page and
`GET /api/v1/incidents/{id}/evidence` show the same numbers. Each point carries
a `<title>` (shown on hover, read by screen readers): series, value and time.
Colours are classes (`c0`…`c5`, in sentinel.css) shared with the HTML legend:
the Content-Security-Policy allows no inline style. Every text placed in the
SVG goes through markupsafe's `escape`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

W, H = 640, 220
SMALL_H = 120
PAD_L, PAD_R, PAD_T, PAD_B = 56, 44, 18, 28
COLORS = 6  # classes c0 … c5
GAP_STEPS = 2.5  # a hole longer than this many steps breaks the line (a restart, a scrape gap)


def plot_views(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each plot of the evidence answer with its SVG and legend entries, for the template."""
    view = evidence["view"]
    out = []
    for p in evidence["plots"]:
        series = [{"name": series_name(s["labels"], p["title"]), "color": f"c{i % COLORS}",
                   **_summary(s["points"])} for i, s in enumerate(p["series"])]
        svg = plot_svg(p, view["start_ms"], view["end_ms"], evidence["marks"],
                       evidence.get("step_ms") or 0, [s["name"] for s in series],
                       small=p["kind"] != "rule")
        out.append({**p, "svg": svg, "legend": series})
    return out


def series_name(labels: Mapping[str, str], title: str) -> str:
    """`name{k="v", …}` as Prometheus prints a series; the plot's title when no labels."""
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}" if rest else (name or title)


def plot_svg(plot: Mapping[str, Any], start_ms: int, end_ms: int,
             marks: Sequence[Mapping[str, Any]], step_ms: int, names: Sequence[str],
             small: bool = False) -> Markup:
    """One chart: a line per series, the threshold, marks and a hover title on every point."""
    title = str(plot["title"])
    series = [[(int(t), _float(v)) for t, v in s["points"]] for s in plot["series"]]
    values = [v for pts in series for _, v in pts if math.isfinite(v)]
    if not values or end_ms <= start_ms:
        return Markup('<p class="muted no-samples">No samples of {} stored or in the series '
                      "store for this window.</p>").format(title)
    threshold = plot.get("threshold")
    lo, hi = _y_range(values, threshold["value"] if threshold else None)
    height = SMALL_H if small else H
    x = _scale(start_ms, end_ms, PAD_L, W - PAD_R)
    y = _scale(hi, lo, PAD_T, height - PAD_B)  # higher values up
    parts = [f'<svg class="plot{" small" if small else ""}" viewBox="0 0 {W} {height}" '
             f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>",
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
             f'height="{height - PAD_T - PAD_B}" class="frame"/>']
    parts += _axes(x, y, lo, hi, start_ms, end_ms, height)
    if threshold:
        ty = y(threshold["value"])
        label = escape(f"threshold {threshold['text']}")
        parts.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{ty:.1f}" y2="{ty:.1f}" '
                     f'class="threshold"><title>{label}</title></line>'
                     f'<text x="{W - PAD_R + 2}" y="{ty + 4:.1f}" class="tick threshold-label">'
                     f'{escape(threshold["text"])}</text>')
    parts += _marks(x, marks, start_ms, end_ms, height, labelled=not small)
    for i, (pts, name) in enumerate(zip(series, names, strict=True)):
        parts.append(_series(pts, x, y, f"c{i % COLORS}", name, step_ms))
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 (each interpolated text escaped)


def _series(pts: Sequence[tuple[int, float]], x: Any, y: Any, color: str, name: str,
            step_ms: int) -> str:
    finite = [(t, v) for t, v in pts if math.isfinite(v)]
    gap = step_ms * GAP_STEPS if step_ms else math.inf
    runs: list[list[tuple[int, float]]] = []
    for k, (t, v) in enumerate(finite):
        if not k or t - finite[k - 1][0] > gap:
            runs.append([])
        runs[-1].append((t, v))
    out = [f'<g class="series {color}">']
    out += [f'<polyline points="{" ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in run)}"/>'
            for run in runs if len(run) > 1]
    label = escape(name)
    for run in runs:  # hover: the value and time of each point; a lone point stays visible
        cls = "pt" if len(run) > 1 else "pt lone"
        out += [f'<circle class="{cls}" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3">'
                f"<title>{label} = {escape(_fmt(v))} at {_hms(t)}</title></circle>"
                for t, v in run]
    out.append("</g>")
    return "".join(out)


def _axes(x: Any, y: Any, lo: float, hi: float, start_ms: int, end_ms: int,
          height: int) -> list[str]:
    parts = []
    for v in (lo, (lo + hi) / 2, hi):
        parts.append(f'<text x="{PAD_L - 4}" y="{y(v) + 4:.1f}" class="tick" '
                     f'text-anchor="end">{escape(f"{v:.3g}")}</text>')
    for t, anchor in ((start_ms, "start"), ((start_ms + end_ms) // 2, "middle"),
                      (end_ms, "end")):
        parts.append(f'<text x="{x(t):.1f}" y="{height - 8}" class="tick" '
                     f'text-anchor="{anchor}">{_hms(t)}</text>')
    return parts


def _marks(x: Any, marks: Sequence[Mapping[str, Any]], start_ms: int, end_ms: int,
           height: int, labelled: bool) -> list[str]:
    parts = []
    for m in marks:
        t = int(m["at_ms"])
        if not start_ms <= t <= end_ms:
            continue
        kind = escape(m["kind"])
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{PAD_T}" y2="{height - PAD_B}" '
                     f'class="mark {kind}"><title>{escape(m["label"])} at {_hms(t)}</title></line>')
        if labelled and m["kind"] in ("firing", "resolved"):
            parts.append(f'<text x="{x(t) + 3:.1f}" y="{PAD_T - 5}" class="tick mark-label '
                         f'{kind}">{kind}</text>')
    return parts


def _y_range(values: Sequence[float], threshold: float | None) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if threshold is not None and math.isfinite(threshold):
        lo, hi = min(lo, threshold), max(hi, threshold)
    if hi == lo:
        return lo - 1, hi + 1
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _scale(d0: float, d1: float, r0: float, r1: float) -> Any:
    span = (d1 - d0) or 1

    def f(v: float) -> float:
        return r0 + (v - d0) / span * (r1 - r0)
    return f


def _summary(points: Sequence[Sequence[Any]]) -> dict[str, str]:
    values = [_float(v) for _, v in points]
    finite = [v for v in values if math.isfinite(v)]
    return {"max": _fmt(max(finite)) if finite else "–",
            "last": _fmt(values[-1]) if values else "–"}


def _float(v: Any) -> float:
    return float(v.replace("Inf", "inf")) if isinstance(v, str) else float(v)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _hms(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms / 1000, tz=UTC).strftime("%H:%M:%S")
