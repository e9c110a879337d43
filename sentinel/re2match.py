"""Regular expressions as Prometheus and Alertmanager run them: Go's RE2, in linear time.

Label matchers (`=~`, `!~`), `label_replace`, silences, routes and
inhibition rules are compiled by Prometheus and Alertmanager as
`regexp.Compile("^(?:" + re + ")$")`: Go's RE2 syntax (POSIX classes such as
`[[:alnum:]]`, `\\d`, `\\pL`, `(?i)`; no look-arounds, no backreferences) and
matching in time linear in the input, so a pattern like `(.*.*)*X` cannot
hold the daemon for minutes the way Python's backtracking `re` does.

This module compiles through Google's RE2 (the `google-re2` binding) and
refuses, with Go's wording and the offset in the pattern, what Go 1.19's
`regexp` (Prometheus 2.42's) refuses, including the two constructs C++ RE2
accepts and Go does not (`\\C`, `(?<name>...)`). Compiled patterns are
cached; an anchored pattern also caches its answers per value, because the
same label values are matched on every evaluation (Prometheus's
FastRegexMatcher saves the same work with literal prefilters).

Sentinel's own patterns (log signatures, config syntax) keep Python's `re`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import lru_cache

import re2
from re2 import _re2  # the pybind11 RE2 class: one call per match, no generator or Match object

__all__ = ["GoRegex", "RegexError", "anchored", "unanchored"]

_ANCHOR = "^(?:"  # Prometheus's wrapping; its length shifts error offsets
_ANCHOR_DOTALL = "^(?s:"  # Prometheus 3's, for PromQL matchers and label_replace
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)
_MAX_ANSWERS = 10_000  # cached answers per pattern before its cache starts over
# Answers cached over all patterns: a client sending many distinct regexes over many
# series must not grow memory without bound (about 100 bytes an answer).
_ANSWER_BUDGET = 200_000
_remembered = [0]  # answers held now, over all patterns (approximate across threads)
# A pattern that is only literal alternatives ("abort|error"), the commonest in rules:
# a set lookup, as Prometheus's FastRegexMatcher does for it.
_LITERALS = re.compile(r"[A-Za-z0-9_:\- ,/=@%]*(?:\|[A-Za-z0-9_:\- ,/=@%]*)*")

# C++ RE2's error texts, worded as Go's regexp/syntax words them.
_GO_WORDING = {
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "missing argument to repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid UTF-8": "invalid UTF-8",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}


class RegexError(ValueError):
    """A pattern Go's RE2 refuses.

    `reason` is Go's text ("invalid or unsupported Perl syntax: `(?=`"),
    `offset` the character offset in `pattern` where the refused part starts.
    `str()` is what Prometheus prints: "error parsing regexp: <reason>".
    """

    def __init__(self, pattern: str, reason: str, offset: int) -> None:
        super().__init__(f"error parsing regexp: {reason}")
        self.pattern = pattern
        self.reason = reason
        self.offset = offset


def _options(capture: bool) -> re2.Options:
    opts = re2.Options()
    opts.log_errors = False  # RE2 would print every refused pattern to stderr
    opts.never_capture = not capture
    return opts


_MATCH_ONLY = _options(capture=False)
_CAPTURE = _options(capture=True)


def _encode(text: str) -> bytes:
    # Lone surrogates cannot come from valid UTF-8 input, but must not raise here.
    return text.encode("utf-8", "surrogatepass")


def _go_only_refusal(pattern: str) -> tuple[str, int] | None:
    """What Go 1.19 refuses although C++ RE2 accepts it: `\\C` and `(?<`, outside `\\Q..\\E`."""
    i, n, in_class, class_body = 0, len(pattern), False, 0
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt == "C":
                return "invalid escape sequence: `\\C`", i
            if nxt == "Q" and not in_class:
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            i += 2
        elif in_class:
            if pattern.startswith("[:", i) and pattern.find(":]", i + 2) >= 0:
                i = pattern.find(":]", i + 2) + 2
                continue
            if c == "]" and i > class_body:
                in_class = False
            i += 1
        elif c == "[":
            in_class, i = True, i + 1
            i += 1 if pattern[i:i + 1] == "^" else 0
            class_body = i  # a "]" right here is a literal, as in Go
        elif pattern.startswith("(?<", i):
            return "invalid or unsupported Perl syntax: `(?<`", i
        else:
            i += 1
    return None


def _refusal(source: str, error: bytes | str, shift: int, pattern: str) -> RegexError:
    text = error.decode("utf-8", "replace") if isinstance(error, bytes) else error
    code, sep, arg = text.partition(": ")
    for cxx, go in _GO_WORDING.items():
        if text.startswith(cxx):
            code, arg = go, text[len(cxx):].removeprefix(": ")
            sep = ": "
            break
    reason = f"{code}: `{arg}`" if sep else code
    at = source.find(arg) - shift if arg else -1
    return RegexError(pattern, reason, min(max(at, 0), len(pattern)))


class GoRegex:
    """One compiled pattern. Not built directly: use `anchored()` or `unanchored()`."""

    __slots__ = ("pattern", "_source", "_match", "_capture", "_answers", "_literals")

    def __init__(self, pattern: str, source: str, shift: int, remember: bool) -> None:
        self._answers: dict[str, bool] | None = None  # first: __del__ runs if __init__ raises
        refused = _go_only_refusal(pattern)
        if refused is not None:
            raise RegexError(pattern, refused[0], refused[1])
        encoded = _encode(source)
        self._match = _re2.RE2(encoded, _MATCH_ONLY)
        if not self._match.ok():
            raise _refusal(source, self._match.error(), shift, pattern)
        self._capture: _re2.RE2 | None = None  # built on first use: label_replace, templates
        self._source = encoded
        self.pattern = pattern
        # Label values repeat every evaluation; template texts need not, and may be long.
        self._answers = {} if remember else None
        self._literals: frozenset[str] | None = None
        if remember and _LITERALS.fullmatch(pattern):
            self._literals = frozenset(pattern.split("|"))

    def __del__(self) -> None:
        if self._answers and _remembered:  # give the budget back (not at interpreter exit)
            _remembered[0] -= len(self._answers)

    def _capturing(self) -> _re2.RE2:
        if self._capture is None:
            self._capture = _re2.RE2(self._source, _CAPTURE)
        return self._capture

    @property
    def groups(self) -> int:
        """How many capturing groups the pattern has."""
        return int(self._capturing().NumberOfCapturingGroups())

    @property
    def group_index(self) -> dict[str, int]:
        """Named groups: name → group number."""
        named = self._capturing().NamedCapturingGroups()
        return {(k.decode() if isinstance(k, bytes) else k): v for k, v in named}

    def matches(self, value: str) -> bool:
        """Whether the pattern matches `value` (for an anchored pattern: all of it)."""
        if self._literals is not None:
            return value in self._literals
        answers = self._answers
        if answers is not None:
            hit = answers.get(value)
            if hit is not None:
                return hit
        data = _encode(value)
        hit = self._match.Match(_UNANCHORED, data, 0, len(data))[0] != _NO_MATCH
        if answers is not None and _remembered[0] < _ANSWER_BUDGET:
            if len(answers) >= _MAX_ANSWERS:
                _remembered[0] -= len(answers)
                answers.clear()
            answers[value] = hit
            _remembered[0] += 1
        return hit

    def tester(self) -> Callable[[str], bool]:
        """The fastest callable answering `matches`: a set's own lookup for literal alternatives."""
        return self._literals.__contains__ if self._literals is not None else self.matches

    def groups_of(self, value: str) -> list[str | None] | None:
        """The first match's text and groups ([0] is the whole match), or None: no match."""
        for groups, _, _ in self.find_all(value, limit=1):
            return groups
        return None

    def find_all(self, text: str, limit: int = -1) -> Iterator[tuple[list[str | None], int, int]]:
        """Go's successive non-overlapping matches: (groups, start, end), offsets in characters.

        An empty match right after a previous match is skipped, as Go's
        `allMatches` does (Python's `re.sub` keeps it).
        """
        data = _encode(text)
        rx = self._capturing()
        pos, end, prev_end, found = 0, len(data), -1, 0
        while pos <= end and found != limit:
            spans = rx.Match(_UNANCHORED, data, pos, end)
            start, stop = spans[0]
            if start < 0:
                return
            accept = True
            if stop == pos:  # empty match: step over one character
                accept = start != prev_end
                pos += _re2.CharLenToBytes(data, pos, 1) if pos < end else 1
            else:
                pos = stop
            prev_end = stop
            if accept:
                found += 1
                groups = [None if s < 0 else data[s:e].decode("utf-8", "surrogatepass")
                          for s, e in spans]
                yield groups, _char_offset(data, start), _char_offset(data, stop)


def _char_offset(data: bytes, byte_offset: int) -> int:
    return _re2.BytesToCharLen(data, 0, byte_offset)


@lru_cache(maxsize=4096)
def anchored(pattern: str, dotall: bool = False) -> GoRegex:
    """`pattern` as Prometheus and Alertmanager compile a matcher: `^(?:pattern)$`.

    `dotall`: as Prometheus 3 compiles PromQL's (`^(?s:pattern)$`: `.` matches a
    newline too). RegexError when Go's RE2 refuses it. Cached.
    """
    anchor = _ANCHOR_DOTALL if dotall else _ANCHOR
    return GoRegex(pattern, f"{anchor}{pattern})$", len(anchor), remember=True)


@lru_cache(maxsize=512)
def unanchored(pattern: str) -> GoRegex:
    """`pattern` as Go's `regexp.Compile` takes it (template functions `match`, `reReplaceAll`)."""
    return GoRegex(pattern, pattern, 0, remember=False)
