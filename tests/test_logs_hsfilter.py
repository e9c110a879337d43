"""The Hyperscan prefilter: Python's meaning on ASCII, the literal fallback elsewhere.

Both engines must return a superset of the lines a signature matches; these
tests run the same checks over each engine available here.
"""

from __future__ import annotations

import os
import platform
import random
import re
from pathlib import Path

import pytest

from sentinel.logs.hsfilter import build_hyperscan_filter, hyperscan, translate
from sentinel.logs.signatures import Signature, SignatureSet, parse_signatures

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "rules" / "signatures.yaml"
needs_hyperscan = pytest.mark.skipif(hyperscan is None, reason="hyperscan is not installed")


def _sig(*patterns: str) -> Signature:
    return Signature("s", "other", "error", patterns, "runbook")


def test_hyperscan_is_installed_where_wheels_exist() -> None:
    x86_linux = platform.machine() == "x86_64" and platform.system() == "Linux"
    if hyperscan is None and not (os.environ.get("CI") == "true" and x86_linux):
        pytest.skip("hyperscan is not installed (a dependency on x86-64 Linux only)")
    assert hyperscan is not None, "pyproject installs hyperscan on x86-64 Linux"
    text = BUNDLED.read_text()
    assert SignatureSet(parse_signatures(text)).engine == "hyperscan"


@pytest.mark.parametrize(("pattern", "expected"), [
    (r"a\sb", r"a[\s\x1c-\x1f]b"),
    (r"a\Sb", r"a[^\s\x1c-\x1f]b"),
    (r"[\s,]x", r"[\s\x1c-\x1f,]x"),
    (r"\Afoo\Z", r"^foo$"),
    (r"[]\s]", r"[]\s\x1c-\x1f]"),
    (r"\\s", r"\\s"),  # an escaped backslash, then a literal s
])
def test_translate_keeps_pythons_meaning(pattern: str, expected: str) -> None:
    assert translate(pattern) == (expected, False)


def test_translate_refuses_what_it_cannot_keep() -> None:
    assert translate(r"[^\S]") is None  # \S inside a class
    assert translate("(?a)x") is None  # ASCII flag: no Hyperscan equivalent needed, but refuse
    assert translate("(unclosed") is None
    assert translate("é") is None
    assert translate("(?i)oom") == ("(?i)oom", True)


@needs_hyperscan
def test_python_space_class_is_kept() -> None:
    hs = build_hyperscan_filter([r"out\sof\smemory"])
    assert hs is not None
    # \x1c is whitespace to Python's re (str.isspace) but not to PCRE.
    assert re.search(r"out\sof\smemory", "out\x1cof memory")
    assert hs.candidate_lines("ok\nout\x1cof memory\nok") == [1]


@needs_hyperscan
def test_an_uncompilable_set_falls_back_to_the_literal_prefilter() -> None:
    # Hyperscan rejects \b\B (it can never match); Python accepts it. The whole
    # set takes the literal path and still finds the other signature's line.
    sigs = SignatureSet([_sig(r"EngineDead\b\B", "OOM-kill")])
    assert sigs.engine == "literal"
    assert sigs.candidate_lines("ok\nOOM-kill\nok") == [1]


def test_unknown_engine_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown prefilter engine"):
        SignatureSet([_sig("x")], engine="grep")


ENGINES = ["literal", pytest.param("hyperscan", marks=needs_hyperscan)]


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_find_every_matching_line_in_the_fixtures(engine: str) -> None:
    sigs = SignatureSet(parse_signatures(BUNDLED.read_text()), engine)
    lines = [line for path in sorted((ROOT / "tests/data/logs").glob("*.log"))
             for line in path.read_text().splitlines()]
    rng = random.Random(11)
    rng.shuffle(lines)
    block = "\n".join(lines)
    matching = {i for i, line in enumerate(lines) if sigs.match_line(line) is not None}
    assert matching
    candidates = sigs.candidate_lines(block)
    assert candidates == sorted(set(candidates))
    assert matching <= set(candidates)
    tracebacks = {i for i, line in enumerate(lines) if "Traceback (most recent call last):" in line}
    assert tracebacks <= set(candidates)


@pytest.mark.parametrize("engine", ENGINES)
def test_non_ascii_blocks_take_the_literal_path_and_lose_nothing(engine: str) -> None:
    sigs = SignatureSet(parse_signatures(BUNDLED.read_text()), engine)
    block = "modèle prêt ✓\nRESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.2G\nfin"
    assert sigs.candidate_lines(block) == [1]


