"""Label matchers as Alertmanager writes them: `name="value"`, `name!=v`, `name=~re`, `name!~re`.

Used by routes, inhibition rules and silences. Regexes are Go's RE2, anchored
(the whole value must match), as in Alertmanager: `sentinel.re2match`. A
missing label matches as "".
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sentinel.model import Labels, label_value
from sentinel.re2match import GoRegex, RegexError, anchored

_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$', re.S)


class MatchOp(enum.StrEnum):
    """The four matcher operators."""

    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label condition. `pattern` is compiled for =~ and !~ (anchored)."""

    name: str
    op: MatchOp
    value: str
    pattern: GoRegex | None = field(default=None, compare=False, repr=False)

    def matches(self, labels: Labels) -> bool:
        """Whether the label set satisfies this condition."""
        actual = label_value(labels, self.name)
        if self.op is MatchOp.EQ:
            return actual == self.value
        if self.op is MatchOp.NE:
            return actual != self.value
        assert self.pattern is not None
        hit = self.pattern.matches(actual)
        return hit if self.op is MatchOp.RE else not hit

    def __str__(self) -> str:
        """Alertmanager's form (openMetricsEscape): `parse_matcher(str(m))` gives `m` back."""
        value = self.value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        return f'{self.name}{self.op}"{value}"'

    def as_list(self) -> list[str]:
        """[name, op, value], as stored in the database."""
        return [self.name, str(self.op), self.value]


def make_matcher(name: str, op: str, value: str) -> Matcher:
    """A Matcher from its parts; ValueError for a bad operator or regex."""
    mop = MatchOp(op)
    pattern = None
    if mop in (MatchOp.RE, MatchOp.NRE):
        try:
            pattern = anchored(value)
        except RegexError as exc:
            raise ValueError(f"invalid regex in matcher {name}{op}{value!r}: {exc} "
                             f"(at char {exc.offset} of the regex)") from None
    return Matcher(name, mop, value, pattern)


def parse_matcher(text: str) -> Matcher:
    """Parse `name="value"` (quotes optional); ValueError says what is wrong."""
    m = _MATCHER.match(text)
    if not m:
        raise ValueError(f"not a matcher (expected name=value, name!=value, name=~regex or "
                         f"name!~regex): {text!r}")
    name, op, raw = m.groups()
    return make_matcher(name, op, _unescape(raw))


def _unescape(raw: str) -> str:
    """A matcher's value as Alertmanager's parser reads it (pkg/labels/parse.go).

    Optional surrounding quotes; `\\n`, `\\"` and `\\\\` are escapes, any other
    backslash is kept (so `"\\d+"` and `"\\\\d+"` are both the regex `\\d+`); a
    bare `"` inside is refused.
    """
    quoted = raw.startswith('"')
    body = raw[1:] if quoted else raw
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append("\n" if nxt == "n" else nxt if nxt in '"\\' else c + nxt)
            i += 2
            continue
        if c == '"':
            if not quoted or i != len(body) - 1:
                raise ValueError(f"matcher value contains unescaped double quote: {raw}")
            quoted = False
        else:
            out.append(c)
        i += 1
    if quoted:
        raise ValueError(f"matcher value is missing its closing double quote: {raw}")
    return "".join(out)


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    """Parse every matcher; the first bad one raises ValueError."""
    return tuple(parse_matcher(t) for t in texts)


def from_lists(rows: Iterable[Sequence[str]]) -> tuple[Matcher, ...]:
    """Matchers from their stored [name, op, value] form."""
    return tuple(make_matcher(n, o, v) for n, o, v in rows)


def matches_all(matchers: Iterable[Matcher], labels: Labels) -> bool:
    """True when every matcher matches (an empty list matches everything)."""
    return all(m.matches(labels) for m in matchers)
