"""Crash signatures: load and validate rules/signatures.yaml, compile one combined matcher.

A `SignatureSet` matches a line against every signature in one pass: a
literal prefilter (see `anchors.py`) throws away lines that cannot match, and
one regex — an alternation of one named group per signature — says which
signature matched. `candidate_lines(block)` runs the prefilter over a whole
chunk of text at once, which is what makes scanning fast.

Validation reports every problem at once as `file:line: key: message`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentinel.logs import shipped, sigcache
from sentinel.logs.anchors import AnchorError, choose_anchors, pattern_units
from sentinel.logs.hsfilter import (
    build_hyperscan_filter,
    hyperscan_version,
    is_exact,
    load_hyperscan_filter,
)

if TYPE_CHECKING:  # parsing YAML is needed only when no compiled set matches (see shipped.py)
    from sentinel.config.yamlpos import Positioned

CATEGORIES = (
    "hbm_oom", "cuda_oom", "host_oom_killed", "engine_dead", "startup_failure",
    "compile_failure", "context_length_exceeded", "interconnect_failure", "other",
)
SEVERITIES = ("critical", "error", "warning", "info")
ENGINES = ("auto", "hyperscan", "literal")  # the prefilter: auto = hyperscan where installed
TRACEBACK = "Traceback (most recent call last):"
_NON_ASCII = re.compile(rb"[\x80-\xff]")

_KEYS = {"name", "category", "severity", "patterns", "context_before", "context_after",
         "priority", "runbook", "exclude", "unless_after"}
_REQUIRED = ("name", "category", "severity", "patterns", "runbook")
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
MAX_CONTEXT = 50
log = logging.getLogger(__name__)


class SignatureFileError(Exception):
    """A signature file is unreadable or invalid; `problems` holds every `file:line: ...`."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True, slots=True)
class Signature:
    """One crash signature: what to look for and what it means."""

    name: str
    category: str
    severity: str
    patterns: tuple[str, ...]
    runbook: str
    context_before: int = 3
    context_after: int = 3
    priority: int = 50
    # A line that also matches one of these is not this signature's ("Fatal Python
    # error ... at interpreter shutdown": the process was exiting anyway).
    exclude: tuple[str, ...] = ()
    # A hit right after a line matching one of these (within `context_before` lines)
    # is not one: "Killed" printed after vLLM terminated its own workers.
    unless_after: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Compiled:
    """What building a `SignatureSet` costs to compute: kept in the on-disk cache (`sigcache.py`).

    `hyperscan` is the serialized Hyperscan database (None: the literal
    prefilter), `exact` its per-expression exactness.
    """

    anchors: tuple[str, ...]
    exact: tuple[bool, ...]
    hyperscan: bytes | None


