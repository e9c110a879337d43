"""The seam between rules and data: `query(expr, at_ms) -> Vector | float`.

Two implementations:

- the embedded store: `sentinel.promql.Engine` (the default);
- a Prometheus-compatible HTTP API: `sentinel.rules.prometheus_api.PrometheusAPI`
  (Prometheus, Thanos, Mimir, VictoriaMetrics, Managed Service for Prometheus).

With a remote backend, some series exist only in Sentinel: its own counters
(`sentinel_*`, written for the self-alerts, the log sources' signature
matches, the probes' results) and the ALERTS series the rule manager writes
back. `RoutedBackend` sends an expression that reads only such series to the
embedded store and every other expression to the remote backend, so the
self-alert about the backend being down does not need the backend.

Recording rules whose expression goes to the remote backend are not
evaluated by Sentinel (`evaluates_recording`): their output would land in
Sentinel's store while the alerting rules reading it query the backend. Load
the same rule file into the backend's rule evaluator (Prometheus's
`rule_files`, Mimir's ruler) instead; the README says so.
"""

from __future__ import annotations

from typing import Any, Protocol

from sentinel.model import Vector
from sentinel.promql import nodes as n
from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError
from sentinel.rules.concurrent import RulePool
from sentinel.rules.needs import _name_matchers, _selectors

# Series that only Sentinel writes: they stay in the embedded store.
LOCAL_PREFIXES = ("sentinel_",)
LOCAL_NAMES = frozenset({"ALERTS", "ALERTS_FOR_STATE"})


class QueryBackend(Protocol):
    """What a rule evaluates through: an instant query at a given time.

    Returns a Vector, or a float for a scalar result; raises on any failure
    (the rule records it as health "err" and keeps its alerts as they were).
    """

    def query(self, expr: str | n.Expr, at_ms: int) -> Vector | float:
        """Evaluate `expr` at `at_ms` (ms since the epoch)."""
        ...


def reads_only_local(expr: str | n.Expr) -> bool:
    """Whether every selector of `expr` names a series that only Sentinel writes.

    An expression without selectors (`vector(1)`) is local too: it needs no data.
    """
    try:
        node = compile_expr(expr) if isinstance(expr, str) else expr
    except PromQLError:
        return False  # beyond Sentinel's subset (e.g. an API query): only the backend can run it
    for sel in _selectors(node):
        name, _ = _name_matchers(sel)
        if name is None or not (name in LOCAL_NAMES or name.startswith(LOCAL_PREFIXES)):
            return False
    return True


def inert_local_series(expr: str | n.Expr) -> list[str]:
    """Sentinel-only series an expression reads that a remote backend will not have.

    Empty when the expression reads only such series (it stays in the embedded
    store) or none of them; otherwise the expression goes to the backend whole and
    the names returned match nothing there (issue 40: the canary half of
    VLLMTimeToFirstTokenHigh).
    """
    try:
        node = compile_expr(expr) if isinstance(expr, str) else expr
    except PromQLError:
        return []  # beyond Sentinel's subset: cannot tell; the backend answers it
    local, remote = set(), False
    for sel in _selectors(node):
        name, _ = _name_matchers(sel)
        if name is not None and (name in LOCAL_NAMES or name.startswith(LOCAL_PREFIXES)):
            local.add(name)
        else:
            remote = True
    return sorted(local) if remote else []


class RoutedBackend:
    """Local-only expressions to the embedded engine, all others to the remote backend.

    Rules hand over the expression text or a compiled tree (`rule.query`);
    the remote backend needs the text, so a compiled tree is mapped back to
    the text it was compiled from (`texts`, filled from the loaded rules).
    """

    def __init__(self, local: QueryBackend, remote: QueryBackend, *,
                 concurrent_rules: int = 16, concurrent_rules_per_group: int = 8) -> None:
        self.local = local
        self.remote = remote
        # Read by the RuleManager: rules run concurrently on this pool, this many at once
        # over all groups and per group (each remote query is a round trip; issue 40).
        # One pool per backend: a manager rebuilt on an HA takeover shares it.
        self.rule_pool = (RulePool(concurrent_rules, concurrent_rules_per_group)
                          if concurrent_rules > 1 else None)
        # id(compiled tree) → (the tree, kept alive so its id is not reused, its text)
        self.texts: dict[int, tuple[Any, str]] = {}
        self._routes: dict[str, bool] = {}

    def learn(self, groups: Any) -> None:
        """Remember the text of every loaded rule's compiled expression (before each load)."""
        texts: dict[int, tuple[Any, str]] = {}
        for g in groups:
            for rule in g.rules:
                if rule.query is not None and not isinstance(rule.query, str):
                    texts[id(rule.query)] = (rule.query, rule.expr)
        # Merged, not replaced: an evaluation running across a reload still finds its text.
        self.texts = {**self.texts, **texts}

    def is_local(self, expr: str) -> bool:
        """Whether `expr` is answered by the embedded store (cached per text)."""
        local = self._routes.get(expr)
        if local is None:
            local = self._routes[expr] = reads_only_local(expr)
        return local

    def query(self, expr: str | n.Expr, at_ms: int) -> Vector | float:
        """Answer `expr` at `at_ms` from the embedded store or the remote backend."""
        known = None if isinstance(expr, str) else self.texts.get(id(expr))
        text = expr if isinstance(expr, str) else (known[1] if known is not None else None)
        if text is None:
            # A compiled tree we were not told about: only the embedded engine can run it.
            return self.local.query(expr, at_ms)
        if self.is_local(text):
            return self.local.query(expr, at_ms)
        return self.remote.query(text, at_ms)

    def evaluates_recording(self, expr: str) -> bool:
        """Whether Sentinel evaluates a recording rule with this expression (see module doc)."""
        return self.is_local(expr)
