"""Compile PromQL text into Sentinel's syntax tree, rejecting what the engine cannot do.

promql-parser (a Rust binding) does the parsing and type checking; this
module walks its objects once and builds `nodes`. The binding reports no
positions, so the position of an unsupported construct is found by looking
for its token in the text, with string literals masked out.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache

import promql_parser as pp

from sentinel.model import METRIC_NAME
from sentinel.promql import extended, info
from sentinel.promql import nodes as n
from sentinel.promql.errors import PromQLError
from sentinel.promql.features import (
    DURATION_EXPR,
    EXPERIMENTAL_FUNCTION_NAMES,
    EXPERIMENTAL_FUNCTIONS,
    EXTENDED_RANGE,
    FILL_MODIFIERS,
    NONE,
)
from sentinel.promql.functions import label_replace_regex
from sentinel.promql.limits import check_text
from sentinel.promql.regexcheck import (
    STRING_LITERAL,
    matcher_position,
    parse_with_stand_ins,
    regex_error,
)
from sentinel.re2match import RegexError
from sentinel.store.memory import Matcher

# Functions the engine evaluates (see the table in sentinel/promql/__init__.py).
SUPPORTED_FUNCTIONS = frozenset(
    {
        "rate", "irate", "increase", "delta", "idelta",
        "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
        "count_over_time", "last_over_time", "present_over_time",
        "quantile_over_time", "stddev_over_time", "stdvar_over_time",
        "absent", "absent_over_time", "changes", "resets", "histogram_quantile",
        "clamp", "clamp_min", "clamp_max", "abs", "ceil", "floor", "round",
        "exp", "sqrt", "ln", "log2", "log10", "sgn",
        "time", "timestamp", "vector", "scalar", "label_replace", "label_join",
        "sort", "sort_desc", "deriv", "predict_linear",
        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
        "asinh", "acosh", "atanh", "deg", "rad", "pi",
        "day_of_month", "day_of_week", "day_of_year", "days_in_month",
        "hour", "minute", "month", "year",
        "double_exponential_smoothing",
        # Prometheus 3 (experimental ones need promql-experimental-functions)
        "start", "end", "range", "step", "min_of", "max_of", "info",
        "first_over_time", "ts_of_first_over_time", "ts_of_last_over_time",
        "ts_of_max_over_time", "ts_of_min_over_time", "mad_over_time",
        "sort_by_label", "sort_by_label_desc", "histogram_fraction", "histogram_quantiles",
    }
)  # fmt: skip

SUPPORTED_AGGREGATIONS = frozenset(
    {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar",
     "topk", "bottomk", "quantile", "count_values",
     "limitk", "limit_ratio"}  # Prometheus 3, experimental
)  # fmt: skip

# The binding's enums do not hash: key by their printed names.
_MATCH_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}
_CARDINALITY = {
    "OneToOne": "one-to-one",
    "ManyToOne": "many-to-one",
    "OneToMany": "one-to-many",
    "ManyToMany": "many-to-many",
}


def _enum_name(value: object) -> str:
    return str(value).rsplit(".", 1)[-1]


_STRING_LITERAL = STRING_LITERAL


def compile_expr(text: str, features: frozenset[str] = NONE, any_type: bool = False) -> n.Expr:
    """Parse and check a PromQL expression; PromQLError(message, position) when it cannot run.

    The result must be an instant vector or a scalar, as rule expressions are.
    `features`: Prometheus's experimental PromQL flags to accept (sentinel/promql/features.py).
    `any_type`: a range vector or a string is a result too (an instant query's, not a rule's).
    """
    return _compile_cached(text, features, any_type)


def check_expr_text(text: str) -> None:
    """The limits on an expression's text alone (sentinel/promql/limits.py), without parsing."""
    check_text(text, _masked(text))


# Prometheus 2.x's name for double_exponential_smoothing (renamed in 3.0); the
# parser knows only the new name, so the old one is renamed before parsing.
_HOLT_WINTERS = re.compile(r"\bholt_winters(\s*\()")


def _rename_holt_winters(text: str) -> str:
    masked = _masked(text)
    out, last = [], 0
    for m in _HOLT_WINTERS.finditer(masked):
        out += [text[last:m.start()], "double_exponential_smoothing", m.group(1)]
        last = m.end()
    return "".join(out) + text[last:]


