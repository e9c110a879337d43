"""What one PromQL expression may cost: its text, its nesting, the points it touches, its time.

The same limits hold wherever an expression comes from (rule files, the API,
the page, MCP), because they are checked where every expression passes: the
text before promql-parser sees it, the points and the time while the engine
evaluates it. Each refusal is a QueryLimitError naming the limit.

Why before parsing: the Rust parser's cost grows faster than the text. 1,000
nested parentheses take it 85 MB, 5,000 took 2.26 GB; a chain of 5,000 `+`
took 3.7 GB and 25 s and then overflowed its stack (SIGSEGV: the process
dies). A scan of the text costs microseconds.
"""

from __future__ import annotations

import re
import time

from sentinel.promql.errors import PromQLError

# An expression's text: shipped rules are under 1 KiB.
MAX_EXPR_CHARS = 16_384
# Brackets open at once: ( [ {. Real rules nest under 10.
MAX_NESTING = 64
# Operators (binary, comparison, set, matcher): each one deepens the parser's tree.
MAX_OPERATORS = 250
# Points an evaluation may touch: samples read from the store plus samples made at
# subquery steps (Prometheus's --query.max-samples counts the same way, default 50M;
# Sentinel's points are Python objects, ~10x dearer).
MAX_POINTS = 5_000_000
# Wall time of one evaluation.
QUERY_TIMEOUT_S = 10.0

_OPERATOR = re.compile(r"[-+*/%^]|[=!<>]=?|=~|!~|\b(?:and|or|unless|atan2)\b")


class QueryLimitError(PromQLError):
    """An expression refused or stopped because it passed one of the limits above.

    `limit` names it (e.g. "max_points"), for the API's 422 and the rule's last error.
    """

    def __init__(self, message: str, limit: str, position: int | None = None) -> None:
        super().__init__(message, position)
        self.limit = limit


def check_text(text: str, masked: str) -> None:
    """Refuse an expression whose text would cost the parser too much (`masked`: no strings)."""
    if len(text) > MAX_EXPR_CHARS:
        raise QueryLimitError(f"expression of {len(text)} characters is longer than the "
                              f"limit of {MAX_EXPR_CHARS} (max_expr_chars)", "max_expr_chars", 0)
    depth = 0
    for i, c in enumerate(masked):
        if c in "([{":
            depth += 1
            if depth > MAX_NESTING:
                raise QueryLimitError(f"expression nests brackets more than {MAX_NESTING} "
                                      "deep (max_nesting)", "max_nesting", i)
        elif c in ")]}":
            depth -= 1
    operators = len(_OPERATOR.findall(masked))
    if operators > MAX_OPERATORS:
        raise QueryLimitError(f"expression has {operators} operators, more than the limit of "
                              f"{MAX_OPERATORS} (max_operators)", "max_operators", 0)


class Budget:
    """The points and the time left to one evaluation; `charge` raises once either runs out."""

    __slots__ = ("deadline", "max_points", "timeout_s", "used")

    def __init__(self, max_points: int = MAX_POINTS, timeout_s: float = QUERY_TIMEOUT_S,
                 clock: float | None = None) -> None:
        self.max_points = max_points
        self.timeout_s = timeout_s
        self.deadline = (time.monotonic() if clock is None else clock) + timeout_s
        self.used = 0

    def charge(self, points: int) -> None:
        """Count `points` more; QueryLimitError past the point limit or the deadline."""
        self.used += points
        if self.used > self.max_points:
            raise QueryLimitError(f"query touches more than {self.max_points} points "
                                  "(max_points): narrow the selectors, ranges or "
                                  "subquery steps", "max_points")
        if time.monotonic() > self.deadline:
            raise QueryLimitError(f"query ran longer than {self.timeout_s:g}s (query_timeout)",
                                  "query_timeout")

    def precheck_steps(self, steps: int) -> None:
        """Refuse, before evaluating, subqueries whose steps alone pass the point limit."""
        if steps > self.max_points:
            raise QueryLimitError(f"query would evaluate {steps} subquery steps, more than "
                                  f"the {self.max_points} points a query may touch "
                                  "(max_points)", "max_points")
