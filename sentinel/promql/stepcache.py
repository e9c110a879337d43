"""Subquery steps remembered across evaluations, over data that can no longer change.

A subquery `e[R:S]` evaluates `e` at every multiple of S in its window, and
Prometheus aligns those steps to absolute time: successive evaluations of a rule
(`sentinel rules test` evaluates every rule at every evaluation_interval) ask for
almost the same steps again. `avg_over_time(sum(x)[7d:30m])` evaluated every
minute for 15 hours is 900 × 337 evaluations of `sum(x)`, all but ~900 of them
repeats. A step's value depends only on the samples at or before it (lookback,
ranges, offsets), so once the caller says those samples are final, the value can
be kept and handed back.

Only the caller knows when data is final: `sentinel rules test` loads its input
series up front and writes recorded samples at the evaluation time only, so
before evaluating at T every sample older than T is final (`seal(T)`). The
daemon, whose scrapes land late and out of order, uses no cache.

A cached step is charged to the query's budget as its result's size plus one,
as an evaluated step is; the selector reads it would have made are not charged,
since it makes none.
"""

from __future__ import annotations

from sentinel.model import Vector
from sentinel.promql import nodes as n


class StepCache:
    """Inner-expression values at subquery steps strictly before the sealed time."""

    def __init__(self) -> None:
        self.sealed_ms: int | None = None  # samples older than this are final
        self._values: dict[n.Expr, dict[int, Vector]] = {}
        self._safe: dict[int, tuple[n.Expr, bool]] = {}  # id(expr) -> (expr, cacheable)

    def seal(self, before_ms: int) -> None:
        """No sample older than `before_ms` will be added, changed or removed from now on."""
        self.sealed_ms = before_ms

    def steps_of(self, expr: n.Expr) -> dict[int, Vector] | None:
        """The remembered steps of a subquery's inner expression (step time -> value),
        or None when its value can depend on more than the data up to the step."""
        if self.sealed_ms is None or not self._cacheable(expr):
            return None
        return self._values.setdefault(expr, {})

    def final(self, step_ms: int) -> bool:
        """Whether a step's value can be kept: every sample it reads is final."""
        return self.sealed_ms is not None and step_ms < self.sealed_ms

    def _cacheable(self, expr: n.Expr) -> bool:
        known = self._safe.get(id(expr))
        if known is not None and known[0] is expr:  # the id of a live object, not a reused one
            return known[1]
        ok = reads_only_up_to_its_time(expr)
        self._safe[id(expr)] = (expr, ok)
        return ok


def reads_only_up_to_its_time(e: n.Expr) -> bool:
    """True when `e` evaluated at T reads no sample after T and nothing but T and the data:
    no `@` (it pins to another time, or to the query's) and no negative offset."""
    if isinstance(e, n.VectorSelector):
        return e.at is None and e.offset_ms >= 0
    if isinstance(e, n.MatrixSelector):
        return reads_only_up_to_its_time(e.selector)
    if isinstance(e, n.Subquery):
        return e.at is None and e.offset_ms >= 0 and reads_only_up_to_its_time(e.expr)
    if isinstance(e, n.Call):
        return all(reads_only_up_to_its_time(a) for a in e.args)
    if isinstance(e, n.Aggregate):
        return reads_only_up_to_its_time(e.expr) and (
            e.param is None or reads_only_up_to_its_time(e.param))
    if isinstance(e, n.Binary):
        return reads_only_up_to_its_time(e.lhs) and reads_only_up_to_its_time(e.rhs)
    if isinstance(e, n.Negate | n.Paren):
        return reads_only_up_to_its_time(e.expr)
    return True  # literals