class SignatureSet:
    """Compiled signatures: one combined regex behind a literal prefilter.

    Building one chooses anchors and compiles Hyperscan (seconds of CPU);
    `compiled` hands in what an earlier build computed (see `sigcache.py`).
    Python regexes are compiled on first use: a scan that finds no candidate
    line never needs them.
    """

    def __init__(self, signatures: Sequence[Signature], engine: str = "auto", *,
                 compiled: Compiled | None = None,
                 anchors: tuple[str, ...] | None = None) -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown prefilter engine {engine!r} (one of {', '.join(ENGINES)})")
        self.signatures = tuple(signatures)
        patterns = tuple(p for s in self.signatures for p in s.patterns)
        self._patterns = patterns
        # Hyperscan expression i is pattern i (the traceback marker last), so a
        # match id names its signature: only that pattern's `re` confirms the
        # line, and not even that where the Hyperscan rewrite is exact.
        owner = [i for i, s in enumerate(self.signatures) for _ in s.patterns]
        self._pattern_sig = [self.signatures[i] for i in owner]
        self._pattern_rank = [(-self.signatures[i].priority, i) for i in owner]
        self._tb_id = len(patterns)
        if compiled is not None:
            self.anchors = compiled.anchors
            self._hyperscan = None if engine == "literal" else load_hyperscan_filter(
                compiled.hyperscan, compiled.exact)
            self._exact = list(compiled.exact) if self._hyperscan is not None \
                else [False] * len(patterns)
        else:
            self._build(patterns, engine, anchors)
        if engine == "hyperscan" and self._hyperscan is None:
            raise ValueError("the hyperscan prefilter is unavailable for these signatures")
        self.engine = "hyperscan" if self._hyperscan is not None else "literal"
        self.max_before = max((s.context_before for s in self.signatures), default=0)

    def _build(self, patterns: tuple[str, ...], engine: str,
               anchors: tuple[str, ...] | None) -> None:
        """Choose the anchors (unless given: shipped.py) and compile Hyperscan."""
        # The traceback marker is an anchor too: the classifier must see where tracebacks start.
        self.anchors = anchors if anchors is not None else tuple(
            sorted(set(choose_anchors(patterns)) | {TRACEBACK}))
        self._exact = [is_exact(p) for p in patterns]
        self._hyperscan = (None if engine == "literal" or not patterns
                           else build_hyperscan_filter([*patterns, re.escape(TRACEBACK)],
                                                       [*self._exact, True]))
        if self._hyperscan is not None:  # what Hyperscan could compile exactly, in the end
            compiled = self._hyperscan.exact
            self._exact = [i < len(compiled) and compiled[i] for i in range(len(self._exact))]

    def compiled(self) -> Compiled:
        """What an identical set can be rebuilt from without choosing anchors or compiling."""
        db = self._hyperscan.serialize() if self._hyperscan is not None else None
        return Compiled(self.anchors, tuple(self._exact), db)

    @cached_property
    def _pattern_re(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self._patterns]

    @cached_property
    def _excluded(self) -> dict[int, re.Pattern[str]]:
        return {id(s): re.compile("|".join(f"(?:{p})" for p in s.exclude))
                for s in self.signatures if s.exclude}

    @cached_property
    def _after(self) -> dict[int, re.Pattern[str]]:
        return {id(s): re.compile("|".join(f"(?:{p})" for p in s.unless_after))
                for s in self.signatures if s.unless_after}

    @cached_property
    def _combined(self) -> re.Pattern[str] | None:
        alternatives = [
            f"(?P<s{i}>" + "|".join(f"(?:{p})" for p in s.patterns) + ")"
            for i, s in enumerate(self.signatures)
        ]
        return re.compile("|".join(alternatives)) if alternatives else None

    @cached_property
    def _ranked(self) -> list[tuple[Signature, re.Pattern[str]]]:
        # Per-signature regexes, highest priority first: used only on lines that
        # already matched, to let a root cause later in the line outrank a
        # symptom earlier in it ("compile permanent error. Ran out of memory").
        # Ties in priority go to the signature listed first.
        ranked = sorted(range(len(self.signatures)),
                        key=lambda i: (-self.signatures[i].priority, i))
        return [
            (self.signatures[i],
             re.compile("|".join(f"(?:{p})" for p in self.signatures[i].patterns)))
            for i in ranked
        ]

    def by_name(self, name: str) -> Signature | None:
        """The signature called `name`, or None."""
        return next((s for s in self.signatures if s.name == name), None)

    def match_line(self, line: str) -> Signature | None:
        """The signature matching `line` (the highest priority among several), or None."""
        if self._combined is None:
            return None
        m = self._combined.search(line)
        if m is None or m.lastgroup is None:
            return None
        found = self.signatures[int(m.lastgroup[1:])]
        # Only signatures ranked at or above the one found can name the line (ties go
        # to the one listed first), so the scan stops at the found one's rank.
        for sig, rx in self._ranked:
            if sig is found or rx.search(line):
                if not self.excluded(sig, line):
                    return sig
                if sig is found:
                    break
        # The line matched only excluded wordings so far: try every signature (rare).
        for sig, rx in self._ranked:
            if rx.search(line) and not self.excluded(sig, line):
                return sig
        return None

    def excluded(self, sig: Signature, line: str) -> bool:
        """Whether `line` matches one of `sig`'s `exclude` patterns."""
        rx = self._excluded.get(id(sig))
        return rx is not None and rx.search(line) is not None

    def follows_benign(self, sig: Signature, before: Sequence[str]) -> bool:
        """Whether one of the lines just before (the last `context_before`) matches one of
        `sig`'s `unless_after` patterns, which makes its hit not a hit."""
        rx = self._after.get(id(sig))
        if rx is None:
            return False
        recent = list(before)[-max(sig.context_before, 1):]
        return any(rx.search(line) for line in recent)

    def scan(self, block: str) -> list[tuple[int, Signature | None, bool]]:
        """The lines of `block` that match a signature or start a traceback.

        One `(index, signature or None, starts_traceback)` per such line,
        ascending; the signature is `match_line`'s answer. With Hyperscan a
        block takes one scan whose match ids say which pattern matched, so at
        most the matched patterns' own regexes run on a line (none where the
        rewrite is exact): a crash storm costs what its matching lines cost,
        not what all signatures cost on each of them. Lines that are not
        ASCII are answered by `match_line` (see `scan_bytes`).
        """
        if self._hyperscan is not None:
            if block.isascii():
                return [(i, sig, tb) for i, _, sig, tb in self._scan_ids(block)]
            # Round-trips any str (lone surrogates too), so a line decodes back as it was.
            found = self.scan_bytes(block.encode("utf-8", "surrogatepass"), "surrogatepass")
            return [(i, sig, tb) for i, _, sig, tb in found or ()]
        indexes = self._literal_candidates(block)
        if not indexes:
            return []
        lines = block.split("\n")
        out = []
        for index in indexes:
            line = lines[index]
            sig = self.match_line(line)
            tb = TRACEBACK in line
            if sig is not None or tb:
                out.append((index, sig, tb))
        return out

    def scan_bytes(self, data: bytes, errors: str = "replace"
                   ) -> list[tuple[int, int, Signature | None, bool]] | None:
        """`scan` over UTF-8 bytes, without decoding the lines that cannot match.

        One `(index, offset, signature or None, starts_traceback)` per line
        that matches or starts a traceback, ascending; `offset` is a byte
        offset inside that line (the reader cuts the line out around it).
        Each answer is what `match_line` says of the line decoded with
        `errors`. Hyperscan scans the bytes as they are; its answers stand on
        ASCII lines only (where its dialect and Python's agree), so each line
        holding a byte above 0x7f is decoded and answered by `match_line`
        instead. None without Hyperscan: decode the block and call `scan`.
        """
        if self._hyperscan is None:
            return None
        found = self._scan_ids(data)
        if data.isascii():
            return found
        others = self._non_ascii_lines(data, errors)
        skip = {index for index, _, _, _ in others}
        merged = [hit for hit in found if hit[0] not in skip] + others
        merged.sort(key=_first)
        return merged

    def _non_ascii_lines(self, data: bytes, errors: str
                         ) -> list[tuple[int, int, Signature | None, bool]]:
        """`scan_bytes`'s answers for the lines of `data` that are not ASCII, by `match_line`."""
        out: list[tuple[int, int, Signature | None, bool]] = []
        index = previous = position = 0
        search = _NON_ASCII.search
        while (found := search(data, position)) is not None:
            start = data.rfind(b"\n", 0, found.start()) + 1
            end = data.find(b"\n", found.start())
            end = len(data) if end == -1 else end
            index += data.count(b"\n", previous, start)
            previous = position = start
            line = data[start:end].decode("utf-8", errors)
            sig = self.match_line(line) if self.has_anchor(line) else None
            tb = TRACEBACK in line
            if sig is not None or tb:
                out.append((index, start, sig, tb))
            position = end + 1
        return out

    def _scan_ids(self, block: str | bytes) -> list[tuple[int, int, Signature | None, bool]]:
        """Hyperscan's answers: (line index, offset in the line, signature, starts traceback)."""
        assert self._hyperscan is not None
        out: list[tuple[int, int, Signature | None, bool]] = []
        tb_id, exact, rank = self._tb_id, self._exact, self._pattern_rank
        for index, at, ids in self._hyperscan.scan_ids(block):
            tb = tb_id in ids
            if tb:
                ids.discard(tb_id)
            sig = None
            line = None
            for pid in sorted(ids, key=rank.__getitem__) if len(ids) > 1 else ids:
                if not exact[pid] or self._pattern_sig[pid].exclude:
                    if line is None:
                        line = _line_at(block, at)
                    if not exact[pid] and self._pattern_re[pid].search(line) is None:
                        continue
                    if self.excluded(self._pattern_sig[pid], line):
                        continue
                sig = self._pattern_sig[pid]
                break
            if sig is not None or tb:
                out.append((index, at, sig, tb))
        return out

    def has_anchor(self, line: str) -> bool:
        """Whether `line` contains any anchor (a line without one cannot match)."""
        return any(a in line for a in self.anchors)

    def candidate_lines(self, block: str) -> list[int]:
        """Indexes (0-based) of the lines of `block` that may match or start a traceback.

        A superset of the matching lines, ascending. With Hyperscan an ASCII
        block takes one scan; otherwise one `str.find` pass per anchor (each hit
        skips to the end of its line, so a noisy line costs one hit per anchor).
        """
        if self._hyperscan is not None and block.isascii():
            return self._hyperscan.candidate_lines(block)
        return self._literal_candidates(block)

    def _literal_candidates(self, block: str) -> list[int]:
        starts: set[int] = set()
        for anchor in self.anchors:
            find = block.find
            i = find(anchor)
            while i != -1:
                starts.add(block.rfind("\n", 0, i) + 1)
                end = find("\n", i)
                if end == -1:
                    break
                i = find(anchor, end)
        indexes = []
        line_no = 0
        previous = 0
        for start in sorted(starts):
            line_no += block.count("\n", previous, start)
            previous = start
            indexes.append(line_no)
        return indexes


