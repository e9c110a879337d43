"""The prefilter never drops a line a signature matches: proved per pattern, then property-checked.

The anchors are chosen by cost, so a wrong choice would silently lose crash
lines; these tests check (1) structurally that every alternative of every
pattern has a chosen anchor inside one of its required literals, and (2) on
strings generated at random from each pattern's own syntax tree, plus every
fixture log, that any line the combined regex matches contains an anchor.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from sentinel.logs import load_signature_file
from sentinel.logs.anchors import pattern_units, sre_constants, sre_parse
from sentinel.logs.signatures import SignatureSet

ROOT = Path(__file__).resolve().parent.parent
FILLER = "aZ 0_:.(-/'\"\n"  # anything, including a character some patterns need


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def _patterns(sigs: SignatureSet) -> list[str]:
    return [p for s in sigs.signatures for p in s.patterns]


def _generate(items: object, rng: random.Random) -> str:
    """A random string matched by the parsed pattern `items` (the subset signatures use)."""
    out = []
    for op, arg in items:  # type: ignore[attr-defined]
        if op is sre_constants.LITERAL:
            out.append(chr(arg))
        elif op is sre_constants.ANY:
            out.append(rng.choice(FILLER.replace("\n", "")))
        elif op is sre_constants.IN:
            out.append(_one_of(arg, rng))
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            low, high, sub = arg
            count = rng.randint(low, min(high, low + 3))
            out.extend(_generate(sub, rng) for _ in range(count))
        elif op is sre_constants.SUBPATTERN:
            out.append(_generate(arg[-1], rng))
        elif op is sre_constants.BRANCH:
            out.append(_generate(rng.choice(arg[1]), rng))
        elif op is sre_constants.AT:
            continue
        else:
            raise AssertionError(f"generator does not know {op}")
    return "".join(out)


def _one_of(members: list[tuple[object, object]], rng: random.Random) -> str:
    """One character from a character class."""
    choices = []
    for op, arg in members:
        if op is sre_constants.LITERAL:
            choices.append(chr(arg))  # type: ignore[arg-type]
        elif op is sre_constants.RANGE:
            low, high = arg  # type: ignore[misc]
            choices.append(chr(rng.randint(low, high)))
        elif op is sre_constants.CATEGORY:
            choices.append({sre_constants.CATEGORY_DIGIT: "7", sre_constants.CATEGORY_SPACE: " ",
                            sre_constants.CATEGORY_WORD: "w"}.get(arg, "x"))  # type: ignore[call-overload]
    assert choices and all(op is not sre_constants.NEGATE for op, _ in members)
    return rng.choice(choices)


def test_every_alternative_contains_a_chosen_anchor(sigs: SignatureSet) -> None:
    for pattern in _patterns(sigs):
        for runs in pattern_units(pattern):
            assert any(a in run for a in sigs.anchors for run in runs), pattern


def test_generated_matches_always_carry_an_anchor(sigs: SignatureSet) -> None:
    rng = random.Random(3)
    for pattern in _patterns(sigs):
        parsed = sre_parse.parse(pattern)
        for _ in range(200):
            core = _generate(parsed.data, rng)
            anchored = bool(parsed.data) and parsed.data[0][0] is sre_constants.AT
            filler = 0 if anchored else rng.randint(0, 5)  # `^...` must start the line
            line = "".join(rng.choice(FILLER[:-1]) for _ in range(filler)) + core
            assert re.search(pattern, line), (pattern, line)
            assert sigs.match_line(line) is not None, line
            assert sigs.has_anchor(line), (pattern, line)
            assert sigs.candidate_lines(f"INFO ok\n{line}\nINFO ok") == [1], line


def test_fixture_logs_lose_no_matching_line(sigs: SignatureSet) -> None:
    lines = [line for path in sorted((ROOT / "tests/data/logs").glob("*.log"))
             for line in path.read_text().splitlines()]
    matching = [i for i, line in enumerate(lines) if sigs.match_line(line) is not None]
    assert matching, "fixtures should contain crash lines"
    candidates = set(sigs.candidate_lines("\n".join(lines)))
    assert set(matching) <= candidates