def _for_parser(text: str, features: frozenset[str] = NONE) -> str:
    """The text as promql-parser reads it the way Prometheus reads the original.

    Errors are located in the original text, so the rewrites may move offsets.
    """
    if "holt_winters" in text:
        text = _rename_holt_winters(text)
    if "`" in text:
        text = _raw_strings_quoted(text)
    if "info" in text:
        text = info.mark_selectors(text, _masked(text))
    if EXTENDED_RANGE in features and ("anchored" in text or "smoothed" in text):
        text = extended.mark(text, _masked(text))
    return text




def _raw_strings_quoted(text: str) -> str:
    """Backtick (raw) strings as double-quoted ones with the same value.

    The parser refuses a backslash it does not know inside a raw string
    (`\\d`, `\\pL`), where Prometheus keeps every character: the way regexes
    are usually written.
    """
    def quoted(m: re.Match[str]) -> str:
        lit = m.group(0)
        if lit[0] != "`":
            return lit
        body = lit[1:-1].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{body}"'

    return _STRING_LITERAL.sub(quoted, text)


@lru_cache(maxsize=1024)
def _compile_cached(text: str, features: frozenset[str], any_type: bool = False) -> n.Expr:
    check_expr_text(text)
    _check_at_values(text, DURATION_EXPR in features)
    try:
        return _compile(text, features, any_type)
    except PromQLError:
        raise
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - the binding panics (pyo3 PanicException)
        # promql-parser is Rust: a panic surfaces as a BaseException that is not an
        # Exception, and would end `sentinel run` or a reload. Any failure of the
        # parser or of reading its objects is a parse error of this expression.
        raise PromQLError(f"parse error: the expression parser failed: {_one_line(exc)}",
                          0) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _compile(text: str, features: frozenset[str], any_type: bool = False) -> n.Expr:
    try:
        parsed, stand_ins = parse_with_stand_ins(pp.parse, _for_parser(text, features), text)
    except ValueError as exc:
        raise _parse_error(text, str(exc)) from None
    # Quoted (UTF-8) names, `{"my.metric", "a.b"="x"}`, are Prometheus 3 syntax: the
    # parser reads them as matchers on those names.
    expr = _Compiler(text, stand_ins, features).convert(parsed)
    kind = n.value_type(expr)
    if kind not in (n.VECTOR, n.SCALAR) and not any_type:
        raise PromQLError(f"expression must return an instant vector or a scalar, not a {kind}", 0)
    return expr


# An `@` timestamp: sign, number (hex or decimal), and any unit letters after it.
_AT_VALUE = re.compile(r"@\s*([+-]?)\s*(0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
                       r"([A-Za-z]*)")
_DURATION_UNIT = re.compile(r"(?:ms|[smhdwy])(?:\d|$)")
# Prometheus 2.42's bound (parser.setTimestamp): |t| must be below 2^63 seconds.
_AT_LIMIT = 2**63


def _check_at_values(text: str, durations: bool = False) -> None:
    """Reject `@` values the binding mishandles, before it sees them, with their position.

    promql-parser panics (a Rust panic, not an Exception) when a negative `@`
    time is read back, saturates huge ones at 2^64 ms, and takes a duration
    (`@ 5m`) that Prometheus rejects. Prometheus accepts negative times; no
    sample is ever stored before 1970, so Sentinel refuses them as unsupported.
    """
    for m in _AT_VALUE.finditer(_masked(text)):
        sign, number, unit = m.groups()
        if unit and _DURATION_UNIT.match(unit) and not durations:
            # Prometheus 3 reads `@ 1m40s` as 100 s behind promql-duration-expr (so does
            # the parser); without it, as Prometheus 2, it is an error.
            raise PromQLError(f'parse error: unexpected duration "{number}{unit}" in @, '
                              "expected timestamp", m.start(2))
        value = int(number, 16) if number[:2] in ("0x", "0X") else float(number)
        if value >= _AT_LIMIT:
            raise PromQLError(f"parse error: timestamp out of bounds for @ modifier: "
                              f"{sign}{number}", m.start(2))
        if sign == "-" and value > 0:
            raise PromQLError("a negative @ timestamp is not supported by Sentinel's engine",
                              m.start())


