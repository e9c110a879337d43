"""Prometheus's HTTP API for a data source: what Grafana and promtool read beyond instant queries.

`query_range`, `series`, `labels`, `label/<name>/values`, `metadata`,
`status/buildinfo` and `/federate`, answered in Prometheus's response formats
over the same series the rules read. The limits are `/api/v1/query`'s: every
read of the store runs in the query pool (a killable child of the daemon,
at most `max_concurrent_queries` at once, `query_timeout`, the memory cap),
the engine's point limit and deadline hold for each evaluation, and a range
query as a whole gets the engine's deadline once, not once per step.

Series, labels and `/federate` read the embedded store: with a remote query
backend the fleet's series live in that backend, and it is the data source
to use (503 says so). A range query runs the engine's instant query at each
step, given the range's bounds and step (`@ start()`, `@ end()`, `step()`),
so its values are exactly that query's at each step. With a remote backend
each step is the backend's instant query, which has no range: expressions
that depend on it are refused there.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sentinel.api.errors import ApiError, bad_param
from sentinel.api.params import MAX_TIME_MS, time_param
from sentinel.config.durations import parse_duration
from sentinel.model import METRIC_NAME, Labels
from sentinel.promql import PromQLError
from sentinel.promql import nodes as n
from sentinel.promql.compile import check_expr_text, compile_expr
from sentinel.promql.floatops import format_float
from sentinel.promql.limits import QUERY_TIMEOUT_S, QueryLimitError
from sentinel.store.memory import Matcher

# Prometheus refuses a range query of more points per series than this.
MAX_RANGE_POINTS = 11_000
MAX_SERIES = 10_000  # series (or names, values) in one answer, as /api/v1/query's vector
# The Prometheus whose API and PromQL Sentinel answers as (`status/buildinfo`): Grafana
# reads it to choose which query features it offers.
PROMETHEUS_VERSION = "2.42.0"
# How far back `/federate` takes a series' newest sample: Prometheus's lookback delta.
LOOKBACK_MS = 300_000

Params = Mapping[str, str]
Run = Callable[[Callable[[], Any]], Any]  # the query pool's run


def range_steps(params: Params, now_ms: int) -> tuple[int, int, int]:
    """(start, end, step) in ms of a range query, refused as Prometheus refuses them."""
    start = time_param(params, "start", now_ms)
    end = time_param(params, "end", now_ms)
    if start is None:
        raise bad_param("start", "required")
    if end is None:
        raise bad_param("end", "required")
    if end < start:
        raise bad_param("end", "end timestamp must not be before start time")
    step = _step_ms(params.get("step") or "")
    if (end - start) // step + 1 > MAX_RANGE_POINTS:
        raise bad_param("step", f"exceeded maximum resolution of {MAX_RANGE_POINTS:,} points "
                                "per timeseries. Try decreasing the query resolution (?step=XX)")
    return start, end, step


def _step_ms(raw: str) -> int:
    if not raw:
        raise bad_param("step", "required")
    try:
        seconds = float(raw)
    except ValueError:
        try:
            ms = parse_duration(raw)
        except ValueError:
            raise bad_param("step", f"cannot parse {raw!r} to a valid duration") from None
    else:
        if seconds != seconds or abs(seconds) > 1e12:
            raise bad_param("step", f"cannot parse {raw!r} to a valid duration")
        ms = round(seconds * 1000)
    if ms <= 0:
        raise bad_param("step", "zero or negative query resolution step widths are not "
                                "accepted. Try a positive integer")
    return ms


def engine_steps(engine: Any, expr: str, start: int, end: int, step: int
                 ) -> Callable[[int], Any]:
    """Each step's evaluation of a range query by the embedded engine.

    The text is compiled once, here (before a child: what the text or parser
    refuses needs none), and each step evaluates the tree with the range's
    bounds and step: `@ start()`/`@ end()` are the range's first and last step,
    `start()`, `end()`, `range()`, `step()` and duration expressions see them.
    """
    check_expr_text(expr)  # the text's limits before any rewrite of it
    node = engine.compile(expr, step_ms=step, range_ms=end - start)
    return lambda at: engine.query(node, at, start_ms=start, end_ms=end, step_ms=step)


def backend_steps(query_fn: Callable[[str, int], Any], expr: str) -> Callable[[int], Any]:
    """Each step's evaluation of a range query by a remote query backend: its instant query.

    That query has only a time, no range: `@ start()` and `@ end()` are refused, as
    the backend would read them as each step's own time. The text is compiled without
    experimental features (the backend's own flags are not known here), so `step()`
    and duration expressions are refused by the compiler.
    """
    check_expr_text(expr)
    if _at_range_end(compile_expr(expr)):
        raise PromQLError("@ start() and @ end() cannot be sent to the query backend step "
                          "by step: query the backend directly, or write the range's start "
                          "or end time after @", None)
    return lambda at: query_fn(expr, at)


def _at_range_end(node: Any) -> bool:
    if isinstance(node, n.VectorSelector | n.Subquery) and node.at in (n.AT_START, n.AT_END):
        return True
    if isinstance(node, tuple | list):
        return any(_at_range_end(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type | Matcher):
        return any(_at_range_end(getattr(node, f.name)) for f in dataclasses.fields(node))
    return False


def evaluate_range(at_fn: Callable[[int], Any], start: int, end: int, step: int,
                   timeout_s: float = QUERY_TIMEOUT_S,
                   clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
    """The matrix of `at_fn(t)` at t = start, start+step, … ≤ end, in Prometheus's JSON.

    `at_fn` is one step's evaluation (`engine_steps`, `backend_steps`).

    Series sorted by labels as Prometheus sorts a range query's matrix; a
    scalar result is one series without labels. QueryLimitError past `timeout_s`
    for the whole range, or past MAX_SERIES series.
    """
    deadline = clock() + timeout_s
    series: dict[Labels, list[list[Any]]] = {}
    for at in range(start, end + 1, step):
        if clock() > deadline:
            raise QueryLimitError(f"query ran longer than {timeout_s:g}s (query_timeout)",
                                  "query_timeout")
        result = at_fn(at)
        ts = at / 1000
        samples = result if isinstance(result, list) else [((), float(result))]
        for sample in samples:
            labels, value = (sample if isinstance(sample, tuple)
                             else (sample.labels, sample.value))
            points = series.get(labels)
            if points is None:
                if len(series) >= MAX_SERIES:
                    raise QueryLimitError(f"range query returns more than {MAX_SERIES} series "
                                          "(max_series): narrow the selectors", "max_series")
                points = series[labels] = []
            points.append([ts, format_float(value)])
    return [{"metric": dict(labels), "values": points}
            for labels, points in sorted(series.items())]


def selectors(params: Params, matches: Sequence[str], required: bool) -> list[list[Matcher]]:
    """The label matchers of each `match[]` series selector (none when not required and absent)."""
    if not matches:
        if required:
            raise bad_param("match[]", "no match[] parameter provided")
        return [[Matcher(METRIC_NAME, "=~", ".+")]]
    out = []
    for text in matches:
        try:
            check_expr_text(text)
            node = compile_expr(text)
        except PromQLError as exc:
            raise bad_param("match[]", str(exc)) from None
        if not isinstance(node, n.VectorSelector) or node.offset_ms or node.at is not None:
            raise bad_param("match[]", f"{text!r} is not a series selector")
        out.append(list(node.matchers))
    return out


def time_window(params: Params, now_ms: int) -> tuple[int, int]:
    """(start, end) from optional `start`/`end`; unset, all the store holds, as Prometheus."""
    end = time_param(params, "end", now_ms)
    end = MAX_TIME_MS if end is None else end
    start = time_param(params, "start", now_ms)
    start = 0 if start is None else start
    if end < start:
        raise bad_param("end", "end timestamp must not be before start time")
    return start, end


def limit_param(params: Params) -> int:
    """Prometheus 3's `limit` (0: none), never above MAX_SERIES."""
    raw = params.get("limit") or "0"
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12:
        raise bad_param("limit", "expected a non-negative integer")
    return min(int(raw) or MAX_SERIES, MAX_SERIES)


def matching_labels(store: Any, groups: list[list[Matcher]], start: int, end: int
                    ) -> list[Labels]:
    """Label sets of the series any group of matchers selects with a sample in [start, end].

    In the order first seen; runs in the query pool's child (reads the store).
    """
    seen: dict[Labels, None] = {}
    for matchers in groups:
        for summary in store.summarize(matchers, start, end):
            seen[summary.labels] = None
    return list(seen)


def newest_samples(store: Any, groups: list[list[Matcher]], at: int, lookback_ms: int
                   ) -> list[tuple[Labels, int, float]]:
    """(labels, time, value) of each selected series' newest sample within the lookback."""
    seen: dict[Labels, tuple[Labels, int, float]] = {}
    for matchers in groups:
        for labels, t, v in store.select_newest(matchers, at - lookback_ms, at):
            seen.setdefault(labels, (labels, t, v))
    return list(seen.values())


def truncated(items: list[Any], limit: int) -> tuple[list[Any], list[str]]:
    """The first `limit` items, and Prometheus 3's warning when some were left out."""
    if len(items) <= limit:
        return items, []
    return items[:limit], [f"results truncated due to limit ({limit})"]


def success(data: Any, warnings: list[str]) -> dict[str, Any]:
    """Prometheus's success envelope, with `warnings` when there are some."""
    out: dict[str, Any] = {"status": "success", "data": data}
    if warnings:
        out["warnings"] = warnings
    return out


def promql_error(exc: PromQLError) -> dict[str, Any]:
    """/api/v1/query's error body: 422 `execution` for a limit, 400 `bad_data` otherwise."""
    if isinstance(exc, QueryLimitError):
        return {"status": "error", "errorType": "execution", "error": str(exc),
                "limit": exc.limit, "_http_status": 422}
    return {"status": "error", "errorType": "bad_data", "error": str(exc), "_http_status": 400}


def no_store() -> ApiError:
    """503 for the reads that need the embedded store."""
    return ApiError(503, "series are read from the query backend (Prometheus-compatible): "
                         "use it as the data source; this Sentinel holds no series store")
