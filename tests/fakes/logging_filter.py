"""Enough of Cloud Logging's query language for the fake `entries:list`.

Supported: comparisons `FIELD OP VALUE` with OP in `= != < <= > >= :`, on
`timestamp`, `receiveTimestamp`, `severity`, `logName`, `insertId`,
`textPayload`, `resource.type`, `resource.labels.*`, `labels.*` and
`jsonPayload.*`; `AND` (or juxtaposition), `OR`, `NOT` / `-`, parentheses.
As in the real language, OR binds tighter than AND ("a OR b AND c" is
"(a OR b) AND c"), `:` is a case-insensitive "has", and severities compare
by rank. Anything else (global text restrictions, functions, other fields)
raises `FilterError`, which the server answers with 400 INVALID_ARGUMENT as
the real API does for a filter it cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Entry = dict[str, Any]
Predicate = Callable[[Entry], bool]

SEVERITY_RANK = {
    "DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400,
    "ERROR": 500, "CRITICAL": 600, "ALERT": 700, "EMERGENCY": 800,
}
_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>!=|<=|>=|[=<>:()\-])|(?P<word>[A-Za-z0-9_.@/*+]+))'
)
_TIME_FIELDS = ("timestamp", "receiveTimestamp")
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$"
)


class FilterError(ValueError):
    """The filter is not valid (or uses what the fake does not implement)."""


def parse_rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 timestamp."""
    m = _RFC3339.match(text.strip())
    if m is None:
        raise FilterError(f"invalid timestamp {text!r}")
    day, clock, frac, zone = m.groups()
    try:
        base = datetime.fromisoformat(f"{day}T{clock}{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        raise FilterError(f"invalid timestamp {text!r}") from None
    return int(base.astimezone(UTC).timestamp()) * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


def compile_filter(text: str) -> Predicate:
    """A predicate over entry dicts; an empty filter matches everything."""
    tokens = [(m.lastgroup or "", m.group(m.lastgroup or 0)) for m in _tokens(text)]
    if not tokens:
        return lambda _e: True
    parser = _Parser(tokens)
    pred = parser.conjunction()
    if parser.pos != len(tokens):
        raise FilterError(f"unexpected {tokens[parser.pos][1]!r}")
    return pred


def _tokens(text: str) -> list[re.Match[str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise FilterError(f"cannot parse filter at offset {pos}")
        out.append(m)
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            raise FilterError("filter ends early")
        self.pos += 1
        return tok

    def conjunction(self) -> Predicate:
        parts = [self.disjunction()]
        while (tok := self._peek()) is not None and tok[1] != ")":
            if tok == ("word", "AND"):
                self.pos += 1
            parts.append(self.disjunction())
        return lambda e: all(p(e) for p in parts)

    def disjunction(self) -> Predicate:
        parts = [self.unary()]
        while self._peek() == ("word", "OR"):
            self.pos += 1
            parts.append(self.unary())
        return lambda e: any(p(e) for p in parts)

    def unary(self) -> Predicate:
        if self._peek() in (("word", "NOT"), ("op", "-")):
            self.pos += 1
            inner = self.unary()
            return lambda e: not inner(e)
        if self._peek() == ("op", "("):
            self.pos += 1
            inner = self.conjunction()
            if self._take() != ("op", ")"):
                raise FilterError("missing )")
            return inner
        return self.comparison()

    def comparison(self) -> Predicate:
        kind, field = self._take()
        if kind != "word":
            raise FilterError(f"expected a field name, got {field!r}")
        op_tok = self._peek()
        if op_tok is None or op_tok[0] != "op" or op_tok[1] in "()-":
            raise FilterError(f"global restriction {field!r} is not supported by the fake")
        self.pos += 1
        vkind, raw = self._take()
        if vkind == "op":
            raise FilterError(f"expected a value after {field} {op_tok[1]}")
        value = raw[1:-1].replace('\\"', '"') if vkind == "str" else raw
        return _compare(field, op_tok[1], value)


def _field_getter(field: str) -> Callable[[Entry], Any]:
    path = field.split(".")
    known = (field in (*_TIME_FIELDS, "severity", "logName", "insertId", "textPayload",
                       "resource.type")
             or (len(path) >= 3 and path[:2] == ["resource", "labels"])
             or (len(path) >= 2 and path[0] in ("labels", "jsonPayload")))
    if not known:
        raise FilterError(f"unsupported field {field!r}")

    def get(entry: Entry) -> Any:
        cur: Any = entry
        for i, part in enumerate(path):
            if not isinstance(cur, dict):
                return None
            # Map keys (labels) may contain dots; take the rest of the path as one key.
            rest = ".".join(path[i:])
            if i > 0 and path[i - 1] == "labels" and rest in cur:
                return cur[rest]
            cur = cur.get(part)
        return cur

    return get


def _compare(field: str, op: str, value: str) -> Predicate:
    get = _field_getter(field)
    if field in _TIME_FIELDS:
        if op == ":":
            raise FilterError(f"{field} does not support ':'")
        bound = parse_rfc3339_ns(value)
        return _ordered(lambda e: _ns_or_none(get(e)), op, bound)
    if field == "severity":
        rank = SEVERITY_RANK.get(value.upper(), int(value) if value.isdigit() else None)
        if rank is None:
            raise FilterError(f"unknown severity {value!r}")
        return _ordered(lambda e: SEVERITY_RANK.get(str(get(e) or "DEFAULT").upper(), 0), op, rank)
    needle = value.casefold()
    if op == ":":
        return lambda e: isinstance(get(e), str) and needle in get(e).casefold()
    return _ordered(lambda e: get(e).casefold() if isinstance(get(e), str) else None, op, needle)


def _ns_or_none(value: Any) -> int | None:
    try:
        return parse_rfc3339_ns(value) if isinstance(value, str) else None
    except FilterError:
        return None


def _ordered(get: Callable[[Entry], Any], op: str, bound: Any) -> Predicate:
    compare: dict[str, Callable[[Any, Any], bool]] = {
        "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    }
    fn = compare.get(op)
    if fn is None:
        raise FilterError(f"operator {op!r} not supported here")

    def pred(entry: Entry) -> bool:
        got = get(entry)
        if got is None:
            return op == "!="  # a missing field is "not equal" to anything
        return fn(got, bound)

    return pred
