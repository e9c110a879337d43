"""The Prometheus data-source reads over an ApiService: each method one endpoint's answer.

The parsing, limits and formats are in `sentinel/api/promdata.py`; this
module holds what needs the service (its clock, query function, pool and
store). Every read of the store runs in the service's query pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sentinel.api import promdata as pd
from sentinel.api.errors import ApiError, bad_param
from sentinel.api.federate import exposition
from sentinel.buildinfo import build_info
from sentinel.model import METRIC_NAME
from sentinel.promql import PromQLError
from sentinel.promql.compile import check_expr_text, compile_expr
from sentinel.promql.engine import Engine
from sentinel.promql.limits import QUERY_TIMEOUT_S

_LABEL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class DataSource:
    """`query_range`, `series`, `labels`, label values, `metadata`, `buildinfo`, `/federate`."""

    def __init__(self, service: Any) -> None:
        self.service = service  # sentinel.api.service.ApiService

    def _run(self, fn: Any) -> Any:
        pool = self.service.pool
        assert pool is not None
        return pool.run(fn)

    def _store(self) -> Any:
        engine = getattr(self.service.query_fn, "__self__", None)
        if not isinstance(engine, Engine):
            raise pd.no_store()
        return engine.store

    def query_range(self, params: pd.Params) -> dict[str, Any]:
        """GET|POST /api/v1/query_range: a matrix, one instant evaluation per step.

        The embedded engine evaluates each step with the range's bounds and step; a
        remote backend answers its instant query at each step (promdata.backend_steps).
        """
        expr = params.get("query")
        if not expr:
            raise bad_param("query", "required")
        start, end, step = pd.range_steps(params, self.service.now_ms())
        query_fn = self.service.query_fn
        if query_fn is None:
            raise ApiError(503, "no series store in this process (ask the daemon)")
        engine = getattr(query_fn, "__self__", None)
        timeout = float(getattr(engine, "timeout_s", QUERY_TIMEOUT_S))
        try:
            # Compiled here, once, before a child: what the text or parser refuses needs none.
            at_fn = (pd.engine_steps(engine, expr, start, end, step)
                     if isinstance(engine, Engine) else pd.backend_steps(query_fn, expr))
            result = self._run(lambda: pd.evaluate_range(at_fn, start, end, step, timeout))
        except PromQLError as exc:
            return pd.promql_error(exc)
        return pd.success({"resultType": "matrix", "result": result}, [])

    def series(self, params: pd.Params, matches: Sequence[str]) -> dict[str, Any]:
        """GET|POST /api/v1/series: label sets of the selected series with samples in the range."""
        groups = pd.selectors(params, matches, required=True)
        start, end = pd.time_window(params, self.service.now_ms())
        limit = pd.limit_param(params)
        store = self._store()
        # Sorted by labels, as Prometheus's merged series sets come out, then cut.
        found = self._run(lambda: sorted(pd.matching_labels(store, groups, start, end))[
            :limit + 1])
        kept, warnings = pd.truncated(found, limit)
        return pd.success([dict(labels) for labels in kept], warnings)

    def labels(self, params: pd.Params, matches: Sequence[str]) -> dict[str, Any]:
        """GET|POST /api/v1/labels: the label names of the (selected) series, sorted."""
        return self._names_or_values(params, matches, None)

    def label_values(self, name: str, params: pd.Params, matches: Sequence[str]
                     ) -> dict[str, Any]:
        """GET /api/v1/label/<name>/values: the values of one label, sorted."""
        if not name or name[0].isdigit() or not set(name) <= _LABEL_NAME_CHARS:
            raise bad_param("name", f"invalid label name: {name!r}")
        return self._names_or_values(params, matches, name)

    def _names_or_values(self, params: pd.Params, matches: Sequence[str],
                         name: str | None) -> dict[str, Any]:
        groups = pd.selectors(params, matches, required=False)
        start, end = pd.time_window(params, self.service.now_ms())
        limit = pd.limit_param(params)
        store = self._store()

        def collect() -> list[str]:
            out: set[str] = set()
            for labels in pd.matching_labels(store, groups, start, end):
                if name is None:
                    out.update(k for k, _ in labels)
                else:
                    out.update(v for k, v in labels if k == name)
            return sorted(out)

        kept, warnings = pd.truncated(self._run(collect), limit)
        return pd.success(kept, warnings)

    def metadata(self, params: pd.Params) -> dict[str, Any]:
        """GET /api/v1/metadata: metric name → [{type, help, unit}] of the stored names.

        The scrape keeps no `# TYPE`/`# HELP` lines, so each stored name is
        listed with type "unknown" and no help: a data source's metric browser
        then lists every name, and no type is claimed that was not read.
        """
        metric = params.get("metric") or None
        limit = pd.limit_param(params)
        store = self._store()

        def names() -> list[str]:
            groups = [[pd.Matcher(METRIC_NAME, "=", metric)]] if metric else \
                pd.selectors(params, (), required=False)
            now = self.service.now_ms()
            start = now - int(getattr(store, "retention_ms", pd.LOOKBACK_MS))
            return sorted({dict(labels)[METRIC_NAME]
                           for labels in pd.matching_labels(store, groups, start, now)})

        kept, warnings = pd.truncated(self._run(names), limit)
        return pd.success({m: [{"type": "unknown", "help": "", "unit": ""}] for m in kept},
                          warnings)

    def exemplars(self, params: pd.Params) -> dict[str, Any]:
        """GET|POST /api/v1/query_exemplars: none, ever (the scrape keeps no exemplars); the
        query is still checked, so a wrong one is an error as in Prometheus."""
        expr = params.get("query")
        if not expr:
            raise bad_param("query", "required")
        engine = getattr(self.service.query_fn, "__self__", None)
        try:
            if isinstance(engine, Engine):
                engine.compile(expr)
            else:
                check_expr_text(expr)
                compile_expr(expr)
        except PromQLError as exc:
            return pd.promql_error(exc)
        return pd.success([], [])

    def buildinfo(self) -> dict[str, Any]:
        """GET /api/v1/status/buildinfo: the Prometheus version whose API and PromQL are spoken."""
        info = build_info()
        return pd.success({"version": pd.PROMETHEUS_VERSION, "revision": info["commit"],
                           "branch": "", "buildUser": "sentinel",
                           "buildDate": "", "goVersion": f"python{info['python']}",
                           "application": f"sentinel {info['version']}"}, [])

    def federate(self, matches: Sequence[str]) -> str:
        """GET /federate: the text exposition of each selected series' newest sample."""
        groups = pd.selectors({}, matches, required=True)
        store = self._store()
        now = self.service.now_ms()
        samples = self._run(lambda: pd.newest_samples(store, groups, now, pd.LOOKBACK_MS))
        return exposition(samples)
