"""A Hyperscan prefilter: one SIMD pass over a block finds the lines that may match.

Hyperscan (Intel's multi-pattern regex engine) compiles every signature
pattern into one database and scans a whole block at once, at several GB/s;
the literal prefilter in `anchors.py` needs one `str.find` pass per anchor.
Hyperscan is optional: where it is not installed (it ships wheels for x86-64
Linux only) or cannot take a pattern, `build_hyperscan_filter` returns None
and the literal prefilter is used.

It is only ever a prefilter. Patterns are compiled with HS_FLAG_PREFILTER (a
superset of the matches, never fewer) and every candidate line is confirmed
by Python's `re`, so the two engines' dialects need agree only on which lines
*can* match. To keep that true:

- only pure-ASCII blocks are scanned (`str.isascii` is O(1)); a block with any
  other character takes the literal path, so Unicode classes and case folding
  never come into it;
- Python's `{,n}` is a quantifier and PCRE's is text, so it becomes `{0,n}`;
- Python's `\\s` also matches \\x1c-\\x1f and PCRE's does not, so `\\s` and `\\S`
  are widened; `\\A` and `\\Z` become `^` and `$` (one line is one string);
- `re.compile` flags other than IGNORECASE, MULTILINE, DOTALL and VERBOSE, and
  any construct Hyperscan rejects, make the whole set fall back.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

try:  # Python 3.11+: the parser moved; sre_parse still works but warns.
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

try:
    import hyperscan
except ImportError:  # pragma: no cover - depends on the platform
    hyperscan = None  # type: ignore[assignment]

_PY_SPACE = r"\s\x1c-\x1f"  # what Python's \s matches in ASCII, as class members
_OPEN_MIN = re.compile(r"\{,[0-9]+\}")


class HyperscanFilter:
    """Candidate lines of an ASCII block, by one Hyperscan scan."""

    def __init__(self, database: Any, exact: tuple[bool, ...] = ()) -> None:
        self._db = database
        self.exact = exact  # per expression: compiled as is, its match ids need no `re`
        self._local = threading.local()  # a scratch may serve one scan at a time

    def candidate_lines(self, block: str) -> list[int]:
        """0-based indexes of the lines of `block` (ASCII) that may match, ascending."""
        data = block.encode("ascii")
        ends: list[int] = []
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._db)
        self._db.scan(data, match_event_handler=_collect, context=ends, scratch=scratch)
        if not ends:
            return []
        out: list[int] = []
        line = 0
        previous = 0
        for end in sorted(set(ends)):
            # A match ending just after a newline (a class like \s took it) ends on that line.
            at = end - 1 if end > 0 and data[end - 1] == 10 else end
            line += data.count(b"\n", previous, at)
            previous = at
            if not out or out[-1] != line:
                out.append(line)
        return out


    def scan_ids(self, block: str | bytes) -> list[tuple[int, int, set[int]]]:
        """For each line of `block` (ASCII) with a match: (line index, offset of a match end, ids).

        The ids are those of the expressions that matched on that line (see
        `build_hyperscan_filter`: expression i is pattern i). The offset lies
        inside the line (or at its end), so the caller can cut the line out of
        the block without splitting it all. Bytes are scanned as they are (a
        reader need not decode what cannot match); the caller answers for the
        lines that are not ASCII (see `SignatureSet.scan_bytes`).
        """
        data = block.encode("ascii") if isinstance(block, str) else block
        hits: list[tuple[int, int]] = []
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._db)
        self._db.scan(data, match_event_handler=_collect_ids, context=hits, scratch=scratch)
        if not hits:
            return []
        hits.sort(key=_end_of)
        out: list[tuple[int, int, set[int]]] = []
        line = 0
        previous = 0
        count = data.count
        for end, pattern_id in hits:
            at = end - 1 if end > 0 and data[end - 1] == 10 else end
            if at != previous:
                line += count(b"\n", previous, at)
                previous = at
            if out and out[-1][0] == line:
                out[-1][2].add(pattern_id)
            else:
                out.append((line, at, {pattern_id}))
        return out


    def serialize(self) -> bytes:
        """The compiled database as bytes (`load_hyperscan_filter` reads them back)."""
        return bytes(hyperscan.dumpb(self._db))


def hyperscan_version() -> str:
    """Which Hyperscan builds the prefilter ("none" when it is not installed)."""
    if hyperscan is None:
        return "none"
    return f"hyperscan {getattr(hyperscan, '__version__', '?')}"


def load_hyperscan_filter(data: bytes | None, exact: Sequence[bool]) -> HyperscanFilter | None:
    """A filter from `HyperscanFilter.serialize` bytes; None without Hyperscan or on bad bytes."""
    if hyperscan is None or data is None:
        return None
    try:
        db = hyperscan.loadb(data, hyperscan.HS_MODE_BLOCK)
    except Exception as exc:  # a cache written by another Hyperscan build, or damaged
        log.info("cached Hyperscan database unusable (%s); compiling", exc)
        return None
    return HyperscanFilter(db, tuple(bool(e) for e in exact))


def _collect(_id: int, _start: int, end: int, _flags: int, ends: list[int]) -> None:
    ends.append(end)


def _collect_ids(pattern_id: int, _start: int, end: int, _flags: int,
                 hits: list[tuple[int, int]]) -> None:
    hits.append((end, pattern_id))


def _end_of(hit: tuple[int, int]) -> int:
    return hit[0]


def build_hyperscan_filter(patterns: Sequence[str],
                           exact: Sequence[bool] = ()) -> HyperscanFilter | None:
    """A filter for these Python patterns, or None when Hyperscan cannot serve them all.

    `exact[i]` true: pattern i is compiled as is (not in prefilter mode), so a
    match id of it needs no confirmation by `re` (see `is_exact`).
    """
    if hyperscan is None or not patterns:
        return None
    wanted = [bool(e) for e in exact] + [False] * (len(patterns) - len(exact))
    translated = [translate(p) for p in patterns]
    if any(t is None for t in translated):
        log.debug("a pattern stays on the literal prefilter: %r",
                  next(p for p, t in zip(patterns, translated, strict=True) if t is None))
        return None
    # An exact compile can fail where prefilter mode succeeds (a construct Hyperscan
    # only approximates): then every pattern is confirmed by `re` instead.
    approximate = [False] * len(patterns)
    for exactness in ((wanted, approximate) if any(wanted) else (approximate,)):
        db = _compile([t for t in translated if t is not None], exactness)
        if db is not None:
            return HyperscanFilter(db, tuple(exactness))
    return None


def _compile(translated: list[tuple[str, bool]], exact: list[bool]) -> Any:
    expressions = [source.encode("ascii", "backslashreplace") for source, _ in translated]
    flags = [(0 if is_exact else hyperscan.HS_FLAG_PREFILTER) | hyperscan.HS_FLAG_MULTILINE
             | (hyperscan.HS_FLAG_CASELESS if caseless else 0)
             for (_, caseless), is_exact in zip(translated, exact, strict=True)]
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        db.compile(expressions=expressions, ids=list(range(len(expressions))), flags=flags)
    except hyperscan.error as exc:
        log.info("Hyperscan cannot compile the signatures%s (%s)",
                 " exactly" if any(exact) else "; using the literal prefilter", exc)
        return None
    return db


# Parser nodes whose Hyperscan reading equals Python's on one ASCII line and
# that can never take a newline (so a match cannot straddle two lines).
_EXACT_OPS = {"LITERAL", "SUBPATTERN", "BRANCH", "MAX_REPEAT", "MIN_REPEAT", "IN", "RANGE"}
_EXACT_CATEGORIES = {"CATEGORY_DIGIT", "CATEGORY_WORD"}


def is_exact(pattern: str) -> bool:
    """Whether a Hyperscan match of `pattern` (outside prefilter mode) is a Python match.

    True for literals, groups, alternatives, repeats and positive classes of
    literals, ranges, \\d and \\w, with no flags: constructs both engines read
    alike on ASCII and that never match a newline. Anything else (anchors,
    `.`, negated classes, \\s) is confirmed by `re` on the line.
    """
    try:
        compiled = re.compile(pattern)
        parsed = sre_parse.parse(pattern)
    except re.error:
        return False
    if compiled.flags & ~re.UNICODE or not pattern.isascii() or _OPEN_MIN.search(pattern):
        return False
    return _exact_items(list(parsed.data))


def _exact_items(items: list[Any]) -> bool:
    for op, arg in items:
        name = str(op)
        if name not in _EXACT_OPS:
            return False
        if name == "SUBPATTERN":
            if arg[1] or arg[2]:  # inline flags
                return False
            if not _exact_items(list(arg[3].data)):
                return False
        elif name == "BRANCH":
            if not all(_exact_items(list(b.data)) for b in arg[1]):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            if not _exact_items(list(arg[2].data)):
                return False
        elif name == "IN":
            for member_op, member in arg:
                member_name = str(member_op)
                if member_name == "CATEGORY":
                    if str(member) not in _EXACT_CATEGORIES:
                        return False
                elif member_name not in ("LITERAL", "RANGE"):
                    return False
                elif member_name == "LITERAL" and member == 10:
                    return False
        elif name == "LITERAL" and arg == 10:
            return False
    return True


_ALLOWED_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.UNICODE


def translate(pattern: str) -> tuple[str, bool] | None:
    """Pattern source Hyperscan reads with Python's meaning on ASCII, and its caseless flag."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return None
    if compiled.flags & ~_ALLOWED_FLAGS or not pattern.isascii():
        return None
    out: list[str] = []
    in_class = False
    class_start = 0
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            esc = pattern[i + 1]
            if esc == "s":
                out.append(_PY_SPACE if in_class else f"[{_PY_SPACE}]")
            elif esc == "S":
                if in_class:
                    return None  # a negated class inside a class: keep it simple, fall back
                out.append(f"[^{_PY_SPACE}]")
            elif esc == "A" and not in_class:
                out.append("^")
            elif esc == "Z" and not in_class:
                out.append("$")
            elif esc in "uUN":
                return None  # Python-only escapes (\u00e9, \N{...}): PCRE reads them otherwise
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            # "]" right after "[" or "[^" is a literal member, not the end.
            if c == "]" and i > class_start:
                in_class = False
        elif c == "{" and _OPEN_MIN.match(pattern, i):
            out.append("{0")  # Python's {,n} is {0,n}; PCRE reads "{,n}" as literal text
            i += 1
            continue
        elif c == "[":
            in_class = True
            class_start = i + 1
            if pattern.startswith("^", class_start):
                class_start += 1
        out.append(c)
        i += 1
    return "".join(out), bool(compiled.flags & re.IGNORECASE)
