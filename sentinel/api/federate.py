"""`/federate`'s body: the text exposition (0.0.4) of each selected series' newest sample.

As Prometheus writes it: families sorted by name, each under one
`# TYPE <name> untyped` line (the store keeps no types), series sorted by
labels, each with its sample's own timestamp in ms, so the Prometheus that
federates stores the sample at the time it was scraped, not at its own
scrape of Sentinel.
"""

from __future__ import annotations

from collections.abc import Iterable

from sentinel.model import METRIC_NAME, Labels, label_value
from sentinel.promql.floatops import format_float

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition(samples: Iterable[tuple[Labels, int, float]]) -> str:
    """The page for (labels, time ms, value) samples, in any order."""
    lines: list[str] = []
    family = None
    for labels, t, v in sorted(samples, key=lambda s: (label_value(s[0], METRIC_NAME), s[0])):
        name = label_value(labels, METRIC_NAME)
        if name != family:
            family = name
            lines.append(f"# TYPE {name} untyped")
        pairs = ",".join(f'{k}="{_escape(val)}"' for k, val in labels if k != METRIC_NAME)
        lines.append(f"{name}{{{pairs}}} {format_float(v)} {t}")
    return "\n".join(lines) + "\n" if lines else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
