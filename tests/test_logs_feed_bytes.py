"""`Classifier.feed_bytes` (what `sentinel logs classify` uses) gives `feed_lines`' events exactly.

feed_bytes decodes only the lines the classifier looks at, takes Hyperscan's
word on ASCII lines and `match_line`'s on the others: over every corpus log,
cut into blocks at random newlines, with non-ASCII and invalid UTF-8 lines,
empty lines and over-long lines mixed in, the events must be the same.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sentinel.logs import Classifier, Signature, SignatureSet, load_signature_file
from sentinel.logs.hsfilter import hyperscan
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "rules" / "signatures.yaml"
CORPUS = ROOT / "tests" / "data" / "logs" / "corpus"
NOISE = [
    b"",
    b'(APIServer pid=1) INFO:     10.0.0.7:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
,
    "modèle chargé ✓ — prêt".encode(),
    b"\xff\xfe garbage \x80\x81 RuntimeError: CUDA error: out of memory",
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79 GiB total) — ✗".encode(),
    "Traceback (most recent call last): ← début".encode(),
]


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(BUNDLED)


def _mixed_log(rng: random.Random) -> list[bytes]:
    lines: list[bytes] = []
    for path in sorted(CORPUS.rglob("*.log")):
        body = [x for x in path.read_bytes().split(b"\n") if not x.startswith(b"#:")]
        for line in body:
            lines.append(line)
            if rng.random() < 0.05:
                lines.append(rng.choice(NOISE))
        lines.extend(rng.choice(NOISE) for _ in range(rng.randint(0, 8)))
        lines.extend([NOISE[1]] * rng.randint(0, 12))  # mostly, the next file is its own event
    return lines


def _blocks(lines: list[bytes], rng: random.Random) -> list[list[bytes]]:
    out, i = [], 0
    while i < len(lines):
        size = rng.randint(1, 3000)
        out.append(lines[i:i + size])
        i += size
    return out


def _by_lines(sigs: SignatureSet, blocks: list[list[bytes]], **kw: int) -> list[LogEvent]:
    c = Classifier(sigs, **kw)
    events, first = [], 1
    for block in blocks:
        texts = [x.decode("utf-8", "replace") for x in block]
        events += c.feed_lines(texts, lambda i, t=texts, f=first: LogEntry(
            "t", "s", 0, t[i], f + i))
        first += len(block)
    return events + c.flush()


def _by_bytes(sigs: SignatureSet, blocks: list[list[bytes]], **kw: int) -> list[LogEvent]:
    c = Classifier(sigs, **kw)
    events, first = [], 1
    for block in blocks:
        events += c.feed_bytes(b"\n".join(block), lambda i, text, f=first: LogEntry(
            "t", "s", 0, text, f + i))
        first += len(block)
    return events + c.flush()


@pytest.mark.parametrize("seed", [1, 2])
def test_feed_bytes_gives_feed_lines_events_over_the_corpus(sigs: SignatureSet,
                                                            seed: int) -> None:
    rng = random.Random(seed)
    blocks = _blocks(_mixed_log(rng), rng)
    expected = _by_lines(sigs, blocks)
    assert len(expected) > 100
    assert _by_bytes(sigs, blocks) == expected


def test_long_lines_fall_back_and_are_truncated_the_same(sigs: SignatureSet) -> None:
    rng = random.Random(3)
    lines = _mixed_log(rng)[:4000]
    lines[100] = b"x" * 700 + b" CUDA out of memory. Tried to allocate 2.00 GiB"  # past the cut
    lines[2000] = "é".encode() * 300 + b" CUDA out of memory. Tried to allocate 1 GiB"
    blocks = _blocks(lines, rng)
    expected = _by_lines(sigs, blocks, max_line_chars=512)
    assert _by_bytes(sigs, blocks, max_line_chars=512) == expected


@pytest.mark.skipif(hyperscan is None, reason="hyperscan is not installed")
def test_scan_bytes_answers_as_match_line_on_every_line(sigs: SignatureSet) -> None:
    lines = _mixed_log(random.Random(4))
    data = b"\n".join(lines)
    found = sigs.scan_bytes(data)
    assert found is not None
    got = {i: (sig, tb) for i, _, sig, tb in found}
    for i, raw in enumerate(lines):
        line = raw.decode("utf-8", "replace")
        want = (sigs.match_line(line), "Traceback (most recent call last):" in line)
        assert got.get(i, (None, False)) == want, (i, line)
    for i, at, _, _ in found:  # each offset lies inside its line
        assert data.count(b"\n", 0, at) == i


@pytest.mark.skipif(hyperscan is None, reason="hyperscan is not installed")
def test_non_ascii_lines_get_pythons_answer_where_hyperscans_would_differ() -> None:
    # On UTF-8 bytes Hyperscan's \w and . see bytes, Python's see characters: these
    # lines match in Python only, so only `match_line` on the decoded line finds them.
    sig = Signature("fr", "other", "error", (r"cause: \w+ fatale", r"bloc .{3} perdu"), "rb")
    sigs = SignatureSet([sig])
    assert sigs.engine == "hyperscan"
    lines = [b"ok", "cause: \u00e9t\u00e9 fatale".encode(), b"ok",
             "bloc \u2713\u2713\u2713 perdu".encode(), b"cause: ascii fatale"] + [b"ok"] * 11
    found = sigs.scan_bytes(b"\n".join(lines))
    assert [(i, s) for i, _, s, _ in found or ()] == [(1, sig), (3, sig), (4, sig)]
    one_by_one = Classifier(sigs)
    expected = [ev for i, x in enumerate(lines) for ev in one_by_one.feed(
        LogEntry("t", "s", 0, x.decode(), i + 1))] + one_by_one.flush()
    assert len(expected) == 1 and expected[0].line_no == 2
    assert _by_bytes(sigs, [lines[:3], lines[3:]]) == expected
