"""An expression that reads Sentinel's own series and a remote backend's, answered by both.

With a remote backend, series such as `sentinel_probe_ttft_seconds` exist only
in the embedded store and vLLM's series only in the backend (issue 40: the
probe half of VLLMTimeToFirstTokenHigh went to the backend, which has no
probe series, and never fired). A mixed expression is split instead:

- every largest part that reads only backend series and is an instant vector
  or a scalar (an operand of a binary operator, an aggregation's input, a
  function's argument) is sent to the backend as its own instant query, at
  the same evaluation time;
- the embedded engine evaluates the rest of the tree (the parts on
  Sentinel's series, and the operators joining them) with those answers in
  place of the backend parts, asking for each only when the tree needs it
  (`x unless on (target) <backend part>` skips the query when `x` is empty).

Each part is evaluated as PromQL would evaluate it inside the whole
expression at that time, so the result is the whole expression's. Two shapes
cannot be split that way, and `check config` names them (`unanswerable`):
a subquery, or a function's range-vector argument, that reads both kinds
(its inside is evaluated at many times, or over a range, not at one).
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.promql import nodes as n
from sentinel.promql.render import render
from sentinel.rules.needs import _name_matchers, _selectors

NONE, LOCAL, REMOTE, MIXED = "none", "local", "remote", "mixed"


class Unanswerable(ValueError):
    """A mixed expression whose parts cannot be evaluated apart (see the module doc)."""


@dataclass(frozen=True)
class Split:
    """The backend parts of a mixed expression: (node in the tree, its PromQL text)."""

    tree: n.Expr
    remote: tuple[tuple[n.Expr, str], ...]


def kind(node: n.Expr, local_names: frozenset[str], local_prefixes: tuple[str, ...]) -> str:
    """NONE (reads no series), LOCAL, REMOTE or MIXED."""
    kinds = set()
    for sel in _selectors(node):
        name, _ = _name_matchers(sel)
        local = name is not None and (name in local_names or name.startswith(local_prefixes))
        kinds.add(LOCAL if local else REMOTE)
    if not kinds:
        return NONE
    return kinds.pop() if len(kinds) == 1 else MIXED


def split(tree: n.Expr, local_names: frozenset[str], local_prefixes: tuple[str, ...]) -> Split:
    """The parts of a MIXED tree to ask the backend for; Unanswerable when it cannot split."""
    parts: list[tuple[n.Expr, str]] = []

    def walk(node: n.Expr) -> None:
        k = kind(node, local_names, local_prefixes)
        if k in (NONE, LOCAL):
            return
        if k == REMOTE:
            if n.value_type(node) not in (n.VECTOR, n.SCALAR):
                raise Unanswerable(f"the range {render(node)} reads the backend inside an "
                                   "expression that also reads Sentinel's own series")
            parts.append((node, render(node)))
            return
        if isinstance(node, n.Subquery):
            raise Unanswerable(f"the subquery {render(node)} reads both Sentinel's own "
                               "series and the backend's")
        for child in _children(node):
            walk(child)

    walk(tree)
    return Split(tree, tuple(parts))


def _children(node: n.Expr) -> tuple[n.Expr, ...]:
    if isinstance(node, n.Call):
        return node.args
    if isinstance(node, n.Aggregate):
        return (node.expr,) if node.param is None else (node.param, node.expr)
    if isinstance(node, n.Binary):
        return (node.lhs, node.rhs)
    if isinstance(node, n.Negate | n.Paren | n.Subquery):
        return (node.expr,)
    return ()
