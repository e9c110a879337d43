"""Prometheus 3's duration expressions, folded into plain durations before parsing.

Behind the `promql-duration-expr` feature, as in Prometheus, ranges, subquery
steps and offsets may be arithmetic: `x[5m+1m]`, `x[1h:step()*2]`,
`x offset (1h*2)`, `x offset min_of(step(), 1s)`. promql-parser reads only
plain durations, so each such expression is evaluated here (numbers are
seconds; `+ - * / % ^`, `^` binding tighter than a sign; `step()`, `range()`,
`min_of(a, b)`, `max_of(a, b)`) and written back as milliseconds. An offset
takes one operand (a literal, a parenthesised expression or a call, with an
optional sign): `x offset 100 + 2` is `(x offset 100) + 2`, as Prometheus reads it.
"""

from __future__ import annotations

import math
import re

from sentinel.promql.errors import PromQLError
from sentinel.promql.regexcheck import STRING_LITERAL

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
          "y": 31536000.0}
_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+(?:ms|[smhdwy]))+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)"
                    r"|(?P<name>[A-Za-z_]+)|(?P<op>[-+*/%^(),]))")
_PLAIN = re.compile(r"^\s*[-+]?\s*(?:(?:\d+(?:ms|[smhdwy]))+|\d+)\s*$")
_OFFSET = re.compile(r"\boffset\b", re.IGNORECASE)


def rewrite(text: str, step_ms: int, range_ms: int) -> str:
    """The expression with every duration expression replaced by its value in ms."""
    masked = STRING_LITERAL.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 1), text)
    edits: list[tuple[int, int, str]] = []
    for start, end in _brackets(masked):
        pos = start
        for part in _split_top(masked[start:end], ":"):
            if part.strip() and not _PLAIN.match(part):
                edits.append((pos, pos + len(part), _ms(_Eval(part, step_ms, range_ms).run())))
            pos += len(part) + 1
    for m in _OFFSET.finditer(masked):
        span = _offset_operand(masked, m.end())
        if span is not None and not _PLAIN.match(masked[span[0]:span[1]]):
            value = _ms(_Eval(masked[span[0]:span[1]], step_ms, range_ms).run(), signed=True)
            # The parser refuses `offset 0ms`: an offset of 0 is no offset.
            edits.append((m.start(), span[1], "" if value == "0ms" else f"offset {value}"))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _ms(seconds: float, signed: bool = False) -> str:
    if math.isnan(seconds) or math.isinf(seconds):
        raise PromQLError(f"parse error: duration expression gives {seconds}")
    ms = int(seconds * 1000)
    if not signed and ms <= 0:
        raise PromQLError("parse error: duration must be greater than 0")
    return f"{ms}ms"


def _brackets(masked: str) -> list[tuple[int, int]]:
    """(start, end) of the text inside each `[...]` outside label braces."""
    out, depth, i = [], 0, 0
    while i < len(masked):
        c = masked[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif c == "[" and depth == 0:
            j = masked.find("]", i)
            if j < 0:
                break
            out.append((i + 1, j))
            i = j
        i += 1
    return out


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for c in text:
        depth += (c == "(") - (c == ")")
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    return [*parts, cur]


def _offset_operand(masked: str, i: int) -> tuple[int, int] | None:
    """The span of the operand after `offset`: a sign, then a literal, (...) or a call."""
    start = i
    while i < len(masked) and masked[i].isspace():
        i += 1
    if i < len(masked) and masked[i] in "+-":
        i += 1
        while i < len(masked) and masked[i].isspace():
            i += 1
    m = re.compile(r"[A-Za-z_]+\s*\(|\(|(?:\d+(?:ms|[smhdwy]))+|\d+\.?\d*").match(masked, i)
    if m is None:
        return None
    if not m.group(0).endswith("("):
        return start, m.end()
    depth, j = 0, m.end() - 1
    while j < len(masked):
        depth += (masked[j] == "(") - (masked[j] == ")")
        if depth == 0:
            return start, j + 1
        j += 1
    return None


class _Eval:
    """Recursive descent over one duration expression; values in seconds."""

    def __init__(self, text: str, step_ms: int, range_ms: int) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise PromQLError(f"parse error: unexpected {text[pos:].strip()[:10]!r} in "
                                  f"duration expression {text.strip()!r}")
            kind = m.lastgroup or "op"
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.text = text.strip()
        self.step = step_ms / 1000
        self.range = range_ms / 1000

    def run(self) -> float:
        value = self.sum()
        if self.i != len(self.tokens):
            raise PromQLError(f"parse error: unexpected {self.tokens[self.i][1]!r} in duration "
                              f"expression {self.text!r}")
        return value

    def peek(self) -> str:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else ""

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.tokens) or (want is not None and self.peek() != want):
            raise PromQLError(f"parse error: incomplete duration expression {self.text!r}")
        self.i += 1
        return self.tokens[self.i - 1]

    def sum(self) -> float:
        value = self.product()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            rhs = self.product()
            value = value + rhs if op == "+" else value - rhs
        return value

    def product(self) -> float:
        value = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.take()[1]
            rhs = self.unary()
            if op == "*":
                value *= rhs
            elif rhs == 0:
                raise PromQLError(f"parse error: division by zero in {self.text!r}")
            else:
                value = value / rhs if op == "/" else math.fmod(value, rhs)
        return value

    def unary(self) -> float:
        if self.peek() in ("+", "-"):
            sign = -1.0 if self.take()[1] == "-" else 1.0
            return sign * self.unary()
        return self.power()

    def power(self) -> float:
        base = self.atom()
        if self.peek() == "^":
            self.take()
            return float(base ** self.unary())
        return base

    def atom(self) -> float:
        kind, tok = self.take()
        if tok == "(":
            value = self.sum()
            self.take(")")
            return value
        if kind == "num":
            if tok[-1].isdigit() or tok[-1] == ".":
                return float(tok)
            return sum(float(a) * _UNITS[u] for a, u in re.findall(r"(\d+)(ms|[smhdwy])", tok))
        if kind == "name":
            return self.call(tok.lower())
        raise PromQLError(f"parse error: unexpected {tok!r} in duration expression {self.text!r}")

    def call(self, name: str) -> float:
        self.take("(")
        if name in ("step", "range"):
            self.take(")")
            return self.step if name == "step" else self.range
        if name in ("min_of", "max_of"):
            a = self.sum()
            self.take(",")
            b = self.sum()
            self.take(")")
            return min(a, b) if name == "min_of" else max(a, b)
        raise PromQLError(f"parse error: unknown function {name}() in a duration expression")
