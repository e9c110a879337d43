"""Label matchers as Alertmanager writes them: `name="value"`, `name!=v`, `name=~re`, `name!~re`.

Used by routes, inhibition rules and silences. Regexes are anchored (the
whole value must match), as in Alertmanager. A missing label matches as "".
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sentinel.model import Labels, label_value

_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$')


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
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def matches(self, labels: Labels) -> bool:
        """Whether the label set satisfies this condition."""
        actual = label_value(labels, self.name)
        if self.op is MatchOp.EQ:
            return actual == self.value
        if self.op is MatchOp.NE:
            return actual != self.value
        assert self.pattern is not None
        hit = self.pattern.fullmatch(actual) is not None
        return hit if self.op is MatchOp.RE else not hit

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'

    def as_list(self) -> list[str]:
        """[name, op, value], as stored in the database."""
        return [self.name, str(self.op), self.value]


def make_matcher(name: str, op: str, value: str) -> Matcher:
    """A Matcher from its parts; ValueError for a bad operator or regex."""
    mop = MatchOp(op)
    pattern = None
    if mop in (MatchOp.RE, MatchOp.NRE):
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regex in matcher {name}{op}{value!r}: {exc}") from None
    return Matcher(name, mop, value, pattern)


def parse_matcher(text: str) -> Matcher:
    """Parse `name="value"` (quotes optional); ValueError says what is wrong."""
    m = _MATCHER.match(text)
    if not m:
        raise ValueError(f"not a matcher (expected name=value, name!=value, name=~regex or "
                         f"name!~regex): {text!r}")
    name, op, value = m.groups()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"')
    return make_matcher(name, op, value)


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    """Parse every matcher; the first bad one raises ValueError."""
    return tuple(parse_matcher(t) for t in texts)


def from_lists(rows: Iterable[Sequence[str]]) -> tuple[Matcher, ...]:
    """Matchers from their stored [name, op, value] form."""
    return tuple(make_matcher(n, o, v) for n, o, v in rows)


def matches_all(matchers: Iterable[Matcher], labels: Labels) -> bool:
    """True when every matcher matches (an empty list matches everything)."""
    return all(m.matches(labels) for m in matchers)
