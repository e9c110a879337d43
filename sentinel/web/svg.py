"""Plots as inline SVG, drawn on the server: no charting library, nothing fetched from elsewhere.

Every text that reaches the SVG (series labels, axis labels) goes through
`html.escape`, like everything else on the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

W, H = 640, 220
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 12, 28
COLORS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989")


def line_plot(series: Sequence[dict[str, Any]], start_ms: int, end_ms: int,
              marks: Sequence[tuple[int, str]] = (), title: str = "") -> str:
    """A line per series ({"labels", "points": [(t_ms, v)]}) with vertical marks (opened, …)."""
    values = [v for s in series for _, v in s["points"] if math.isfinite(v)]
    if not values or end_ms <= start_ms:
        return (f'<p class="muted">No samples of {escape(title)} in the series store for this '
                "window (it keeps only the recent past).</p>")
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - 1, hi + 1

    def x(t: int) -> float:
        return PAD_L + (t - start_ms) / (end_ms - start_ms) * (W - PAD_L - PAD_R)

    def y(v: float) -> float:
        return PAD_T + (hi - v) / (hi - lo) * (H - PAD_T - PAD_B)

    parts = [f'<svg class="plot" viewBox="0 0 {W} {H}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f'<title>{escape(title)}</title>',
             f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
             f'height="{H - PAD_T - PAD_B}" class="frame"/>']
    for v in (lo, (lo + hi) / 2, hi):
        parts.append(f'<text x="{PAD_L - 4}" y="{y(v) + 4:.1f}" class="tick" '
                     f'text-anchor="end">{escape(_fmt(v))}</text>')
    for t, anchor in ((start_ms, "start"), ((start_ms + end_ms) // 2, "middle"),
                      (end_ms, "end")):
        parts.append(f'<text x="{x(t):.1f}" y="{H - 8}" class="tick" text-anchor="{anchor}">'
                     f'{_hhmm(t)}</text>')
    for t, label in marks:
        if start_ms <= t <= end_ms:
            parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{PAD_T}" '
                         f'y2="{H - PAD_B}" class="mark"><title>{escape(label)}</title></line>')
    for i, s in enumerate(series):
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s["points"] if math.isfinite(v))
        name = ", ".join(f"{k}={v}" for k, v in sorted(s["labels"].items())) or title
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[i % len(COLORS)]}" '
                     f'stroke-width="1.5"><title>{escape(name)}</title></polyline>')
    parts.append("</svg>")
    return "".join(parts)


def bar_plot(bars: Sequence[tuple[str, float | None]], title: str, unit: str = "s") -> str:
    """Horizontal bars, one per (label, value); a missing value draws no bar."""
    if not bars:
        return f'<p class="muted">No data for {escape(title)}.</p>'
    top = max((v for _, v in bars if v is not None), default=0.0) or 1.0
    row = 22
    height = row * len(bars) + 8
    parts = [f'<svg class="plot" viewBox="0 0 {W} {height}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>"]
    for i, (label, v) in enumerate(bars):
        yy = 4 + i * row
        parts.append(f'<text x="0" y="{yy + 14}" class="tick">{escape(label[:28])}</text>')
        if v is not None:
            width = v / top * (W - 260)
            parts.append(f'<rect x="200" y="{yy + 3}" width="{width:.1f}" height="14" '
                         f'class="bar"/><text x="{204 + width:.1f}" y="{yy + 14}" '
                         f'class="tick">{escape(_fmt(v))}{escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _hhmm(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms / 1000, tz=UTC).strftime("%H:%M:%S")