def _first(hit: tuple[int, int, Signature | None, bool]) -> int:
    return hit[0]


def _line_at(block: str | bytes, at: int) -> str:
    """The line of `block` holding offset `at` (an ASCII line, when `block` is bytes)."""
    if isinstance(block, str):
        end = block.find("\n", at)
        return block[block.rfind("\n", 0, at) + 1:None if end == -1 else end]
    end = block.find(b"\n", at)
    return block[block.rfind(b"\n", 0, at) + 1:None if end == -1 else end].decode(
        "utf-8", "replace")


def load_signature_file(path: str | Path) -> SignatureSet:
    """Load, validate and compile a signature file; raise SignatureFileError with every problem.

    A file compiled before (same bytes, same Sentinel) comes from the on-disk
    cache (`sigcache.py`) without choosing anchors or compiling Hyperscan again;
    else the bundled file's signatures and anchors come from its shipped
    compilation (`shipped.py`) and only Hyperscan is compiled.
    """
    name = str(path)
    try:
        raw = Path(path).read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SignatureFileError([f"{name}: cannot read: {exc}"]) from None
    key = sigcache.cache_key(raw, _BUILDERS, hyperscan_version())
    blob = sigcache.read(key)
    if blob is not None:
        try:
            return _decode(blob)
        except (ValueError, KeyError, TypeError) as exc:
            log.info("signature cache entry %s unusable (%s); compiling", key, exc)
    sigset = _from_shipped(path, raw)
    if sigset is None:
        sigset = SignatureSet(parse_signatures(text, name))
    sigcache.write(key, _encode(sigset))
    return sigset


