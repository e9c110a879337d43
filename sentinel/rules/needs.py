"""Which series the loaded rules can read: the store keeps those and drops the rest at ingest.

Computed from the compiled rule expressions at load and at every reload.
A selector with an exact metric name contributes that name; a selector
whose name is a regex (`{__name__=~"vllm:.*"}`) contributes the matcher; a
selector with no name matcher at all (`{job="x"}`) could read anything, so
everything is kept. Names written by rules themselves (a recording rule's
`record`, and `ALERTS` / `ALERTS_FOR_STATE`) are always included, as are
`extra_names` (the series diagnosis reads as evidence, `up`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from sentinel.model import METRIC_NAME
from sentinel.promql import nodes as n
from sentinel.promql.compile import compile_expr
from sentinel.rules.loader import RecordingRule
from sentinel.store.memory import Matcher, SeriesFilter

ALWAYS = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})


def needed_series(groups: Iterable[Any], extra_names: Iterable[str] = (),
                  keep_all: bool = False) -> SeriesFilter:
    """The filter of series that `groups`' rules read, plus what rules write and `extra_names`.

    `groups` are rule groups with `.rules`; each rule has `.query` (compiled
    expression) or `.expr` (text), and may have `.record` (its output name).
    """
    names = set(ALWAYS) | set(extra_names)
    patterns: list[Matcher] = []
    everything = keep_all
    for group in groups:
        for rule in group.rules:
            record = rule.name if isinstance(rule, RecordingRule) else getattr(rule, "record", None)
            if record:
                names.add(record)
            query = getattr(rule, "query", None)
            if query is None or isinstance(query, str):
                query = compile_expr(query or rule.expr)
            for selector in _selectors(query):
                exact, regex = _name_matchers(selector)
                if exact is not None:
                    names.add(exact)
                elif regex:
                    patterns.extend(regex)
                else:
                    everything = True
    return SeriesFilter(frozenset(names), tuple(patterns), everything)


def _name_matchers(selector: n.VectorSelector) -> tuple[str | None, list[Matcher]]:
    """The exact metric name of a selector, else its other `__name__` matchers."""
    on_name = [m for m in selector.matchers if m.name == METRIC_NAME]
    for m in on_name:
        if m.op == "=":
            return m.value, []
    positive = [m for m in on_name if m.op == "=~"]
    return None, positive


_INFO_SERIES = n.VectorSelector((Matcher("__name__", "=~", ".+_info", dotall=True),))


def _selectors(node: Any) -> Iterable[n.VectorSelector]:
    """Every vector selector in an expression tree (inside matrix selectors, calls, …)."""
    if isinstance(node, n.VectorSelector):
        yield node
        return
    if isinstance(node, n.Call) and node.func == "info":
        # info() reads info series its text does not name (target_info, or the `*_info`
        # its label selector picks); that selector is not a read of its own.
        yield _INFO_SERIES
        yield from _selectors(node.args[0])
        return
    if isinstance(node, tuple | list):
        for item in node:
            yield from _selectors(item)
        return
    if dataclasses.is_dataclass(node) and not isinstance(node, type | Matcher):
        for f in dataclasses.fields(node):
            yield from _selectors(getattr(node, f.name))