def _quoted_name(text: str) -> int | None:
    """Offset of a string used as a name inside `{...}` (Prometheus 3 syntax), if any.

    In 2.x a string inside braces only follows a matcher operator; one right
    after `{` or `,` is a quoted name.
    """
    depth, prev, i = 0, "", 0
    while i < len(text):
        c = text[i]
        lit = _STRING_LITERAL.match(text, i) if c in "\"'`#" else None
        if lit is not None:
            if depth and prev in ("{", ",") and c != "#":
                return i
            i = lit.end()
            prev = "s"
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        if not c.isspace():
            prev = c
        i += 1
    return None


def _masked(text: str) -> str:
    """The text with string literals and comments blanked, so token searches skip them."""
    return _STRING_LITERAL.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 1), text)


def _find(text: str, pattern: str) -> int | None:
    m = re.search(pattern, _masked(text))
    return m.start() if m else None


def _parse_error(text: str, message: str) -> PromQLError:
    """The parser's error, with a position where one can be found."""
    m = re.search(r"unknown function with name '([A-Za-z_:][A-Za-z0-9_:]*)'", message)
    if m:
        return PromQLError(f"parse error: {message}",
                           _find(text, rf"\b{re.escape(m.group(1))}\s*\("))
    if message.startswith("illegal regex for "):  # refused by RE2 too: not reached
        return PromQLError(f"parse error: {message}", matcher_position(text, message[18:]))
    return PromQLError(f"parse error: {message}", None)


def _ms(delta: timedelta | None) -> int:
    if delta is None:
        return 0
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


