"""Sentinel's own PromQL syntax tree: small frozen dataclasses.

The compiler turns promql-parser's objects into these, so evaluation never
depends on the binding's types, and a compiled expression can be shared
between threads and cached. Label matchers are the store's own `Matcher`
(regex compiled once, fully anchored), so selectors go to the store as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.store.memory import Matcher

SCALAR = "scalar"
VECTOR = "vector"
MATRIX = "matrix"
STRING = "string"


@dataclass(frozen=True, slots=True)
class NumberLiteral:
    """A float literal."""

    value: float


@dataclass(frozen=True, slots=True)
class StringLiteral:
    """A string literal (only as a function argument)."""

    value: str


# The `@` modifier: an absolute time in ms, AT_START for `@ start()`, AT_END for
# `@ end()` (both the evaluation time of an instant query; a range query's first
# and last step); None when absent.
AT_START = "start"
AT_END = "end"
AT_QUERY = AT_END  # the older name: an instant query's own time
At = int | str | None


@dataclass(frozen=True, slots=True)
class VectorSelector:
    """`name{matchers} offset D @ T`; the metric name is one of the matchers."""

    matchers: tuple[Matcher, ...]
    offset_ms: int = 0
    at: At = None
    extend: str = ""  # Prometheus 3's experimental "anchored" or "smoothed"; "" for neither


@dataclass(frozen=True, slots=True)
class MatrixSelector:
    """`selector[range]`."""

    selector: VectorSelector
    range_ms: int


@dataclass(frozen=True, slots=True)
class Subquery:
    """`expr[range:step] offset D @ T`; step_ms 0 means the default evaluation interval."""

    expr: Expr
    range_ms: int
    step_ms: int
    offset_ms: int = 0
    at: At = None


@dataclass(frozen=True, slots=True)
class Call:
    """A function call; `returns` is SCALAR or VECTOR."""

    func: str
    args: tuple[Expr, ...]
    returns: str


@dataclass(frozen=True, slots=True)
class Aggregate:
    """`op [by|without (labels)] ([param,] expr)`."""

    op: str
    expr: Expr
    param: Expr | None
    grouping: tuple[str, ...]
    without: bool


@dataclass(frozen=True, slots=True)
class Matching:
    """Vector matching of a binary operation between two vectors."""

    card: str  # one-to-one, many-to-one, one-to-many, many-to-many
    on: bool
    labels: tuple[str, ...]
    include: tuple[str, ...] = ()
    # Prometheus 3's experimental fill modifiers: the value a missing left (right)
    # sample takes, None without `fill`/`fill_left` (`fill`/`fill_right`).
    fill_lhs: float | None = None
    fill_rhs: float | None = None


@dataclass(frozen=True, slots=True)
class Binary:
    """`lhs op [bool] [on|ignoring (...)] [group_left|group_right (...)] rhs`."""

    op: str
    lhs: Expr
    rhs: Expr
    return_bool: bool
    matching: Matching


@dataclass(frozen=True, slots=True)
class Negate:
    """Unary minus."""

    expr: Expr


@dataclass(frozen=True, slots=True)
class Paren:
    """Parentheses (kept because absent() and timestamp() look through them)."""

    expr: Expr


Expr = (
    NumberLiteral
    | StringLiteral
    | VectorSelector
    | MatrixSelector
    | Subquery
    | Call
    | Aggregate
    | Binary
    | Negate
    | Paren
)


def value_type(expr: Expr) -> str:
    """SCALAR, VECTOR, MATRIX or STRING: what the expression evaluates to."""
    if isinstance(expr, NumberLiteral):
        return SCALAR
    if isinstance(expr, StringLiteral):
        return STRING
    if isinstance(expr, VectorSelector | Aggregate):
        return VECTOR
    if isinstance(expr, MatrixSelector | Subquery):
        return MATRIX
    if isinstance(expr, Call):
        return expr.returns
    if isinstance(expr, Binary):
        both_scalar = value_type(expr.lhs) == SCALAR and value_type(expr.rhs) == SCALAR
        return SCALAR if both_scalar else VECTOR
    return value_type(expr.expr)


def unwrap_parens(expr: Expr) -> Expr:
    """The expression inside any number of parentheses."""
    while isinstance(expr, Paren):
        expr = expr.expr
    return expr