@pytest.mark.parametrize("engine", ENGINES)
def test_match_at_block_edges_and_empty_lines(engine: str) -> None:
    sigs = SignatureSet([_sig("EngineDeadError", r"NCCL error\s")], engine)
    assert sigs.candidate_lines("EngineDeadError") == [0]
    assert sigs.candidate_lines("\n\nEngineDeadError\n") == [2]
    assert sigs.candidate_lines("NCCL error\nnext") in ([0], [0, 1])  # \s may take the newline
    assert sigs.candidate_lines("") == []


ATOMS = ["a", "b", "E", "7", " ", ".", r"\d", r"\s", r"\S", r"\w", r"\W", "[a-c]", "[^a ]",
         r"[\s7]", r"\.", "-", r"\b", "(?:ab|E7)", "(a)"]
QUANTIFIERS = ["", "", "", "+", "*", "?", "{,2}", "{1,3}", "{2}", "+?"]
ALPHABET = "abcE7 .-\t\x1c\x0bAB"


def _random_pattern(rng: random.Random) -> str:
    body = "".join(rng.choice(ATOMS) + rng.choice(QUANTIFIERS) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.2:
        body = body + "|" + rng.choice(ATOMS)
    prefix = rng.choice(["", "", "", "(?i)", "^", r"\A"])
    suffix = rng.choice(["", "", "", "$", r"\Z"])
    return prefix + body + suffix


@needs_hyperscan
def test_hyperscan_candidates_cover_pythons_matches_on_random_patterns() -> None:
    """For random patterns in Python syntax, no line `re` matches is missing from the scan."""
    rng = random.Random(5)
    checked = 0
    for _ in range(300):
        pattern = _random_pattern(rng)
        try:
            compiled = re.compile(pattern)
        except re.error:
            continue
        if compiled.match(""):
            continue  # the loader refuses patterns that match the empty string
        hs = build_hyperscan_filter([pattern])
        if hs is None:
            continue  # refused patterns take the literal path, tested elsewhere
        lines = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
                 for _ in range(60)]
        expected = {i for i, line in enumerate(lines) if compiled.search(line)}
        assert expected <= set(hs.candidate_lines("\n".join(lines))), pattern
        checked += 1
    assert checked > 150


# -- match ids: the pattern Hyperscan reports names the signature ------------------------

@pytest.mark.parametrize(("pattern", "exact"), [
    ("EngineDeadError", True),
    (r"Engine core proc [A-Za-z_0-9]+ died unexpectedly", True),
    (r"(allocate|reserve) [0-9.]+[KMGT]?i?B?", True),
    (r"exit code \d+", True),
    (r"NCCL error\s", False),   # \s takes a newline in a block: confirmed by re
    (r"foo.bar", False),        # . (Hyperscan's and Python's agree, but keep it simple)
    (r"[^x]yz", False),         # a negated class takes a newline
    (r"\bdied\b", False),       # anchors
    (r"(?i)died", False),       # flags
    (r"a{,3}bcd", False),       # PCRE reads {,n} as text
])
def test_exactness_is_claimed_only_for_constructs_that_cannot_cross_a_line(
        pattern: str, exact: bool) -> None:
    from sentinel.logs.hsfilter import is_exact
    assert is_exact(pattern) is exact


@pytest.mark.parametrize("engine", ENGINES)
def test_scan_names_the_same_signature_as_match_line_on_every_line(engine: str) -> None:
    sigs = SignatureSet(parse_signatures(BUNDLED.read_text()), engine)
    paths = sorted((ROOT / "tests/data/logs").rglob("*.log"))
    lines = [line for p in paths for line in p.read_text().splitlines() if line.isascii()]
    rng = random.Random(5)
    rng.shuffle(lines)
    for start in range(0, len(lines), 997):  # blocks of odd sizes
        chunk = lines[start:start + 997]
        got = {i: (sig, tb) for i, sig, tb in sigs.scan("\n".join(chunk))}
        want = {i: (sigs.match_line(line), "Traceback (most recent call last):" in line)
                for i, line in enumerate(chunk)}
        want = {i: v for i, v in want.items() if v[0] is not None or v[1]}
        assert got == want


@needs_hyperscan
def test_an_exact_compile_that_fails_falls_back_to_prefilter_mode_and_says_so() -> None:
    # A lookahead: Hyperscan cannot compile it as is, but can in prefilter mode;
    # claimed exact on purpose here, the filter must drop the claim, not the engine.
    hs = build_hyperscan_filter([r"EngineDead(?=Error)", "Traceback"], [True, True])
    assert hs is not None and hs.exact == (False, False)
    ids = hs.scan_ids("ok\nEngineDeadError\nTraceback")
    assert [(line, sorted(pids)) for line, _, pids in ids] == [(1, [0]), (2, [1])]
    hs = build_hyperscan_filter(["EngineDeadError", "Traceback"], [True, True])
    assert hs is not None and hs.exact == (True, True)