def _from_shipped(path: str | Path, raw: bytes) -> SignatureSet | None:
    """The set built from the shipped signatures and anchors of these bytes, or None."""
    doc = shipped.read(path, raw)
    if doc is None:
        return None
    try:
        return SignatureSet(signatures_from_dicts(doc["signatures"]),
                            anchors=tuple(str(a) for a in doc["anchors"]))
    except (ValueError, KeyError, TypeError) as exc:
        log.info("shipped signature compilation unusable (%s); compiling", exc)
        return None


def signature_dicts(signatures: Sequence[Signature]) -> list[dict[str, Any]]:
    """Signatures as JSON-ready dicts (`signatures_from_dicts` reads them back)."""
    return [dataclasses.asdict(s) for s in signatures]


def signatures_from_dicts(items: Sequence[dict[str, Any]]) -> list[Signature]:
    """The signatures `signature_dicts` wrote (lists become tuples again)."""
    out = []
    for item in items:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in item.items()}
        out.append(Signature(**fields))
    return out


# The modules whose code decides what a signature file compiles to.
_BUILDERS = tuple(Path(__file__).with_name(n) for n in ("signatures.py", "anchors.py",
                                                        "hsfilter.py"))


def _encode(sigset: SignatureSet) -> bytes:
    """A cache blob: a length, the JSON of the signatures and anchors, the Hyperscan bytes."""
    compiled = sigset.compiled()
    head = json.dumps({
        "signatures": signature_dicts(sigset.signatures),
        "anchors": list(compiled.anchors), "exact": list(compiled.exact),
        "hyperscan": compiled.hyperscan is not None,
    }).encode()
    return len(head).to_bytes(8, "big") + head + (compiled.hyperscan or b"")


