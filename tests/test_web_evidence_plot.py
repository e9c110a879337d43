"""The incident plot's SVG: threshold line, marks, a hover title per point, holes as breaks,
and every label placed in it escaped."""

from __future__ import annotations

import re

from sentinel.web.evidence_plot import plot_svg, plot_views, series_name

T0 = 1_800_000_000_000
EVIL = '<script>x</script>"'


def _evidence(points: list[list[float]], labels: dict[str, str] | None = None) -> dict:
    return {"view": {"start_ms": T0 - 10_000, "end_ms": T0 + 100_000}, "step_ms": 10_000,
            "marks": [{"at_ms": T0, "kind": "firing", "label": f"opened {EVIL}"},
                      {"at_ms": T0 + 60_000, "kind": "resolved", "label": "resolved"}],
            "plots": [{"kind": "rule", "title": f"A{EVIL}", "expr": "x > 0.85",
                       "plotted": "x", "threshold": {"op": ">", "value": 0.85,
                                                     "text": "> 0.85"},
                       "series": [{"labels": labels or {"target": f"t{EVIL}"},
                                   "points": points}]}]}


def test_threshold_marks_hover_and_escaping() -> None:
    ev = _evidence([[T0 + i * 10_000, 0.5 + i / 10] for i in range(6)])
    (view,) = plot_views(ev)
    svg = str(view["svg"])
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'class="threshold"' in svg and "threshold &gt; 0.85" in svg
    assert 'class="mark firing"' in svg and 'class="mark resolved"' in svg
    titles = re.findall(r'<circle class="pt"[^>]*><title>([^<]*)</title>', svg)
    assert len(titles) == 6 and titles[-1].endswith("= 1 at 08:00:50"), titles[-1]
    assert view["legend"] == [{"name": f'{{target="t{EVIL}"}}', "color": "c0",
                               "max": "1", "last": "1"}]
    # The threshold lies between the lowest and highest point drawn.
    ys = [float(y) for y in re.findall(r'cy="([\d.]+)"', svg)]
    ty = float(re.search(r'<line x1="\d+" x2="\d+" y1="([\d.]+)"', svg).group(1))
    assert min(ys) < ty < max(ys)


def test_a_hole_breaks_the_line_and_a_lone_point_stays_visible() -> None:
    pts = [[T0, 1.0], [T0 + 10_000, 2.0], [T0 + 60_000, 3.0], [T0 + 90_000, 1.0],
           [T0 + 100_000, 2.0]]
    svg = str(plot_views(_evidence(pts))[0]["svg"])
    assert svg.count("<polyline") == 2
    assert svg.count('class="pt lone"') == 1


def test_no_samples_and_special_values() -> None:
    assert "No samples" in str(plot_views(_evidence([]))[0]["svg"])
    svg = plot_svg(_evidence([[T0, "+Inf"], [T0 + 10_000, 2.0]])["plots"][0],
                   T0, T0 + 20_000, [], 10_000, ["s"])
    assert "<polyline" not in str(svg) and str(svg).count("<circle") == 1


def test_series_names() -> None:
    assert series_name({"__name__": "up", "target": "a"}, "T") == 'up{target="a"}'
    assert series_name({}, "T") == "T"
