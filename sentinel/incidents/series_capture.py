"""Sample what an incident's plot shows, from whatever answers queries (store or remote API).

For each alert rule of the incident, the compared part of its expression
(`split_condition`), evaluated on a grid of times and restricted to the
incident's own series: another target's series never enters, even when the
expression returns the whole fleet. Then the diagnosis evidence series of the
incident's target (the worst engine at each time, as diagnosis reads them).

Pure functions of a query function and times handed in; the daemon's job
(series_recorder.py) decides when and stores the result, the API adds the tail
not stored yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sentinel.incidents.series_codec import (
    EVIDENCE,
    MAX_PLOTS,
    MAX_POINTS,
    MAX_SERIES,
    RULE,
    Plot,
    SeriesSet,
    StoredSeries,
)
from sentinel.model import METRIC_NAME
from sentinel.promql.errors import PromQLError
from sentinel.promql.threshold import split_condition

DEFAULT_BEFORE_MS = 30 * 60_000
DEFAULT_AFTER_MS = 5 * 60_000
DEFAULT_INTERVAL_MS = 30_000
# Diagnosis reads these around the onset (respond/diagnose/gather.py SERIES_NAMES).
EVIDENCE_SERIES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                   "vllm:num_requests_waiting", "vllm:num_preemptions_total", "up")
MAX_RULES = 3  # alert rules of one incident plotted (joined alerts of other rules)

QueryFn = Callable[[Any, int], Any]  # (expression text, at ms) -> vector or scalar


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """The stored window (before the onset, after the resolution) and the job's cadence."""

    before_ms: int = DEFAULT_BEFORE_MS
    after_ms: int = DEFAULT_AFTER_MS
    interval_ms: int = DEFAULT_INTERVAL_MS
    step_ms: int = 5_000  # the finest sampling step: the evaluation interval

    def first_step(self, start_ms: int, end_ms: int) -> int:
        """The step of a first capture over [start, end]: fine, with at most MAX_POINTS."""
        return max(self.step_ms, 1, -(-(end_ms - start_ms) // MAX_POINTS))


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """One alert rule of an incident: its expression, and the labels of its alerts there."""

    alertname: str
    expr: str
    label_sets: tuple[Mapping[str, str], ...]


@dataclass(frozen=True, slots=True)
class CaptureSpec:
    """What to sample for one incident."""

    target: str
    rules: tuple[RuleSpec, ...]
    evidence: tuple[str, ...] = EVIDENCE_SERIES


def window(opened_ms: int, evidence_ms: int | None, resolved_ms: int | None, now_ms: int,
           settings: CaptureSettings) -> tuple[int, int, bool]:
    """(start, end, final): the window to store, and whether it is complete now."""
    onset = min(opened_ms, evidence_ms if evidence_ms is not None else opened_ms)
    start = onset - settings.before_ms
    if resolved_ms is None:
        return start, now_ms, False
    end = resolved_ms + settings.after_ms
    return start, min(end, now_ms), now_ms >= end


def grid(start_ms: int, end_ms: int, step_ms: int) -> range:
    """Times on multiples of the step in [start, end]: two captures meet without overlap."""
    first = -(-start_ms // step_ms) * step_ms
    return range(first, end_ms + 1, step_ms)


def capture(query_fn: QueryFn, spec: CaptureSpec, start_ms: int, end_ms: int,
            step_ms: int) -> SeriesSet:
    """Every plot of the incident over [start, end] at `step_ms`.

    A rule whose expression the backend refuses (PromQLError) gets a plot with no
    series; any other failure (a backend that is down) propagates: nothing is
    stored for this capture, and the next one tries again.
    """
    times = grid(start_ms, end_ms, step_ms)
    plots: list[Plot] = []
    for rule in spec.rules[:MAX_RULES]:
        cond = split_condition(rule.expr)
        series = sample(query_fn, cond.plotted, times, _owned_by(spec.target, rule))
        plots.append(Plot(RULE, rule.alertname, rule.expr, cond.plotted, cond.threshold,
                          series))
    if spec.target:
        for name in spec.evidence[:MAX_PLOTS - len(plots)]:
            query = f"max({name}{{target={quote(spec.target)}}})"
            found = sample(query_fn, query, times, lambda labels: True)
            if found:
                labels = ((METRIC_NAME, name), ("target", spec.target))
                plots.append(Plot(EVIDENCE, name, query, query, None,
                                  (StoredSeries(labels, found[0].points),)))
    return SeriesSet(step_ms, start_ms, end_ms, tuple(plots))


def sample(query_fn: QueryFn, expr: str, times: Sequence[int],
           keep: Callable[[Mapping[str, str]], bool]) -> tuple[StoredSeries, ...]:
    """`expr` at each time; the series `keep` accepts (at most MAX_SERIES), NaN left out."""
    found: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]] = {}
    refused: set[tuple[tuple[str, str], ...]] = set()
    for t in times:
        try:
            result = query_fn(expr, t)
        except PromQLError:
            return ()
        if not isinstance(result, list):
            continue  # a scalar has no series to draw
        for s in result:
            key = tuple(sorted(s.labels))
            points = found.get(key)
            if points is None:
                if key in refused or len(found) >= MAX_SERIES:
                    continue
                if not keep(dict(key)):
                    refused.add(key)
                    continue
                points = found[key] = []
            if not math.isnan(s.value):
                points.append((t, float(s.value)))
    return tuple(StoredSeries(k, tuple(v)) for k, v in found.items() if v)


def _owned_by(target: str, rule: RuleSpec) -> Callable[[Mapping[str, str]], bool]:
    return lambda labels: belongs(labels, target, rule.label_sets)


def belongs(labels: Mapping[str, str], target: str,
            label_sets: Sequence[Mapping[str, str]]) -> bool:
    """Whether a series is the incident's: its target's, and agreeing with one of its
    alerts on every label both have (so `engine="1"` is not drawn for `engine="0"`)."""
    own = {k: v for k, v in labels.items() if k != METRIC_NAME}
    if target and own.get("target", target) != target:
        return False
    if not label_sets:
        return True
    return any(all(alert.get(k, v) == v for k, v in own.items()) for alert in label_sets)


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