class _Compiler:
    def __init__(self, text: str, stand_ins: dict[str, str],
                 features: frozenset[str] = NONE) -> None:
        self.text = text
        self.stand_ins = stand_ins  # regexes the parser saw as stand-ins (regexcheck)
        self.features = features

    def experimental(self, name: str, pattern: str) -> None:
        """Refuse an experimental function or aggregation unless its flag is on."""
        if name in EXPERIMENTAL_FUNCTION_NAMES and EXPERIMENTAL_FUNCTIONS not in self.features:
            raise PromQLError(f"parse error: {name}() is experimental: enable the "
                              f"{EXPERIMENTAL_FUNCTIONS} feature", _find(self.text, pattern))

    def reject(self, what: str, pattern: str) -> PromQLError:
        position = _find(self.text, pattern)
        return PromQLError(f"{what} is not supported by Sentinel's engine", position)

    def convert(self, e: object) -> n.Expr:
        if isinstance(e, pp.NumberLiteral):
            return n.NumberLiteral(float(e.val))
        if isinstance(e, pp.StringLiteral):
            return n.StringLiteral(e.val)
        if isinstance(e, pp.ParenExpr):
            return n.Paren(self.convert(e.expr))
        if isinstance(e, pp.UnaryExpr):
            return n.Negate(self.convert(e.expr))
        if isinstance(e, pp.VectorSelector):
            return self.selector(e)
        if isinstance(e, pp.MatrixSelector):
            return n.MatrixSelector(self.selector(e.vector_selector), _ms(e.range))
        if isinstance(e, pp.Call):
            return self.call(e)
        if isinstance(e, pp.AggregateExpr):
            return self.aggregate(e)
        if isinstance(e, pp.BinaryExpr):
            return self.binary(e)
        if isinstance(e, pp.SubqueryExpr):
            return n.Subquery(self.convert(e.expr), _ms(e.range), _ms(e.step), _ms(e.offset),
                              self.at(e.at))
        raise PromQLError(f"unsupported expression {type(e).__name__}", None)

    @staticmethod
    def at(at: object) -> n.At:
        if at is None:
            return None
        kind = _enum_name(at.type)  # type: ignore[attr-defined]
        if kind in ("Start", "End"):
            return n.AT_START if kind == "Start" else n.AT_END
        # Read the printed value ("@ 1234.500"), never `at.at`: that converts to a
        # datetime and panics before 1970, overflows after 9999.
        printed = str(at).removeprefix("@").strip()
        try:
            return int(Decimal(printed) * 1000)
        except (InvalidOperation, ValueError):
            raise PromQLError(f"parse error: unreadable @ modifier {printed!r}", None) from None

    def selector(self, e: pp.VectorSelector) -> n.VectorSelector:
        if e.matchers.or_matchers:
            raise self.reject("`or` inside a label selector", r"\{[^}]*?\bor\b")
        matchers = []
        if e.name:
            matchers.append(Matcher(METRIC_NAME, "=", e.name))
        for m in e.matchers.matchers:
            value = self.stand_ins.get(m.value, m.value)
            try:
                # Prometheus 3: `.` in a matcher's regex matches a newline too.
                matchers.append(Matcher(m.name, _MATCH_OPS[_enum_name(m.op)], value,
                                        dotall=True))
            except RegexError as exc:
                raise regex_error(self.text, value, exc) from None
        if self.stand_ins and not e.name and all(m.matches("") for m in matchers):
            # The parser judged the stand-in, which never matches "": judge the real regex.
            raise PromQLError("parse error: vector selector must contain at least one "
                              "non-empty matcher", _find(self.text, r"\{"))
        extend = ""
        for kind, mark in extended.MARKS.items():
            if any(m.name == mark for m in matchers):
                extend = kind
                matchers = [m for m in matchers if m.name != mark]
        return n.VectorSelector(tuple(matchers), _ms(e.offset), self.at(e.at), extend)

    def call(self, e: pp.Call) -> n.Call:
        name = e.func.name
        if name not in SUPPORTED_FUNCTIONS:
            raise self.reject(f"function {name}()", rf"\b{re.escape(name)}\s*\(")
        self.experimental(name, rf"\b{re.escape(name)}\s*\(")
        returns = n.SCALAR if e.func.return_type == pp.ValueType.Scalar else n.VECTOR
        args = tuple(self.convert(a) for a in e.args)
        if name == "info" and len(args) > 1 and isinstance(args[1], n.VectorSelector):
            sel = args[1]
            kept = tuple(m for m in sel.matchers if m.name != info.INFO_MARK)
            args = (args[0], n.VectorSelector(kept, sel.offset_ms, sel.at))
        if name == "label_replace" and isinstance(args[-1], n.StringLiteral):
            self.check_label_replace(args[-1].value)
        return n.Call(name, args, returns)

    def check_label_replace(self, regex: str) -> None:
        """A regex RE2 refuses fails every evaluation in Prometheus: refuse it at load."""
        try:
            label_replace_regex(regex)
        except PromQLError as e:
            raise PromQLError(e.message, matcher_position(self.text, regex)) from None

    def aggregate(self, e: pp.AggregateExpr) -> n.Aggregate:
        op = str(e.op)
        if op not in SUPPORTED_AGGREGATIONS:
            raise self.reject(f"aggregation {op}", rf"\b{re.escape(op)}\b")
        self.experimental(op, rf"\b{re.escape(op)}\b")
        grouping: tuple[str, ...] = ()
        without = False
        if e.modifier is not None:
            grouping = tuple(e.modifier.labels)
            without = e.modifier.type == pp.AggModifierType.Without
        param = self.convert(e.param) if e.param is not None else None
        return n.Aggregate(op, self.convert(e.expr), param, grouping, without)

    def binary(self, e: pp.BinaryExpr) -> n.Binary:
        op = str(e.op)
        mod = e.modifier
        if mod is None:
            card = "many-to-many" if op in ("and", "or", "unless") else "one-to-one"
            matching = n.Matching(card, False, ())
            return n.Binary(op, self.convert(e.lhs), self.convert(e.rhs), False, matching)
        fill = mod.fill_values
        fills: tuple[float | None, float | None] = (None, None)
        if fill is not None and (fill.lhs is not None or fill.rhs is not None):
            if FILL_MODIFIERS not in self.features:
                raise PromQLError(f"parse error: fill modifiers are experimental: enable the "
                                  f"{FILL_MODIFIERS} feature",
                                  _find(self.text, r"\bfill(_left|_right)?\b"))
            fills = (fill.lhs, fill.rhs)
        on = mod.matching is not None and mod.matching.type == pp.LabelModifierType.Include
        labels = tuple(mod.matching.labels) if mod.matching is not None else ()
        include = tuple(mod.group_labels or ())
        matching = n.Matching(_CARDINALITY[_enum_name(mod.card)], on, labels, include, *fills)
        return n.Binary(op, self.convert(e.lhs), self.convert(e.rhs), mod.return_bool, matching)
