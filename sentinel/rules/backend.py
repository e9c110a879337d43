"""The seam between rules and data: `query(expr, at_ms) -> Vector | float`.

Two implementations:

- the embedded store: `sentinel.promql.Engine` (the default);
- a Prometheus-compatible HTTP API: `sentinel.rules.prometheus_api.PrometheusAPI`
  (Prometheus, Thanos, Mimir, VictoriaMetrics, Managed Service for Prometheus).

With a remote backend, some series exist only in Sentinel: its own counters
(`sentinel_*`, written for the self-alerts, the log sources' signature
matches, the probes' results), the ALERTS series the rule manager writes
back, and the output of the recording rules Sentinel evaluates. `RoutedBackend`
sends an expression that reads only such series to the embedded store (so the
self-alert about the backend being down does not need the backend), one that
reads none of them to the remote backend, and splits one that reads both
(rules/split.py: the backend answers its parts, the embedded engine joins them).

Recording rules whose expression goes to the remote backend whole are not
evaluated by Sentinel (`evaluates_recording`): their output would land in
Sentinel's store while the alerting rules reading it query the backend. Load
the same rule file into the backend's rule evaluator (Prometheus's
`rule_files`, Mimir's ruler) instead; the README says so.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Protocol

from sentinel.model import Vector
from sentinel.promql import nodes as n
from sentinel.promql.compile import compile_expr
from sentinel.promql.engine import Given
from sentinel.promql.errors import PromQLError
from sentinel.rules.concurrent import RulePool
from sentinel.rules.loader import RecordingRule
from sentinel.rules.split import LOCAL, MIXED, NONE, REMOTE, Split, Unanswerable, kind, split

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


def reads_only_local(expr: str | n.Expr, local_names: frozenset[str] = LOCAL_NAMES) -> bool:
    """Whether every selector of `expr` names a series that only Sentinel writes.

    An expression without selectors (`vector(1)`) is local too: it needs no data.
    """
    return route(expr, local_names) == LOCAL


def route(expr: str | n.Expr, local_names: frozenset[str] = LOCAL_NAMES) -> str | Split:
    """LOCAL (the embedded store answers), REMOTE (the backend does), or a `Split` of both.

    An expression Sentinel cannot parse, and a mixed one it cannot split
    (`unanswerable`), go to the backend whole.
    """
    try:
        node = compile_expr(expr) if isinstance(expr, str) else expr
    except PromQLError:
        return REMOTE  # beyond Sentinel's subset (e.g. an API query): only the backend can run it
    k = kind(node, local_names, LOCAL_PREFIXES)
    if k in (NONE, LOCAL):
        return LOCAL
    if k == REMOTE:
        return REMOTE
    try:
        return split(node, local_names, LOCAL_PREFIXES)
    except Unanswerable:
        return REMOTE


def unanswerable(expr: str | n.Expr, local_names: frozenset[str] = LOCAL_NAMES) -> str | None:
    """Why a rule reading Sentinel's own series and the backend's cannot be split, or None.

    Such a rule goes to the backend whole, where Sentinel's series match nothing.
    """
    try:
        node = compile_expr(expr) if isinstance(expr, str) else expr
    except PromQLError:
        return None  # beyond Sentinel's subset: cannot tell; the backend answers it
    if kind(node, local_names, LOCAL_PREFIXES) != MIXED:
        return None
    try:
        split(node, local_names, LOCAL_PREFIXES)
    except Unanswerable as exc:
        return str(exc)
    return None


def local_names_of(groups: Any) -> frozenset[str]:
    """ALERTS and the outputs of the recording rules Sentinel evaluates itself.

    A recording rule reading any of Sentinel's own series is evaluated by
    Sentinel (split when it also reads the backend's) and writes into the
    embedded store, so rules reading its output read it there.
    """
    names = set(LOCAL_NAMES)
    changed = True
    while changed:  # a record may read a record defined after it
        changed = False
        for g in groups:
            for rule in g.rules:
                if (isinstance(rule, RecordingRule) and rule.name not in names
                        and route(rule.query or rule.expr, frozenset(names)) != REMOTE):
                    names.add(rule.name)
                    changed = True
    return frozenset(names)


class LocalEngine(Protocol):
    """The embedded engine: a query whose backend parts are answered elsewhere (`given`)."""

    def query(self, expr: str | n.Expr, at_ms: int, given: Given | None = None
              ) -> Vector | float:
        """Evaluate `expr` at `at_ms`, asking `given` for the nodes it holds."""
        ...


class RoutedBackend:
    """Local-only expressions to the embedded engine, backend-only ones to the remote
    backend, and mixed ones split between the two (rules/split.py).

    Rules hand over the expression text or a compiled tree (`rule.query`);
    the remote backend needs the text, so a compiled tree is mapped back to
    the text it was compiled from (`texts`, filled from the loaded rules).
    """

    def __init__(self, local: LocalEngine, remote: QueryBackend, *,
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
        # Series only the embedded store has: ALERTS and Sentinel's own recording rules.
        self.local_names = LOCAL_NAMES
        self._routes: dict[str, str | Split] = {}

    def learn(self, groups: Any) -> None:
        """Remember the text of every loaded rule's compiled expression (before each load)."""
        texts: dict[int, tuple[Any, str]] = {}
        for g in groups:
            for rule in g.rules:
                if rule.query is not None and not isinstance(rule.query, str):
                    texts[id(rule.query)] = (rule.query, rule.expr)
        # Merged, not replaced: an evaluation running across a reload still finds its text.
        self.texts = {**self.texts, **texts}
        names = local_names_of(groups)
        if names != self.local_names:
            self.local_names, self._routes = names, {}

    def route(self, expr: str) -> str | Split:
        """LOCAL, REMOTE or a Split for `expr` (cached per text)."""
        found = self._routes.get(expr)
        if found is None:
            found = self._routes[expr] = route(expr, self.local_names)
        return found

    def is_local(self, expr: str) -> bool:
        """Whether `expr` is answered by the embedded store alone."""
        return self.route(expr) == LOCAL

    def query(self, expr: str | n.Expr, at_ms: int) -> Vector | float:
        """Answer `expr` at `at_ms` from the embedded store, the remote backend or both."""
        known = None if isinstance(expr, str) else self.texts.get(id(expr))
        text = expr if isinstance(expr, str) else (known[1] if known is not None else None)
        if text is None:
            # A compiled tree we were not told about: only the embedded engine can run it.
            return self.local.query(expr, at_ms)
        found = self.route(text)
        if found == LOCAL:
            return self.local.query(expr, at_ms)
        if found == REMOTE:
            return self.remote.query(text, at_ms)
        assert isinstance(found, Split)
        # The backend parts are asked for only when the engine reaches them, at the same time.
        given = {id(node): partial(self.remote.query, part, at_ms)
                 for node, part in found.remote}
        return self.local.query(found.tree, at_ms, given=given)

    def evaluates_recording(self, expr: str) -> bool:
        """Whether Sentinel evaluates a recording rule with this expression (see module doc)."""
        return self.route(expr) != REMOTE
