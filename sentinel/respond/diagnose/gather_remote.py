"""Diagnosis evidence from the remote query backend (`query_backend:`), via `query_range`.

The same series as `gather.store_series` reads from the embedded store
(SERIES_NAMES around the onset, the worst engine per time, SERIES_POINTS
points), asked of the Prometheus-compatible API as one range query per name.
A failing backend yields no series for that name: evidence is best effort and
the diagnosis goes on without it.
"""

from __future__ import annotations

import logging
from typing import Any

from sentinel.respond.diagnose.evidence import SeriesValues
from sentinel.respond.diagnose.gather import (
    SERIES_AFTER_MS,
    SERIES_BEFORE_MS,
    SERIES_NAMES,
    SERIES_POINTS,
    SeriesReader,
)

log = logging.getLogger(__name__)


def remote_series(api: Any) -> SeriesReader:
    """A SeriesReader over `api.query_range(expr, start_ms, end_ms, step_ms)`."""
    step_ms = max(1000, (SERIES_BEFORE_MS + SERIES_AFTER_MS) // SERIES_POINTS)

    def read(target: str, onset_ms: int) -> tuple[SeriesValues, ...]:
        out = []
        quoted = target.replace("\\", "\\\\").replace('"', '\\"')
        for name in SERIES_NAMES:
            try:
                found = api.query_range(f'max({{__name__="{name}",target="{quoted}"}})',
                                        onset_ms - SERIES_BEFORE_MS,
                                        onset_ms + SERIES_AFTER_MS, step_ms)
            except Exception as e:  # best effort: evidence without this series
                log.warning("evidence %s for %s from the query backend: %s", name, target, e)
                continue
            for series in found[:1]:
                out.append(SeriesValues(name, tuple(
                    ((t - onset_ms) // 1000, v)
                    for t, v in zip(series.ts, series.vs, strict=True))[-SERIES_POINTS:]))
        return tuple(out)
    return read
