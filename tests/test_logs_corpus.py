"""Real crash and healthy logs from public issues: every crash named, no healthy log alarms.

Each file under tests/data/logs/corpus/ starts with a `#:` header giving the
public issue or pull request it was quoted from (`source`) and the category
its first event must have (`expected`; `none` for healthy and tricky logs).
The signatures were written from what each failure family means, not from
these lines; this corpus is the check.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sentinel.logs import CATEGORIES, Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "logs" / "corpus"
CRASHES = sorted((CORPUS / "crash").glob("*.log"))
HEALTHY = sorted((CORPUS / "healthy").glob("*.log"))


def read(path: Path) -> tuple[dict[str, str], list[str]]:
    """The header fields and the log lines of a corpus file."""
    header: dict[str, str] = {}
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#: ") and not lines:
            key, _, value = line[3:].partition(": ")
            header[key] = value.strip()
        else:
            lines.append(line)
    return header, lines


def classify(sigs: SignatureSet, lines: list[str], batch: int = 64) -> list[LogEvent]:
    c = Classifier(sigs)
    entries = [LogEntry("t", "file:corpus", 1_000 + i, line, i + 1) for i, line in enumerate(lines)]
    out: list[LogEvent] = []
    for i in range(0, len(entries), batch):
        out += c.feed_many(entries[i:i + batch])
    return out + c.flush()


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def test_the_corpus_is_large_enough_and_well_formed() -> None:
    assert len(CRASHES) >= 80 and len(HEALTHY) >= 25
    for path in CRASHES + HEALTHY:
        header, lines = read(path)
        assert header.get("source", "").startswith("https://github.com/"), path.name
        expected = header.get("expected")
        assert expected in (*CATEGORIES, "none"), path.name
        assert (expected == "none") == (path in HEALTHY), path.name
        assert any(line.strip() for line in lines), path.name


@pytest.mark.parametrize("path", CRASHES, ids=[p.stem for p in CRASHES])
def test_every_crash_log_gets_its_expected_category(sigs: SignatureSet, path: Path) -> None:
    header, lines = read(path)
    events = classify(sigs, lines)
    assert events, f"{path.name}: no event (expected {header['expected']})"
    assert events[0].category == header["expected"], (
        f"{path.name}: {[(e.signature, e.category, e.line_no) for e in events]}")
    assert classify(sigs, lines, batch=1) == events  # batching does not change the answer


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_no_healthy_or_tricky_log_produces_an_event(sigs: SignatureSet, path: Path) -> None:
    _, lines = read(path)
    events = classify(sigs, lines)
    assert events == [], f"{path.name}: {[(e.signature, e.excerpt[:3]) for e in events]}"


def category_counts() -> Counter[str]:
    """Crash logs per expected category (printed in the closing note)."""
    return Counter(read(p)[0]["expected"] for p in CRASHES)


if __name__ == "__main__":  # python tests/test_logs_corpus.py: the per-category counts
    for category, n in sorted(category_counts().items()):
        print(f"{category:26} {n}")
    print(f"{'crash logs':26} {len(CRASHES)}\n{'healthy/tricky logs':26} {len(HEALTHY)}")
