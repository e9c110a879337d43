"""Plots as inline SVG, drawn on the server: no charting library, nothing fetched from elsewhere.

Every text that reaches the SVG (series labels, axis labels) goes through
markupsafe's `escape`; the result is `Markup`, which the templates insert as is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from markupsafe import Markup, escape

W, H = 640, 220
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 12, 28
COLORS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989")


def bar_plot(bars: Sequence[tuple[str, float | None]], title: str, unit: str = "s") -> Markup:
    """Horizontal bars, one per (label, value), on an x axis with ticks; no value, no bar."""
    if not bars:
        return Markup('<p class="muted">No data for {}.</p>').format(title)
    top = _nice(max((v for _, v in bars if v is not None), default=0.0) or 1.0)
    row, left, right, axis_h = 22, 200, W - 40, 34
    height = row * len(bars) + 8 + axis_h
    base = 4 + row * len(bars)

    def x(v: float) -> float:
        return left + v / top * (right - left)

    parts = [f'<svg class="plot bars" viewBox="0 0 {W} {height}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>",
             f'<line x1="{left}" x2="{left}" y1="2" y2="{base}" class="axis"/>',
             f'<line x1="{left}" x2="{right}" y1="{base}" y2="{base}" class="axis"/>']
    for k in range(5):  # x axis: 0, ¼, ½, ¾ and the top, in the unit
        tv = top * k / 4
        parts.append(f'<line x1="{x(tv):.1f}" x2="{x(tv):.1f}" y1="{base}" y2="{base + 4}" '
                     f'class="axis tick-mark"/><text x="{x(tv):.1f}" y="{base + 16}" '
                     f'class="tick axis-label" text-anchor="middle">{escape(_fmt(tv))}</text>')
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{base + 30}" class="tick" '
                 f'text-anchor="middle">{escape(title)} ({escape(unit)})</text>')
    for i, (label, v) in enumerate(bars):
        yy = 4 + i * row
        parts.append(f'<text x="{left - 6}" y="{yy + 14}" class="tick" text-anchor="end">'
                     f'{escape(label[:28])}</text>')
        if v is None:
            parts.append(f'<text x="{left + 4}" y="{yy + 14}" class="tick muted">–</text>')
        else:
            parts.append(f'<rect x="{left}" y="{yy + 3}" width="{x(v) - left:.1f}" height="14" '
                         f'class="bar"><title>{escape(label)}: {escape(_fmt(v))}'
                         f'{escape(unit)}</title></rect><text x="{x(v) + 4:.1f}" '
                         f'y="{yy + 14}" class="tick">{escape(_fmt(v))}{escape(unit)}</text>')
    parts.append("</svg>")
    return _svg(parts)


def _nice(v: float) -> float:
    """The smallest 1, 2 or 5 × 10^n at or above v: round axis ticks."""
    step = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if m * step >= v:
            return float(m * step)
    return float(10 * step)


def _svg(parts: list[str]) -> Markup:
    """The joined SVG, as Markup: every text in `parts` went through `escape` above."""
    return Markup("".join(parts))  # noqa: S704 (each interpolated text escaped)


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _hhmm(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms / 1000, tz=UTC).strftime("%H:%M:%S")