def _decode(blob: bytes) -> SignatureSet:
    size = int.from_bytes(blob[:8], "big")
    head = json.loads(blob[8:8 + size])
    sigs = signatures_from_dicts(head["signatures"])
    db = blob[8 + size:] if head["hyperscan"] else None
    compiled = Compiled(tuple(head["anchors"]), tuple(bool(e) for e in head["exact"]), db)
    return SignatureSet(sigs, compiled=compiled)


def parse_signatures(text: str, filename: str = "<signatures>") -> list[Signature]:
    """Validate the YAML text of a signature file; raise SignatureFileError listing all problems."""
    from sentinel.config.yamlpos import YamlSyntaxError, load_positioned

    try:
        doc = load_positioned(text)
    except YamlSyntaxError as exc:
        raise SignatureFileError([f"{filename}:{exc.line}: {exc.message}"]) from None
    problems = [f"{filename}:{p.line}: {_key(p.path)}: {p.message}" for p in doc.problems]
    data = doc.data
    items: Any = data.get("signatures") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(items, list):
        problems.append(f"{filename}:1: signatures: expected a mapping with a list `signatures`")
        raise SignatureFileError(problems)
    for key in data:
        if key != "signatures":
            problems.append(f"{filename}:{doc.line_of((key,))}: {key}: unknown key")
    out: list[Signature] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        checker = _ItemChecker(doc, filename, ("signatures", index))
        sig = checker.check(item)
        problems.extend(checker.problems)
        if sig is None:
            continue
        line = doc.line_of(("signatures", index, "name"))
        if sig.name in seen:
            problems.append(f"{filename}:{line}: signatures[{index}].name: duplicate "
                            f"signature {sig.name!r} (first on line {seen[sig.name]})")
            continue
        seen[sig.name] = line
        out.append(sig)
    if problems:
        raise SignatureFileError(problems)
    return out


