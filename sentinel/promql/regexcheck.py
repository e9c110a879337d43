"""Matcher regexes between promql-parser (Rust's regex crate) and Go's RE2 (Prometheus's).

promql-parser validates `=~`/`!~` regexes with Rust's `regex` crate, which
refuses a few patterns Go accepts (`[[]`, `\\101`, `\\Q[\\E`) and names no
position. Sentinel matches with RE2 (`sentinel.re2match`), so RE2 decides:
a pattern RE2 refuses becomes promtool's error at the matcher's position; a
pattern only Rust refuses is handed to the parser as a stand-in literal and
put back when the selector is built.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import TypeVar

from sentinel.promql.errors import PromQLError
from sentinel.re2match import RegexError, anchored

# String literals (and comments, which are skipped) in PromQL text.
STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|#[^\n]*')
_ILLEGAL_REGEX = "illegal regex for "
_STAND_IN = "__sentinel_re2_stand_in_{}__"
_MAX_STAND_INS = 32

T = TypeVar("T")


def unquote(token: str) -> str | None:
    """The value of a PromQL string literal (Go's escapes are Python's), None if it has none."""
    if token[0] == "`":
        return token[1:-1]
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def matcher_position(text: str, value: str) -> int | None:
    """Offset of the matcher (else the string) whose value is `value`, where promtool points."""
    for lit in STRING_LITERAL.finditer(text):
        if lit.group(0)[0] == "#" or unquote(lit.group(0)) != value:
            continue
        before = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*[=!]~\s*$", text[:lit.start()])
        return before.start() if before else lit.start()
    return None


def regex_error(text: str, pattern: str, error: RegexError) -> PromQLError:
    """promtool's "parse error: error parsing regexp: ..." at the matcher's position."""
    return PromQLError(f"parse error: {error} (regex: {pattern})", matcher_position(text, pattern))


def parse_with_stand_ins(parse: Callable[[str], T], text: str,
                         original: str) -> tuple[T, dict[str, str]]:
    """`parse(text)`, with stand-ins for the regexes only the parser's Rust regex refuses.

    Returns the parsed tree and {stand-in: pattern}. A ValueError from the
    parser propagates unless it is about a regex RE2 accepts; a regex RE2
    refuses raises PromQLError located in `original`.
    """
    stand_ins: dict[str, str] = {}
    while True:
        try:
            return parse(text), stand_ins
        except ValueError as exc:
            message = str(exc)
            if not message.startswith(_ILLEGAL_REGEX) or len(stand_ins) >= _MAX_STAND_INS:
                raise
            pattern = message[len(_ILLEGAL_REGEX):]
            try:
                anchored(pattern)
            except RegexError as e:
                raise regex_error(original, pattern, e) from None
            stand_in = _STAND_IN.format(len(stand_ins))
            replaced = _replace_literal(text, pattern, f'"{stand_in}"')
            if replaced == text:
                raise
            stand_ins[stand_in] = pattern
            text = replaced


def _replace_literal(text: str, value: str, replacement: str) -> str:
    def one(m: re.Match[str]) -> str:
        lit = m.group(0)
        return replacement if lit[0] != "#" and unquote(lit) == value else lit

    return STRING_LITERAL.sub(one, text)