def _key(path: tuple[str | int, ...]) -> str:
    """`("signatures", 2, "patterns", 0)` -> `signatures[2].patterns[0]`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(root)"


class _ItemChecker:
    """Validates one signature entry, collecting problems instead of stopping at the first."""

    def __init__(self, doc: Positioned, filename: str, path: tuple[str | int, ...]) -> None:
        self.doc, self.filename, self.path = doc, filename, path
        self.problems: list[str] = []

    def _problem(self, key: tuple[str | int, ...], message: str) -> None:
        full = self.path + key
        self.problems.append(f"{self.filename}:{self.doc.line_of(full)}: {_key(full)}: {message}")

    def check(self, item: Any) -> Signature | None:
        if not isinstance(item, dict):
            self._problem((), "expected a mapping")
            return None
        for key in item:
            if key not in _KEYS:
                self._problem((key,), f"unknown key (allowed: {', '.join(sorted(_KEYS))})")
        for key in _REQUIRED:
            if key not in item:
                self._problem((), f"missing required key {key!r}")
        name = self._string(item, "name")
        if name is not None and not _NAME.match(name):
            self._problem(("name",), "must be lower_snake_case ([a-z][a-z0-9_]*)")
        category = self._choice(item, "category", CATEGORIES)
        severity = self._choice(item, "severity", SEVERITIES)
        runbook = self._string(item, "runbook")
        before = self._int(item, "context_before", 3, 0, MAX_CONTEXT)
        after = self._int(item, "context_after", 3, 0, MAX_CONTEXT)
        priority = self._int(item, "priority", 50, 0, 100)
        patterns = self._patterns(item)
        exclude = self._regex_list(item, "exclude")
        unless_after = self._regex_list(item, "unless_after")
        if self.problems or None in (name, category, severity, runbook) or not patterns:
            return None
        return Signature(str(name), str(category), str(severity), tuple(patterns),
                         str(runbook).strip(), before, after, priority, tuple(exclude),
                         tuple(unless_after))

    def _regex_list(self, item: dict[str, Any], key: str) -> list[str]:
        """An optional list of regular expressions (no anchor needed: checked on hits only)."""
        value = item.get(key, [])
        if not isinstance(value, list):
            self._problem((key,), "must be a list of regular expressions")
            return []
        good = []
        for i, pattern in enumerate(value):
            if not isinstance(pattern, str) or not pattern:
                self._problem((key, i), "must be a non-empty string")
                continue
            try:
                re.compile(pattern)
            except re.error as exc:
                self._problem((key, i), f"invalid regular expression: {exc}")
                continue
            good.append(pattern)
        return good

    def _string(self, item: dict[str, Any], key: str) -> str | None:
        value = item.get(key)
        if key in item and (not isinstance(value, str) or not value.strip()):
            self._problem((key,), "must be a non-empty string")
            return None
        return value

    def _choice(self, item: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
        value = self._string(item, key)
        if value is not None and value not in allowed:
            self._problem((key,), f"{value!r} is not one of {', '.join(allowed)}")
            return None
        return value

    def _int(self, item: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
        value = item.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self._problem((key,), f"must be an integer from {low} to {high}")
            return default
        return value

    def _patterns(self, item: dict[str, Any]) -> list[str]:
        value = item.get("patterns")
        if "patterns" not in item:
            return []
        if not isinstance(value, list) or not value:
            self._problem(("patterns",), "must be a non-empty list of regular expressions")
            return []
        good = []
        for i, pattern in enumerate(value):
            message = _pattern_problem(pattern)
            if message:
                self._problem(("patterns", i), message)
            else:
                good.append(pattern)
        return good


def _pattern_problem(pattern: Any) -> str | None:
    """Why `pattern` cannot be used, or None."""
    if not isinstance(pattern, str) or not pattern:
        return "must be a non-empty string"
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression: {exc}"
    if compiled.groupindex:
        return "named groups are not allowed (the combined matcher names its own)"
    if compiled.match(""):
        return "matches the empty string (it would match every line)"
    try:
        pattern_units(pattern)
    except AnchorError as exc:
        return str(exc)
    return None
