"""Real crash and healthy logs from public issues: crashes named, no healthy log alarms.

Each file under tests/data/logs/corpus/ starts with a `#:` header giving the
public issue or pull request it was quoted from (`source`), the category its
first event must have (`expected`; `none` for healthy and tricky logs) and,
for the later files, the `year` it was posted. Two splits:

- `crash/` and `healthy/`: the part the signatures were tuned on;
- `heldout/crash/` and `heldout/healthy/`: a tenth of the corpus set aside
  (committed before any tuning) and never used to write or adjust a signature.

Rule for the held-out split: never tune on it. Nobody reads a held-out miss to
write, widen or reorder a signature; a file is added there only before the
figure is measured, the figure is recorded (tests/data/logs/corpus/README.md)
before any signature change, and afterwards it may move only through work done
on the tuned part at the level of a failure family. A held-out file that
teaches something is not moved into `crash/`: a new example of that family is
found for `crash/` instead.

Each file also says the `year` of the post it was quoted from (`unknown` when no
dated post could be found) and `year-from`, how that year was established.

The signatures were written from what each failure family means; the
accuracies on both splits are the check (at least 97 % and 90 %), and no
healthy log in either split may produce an event.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from sentinel.logs import CATEGORIES, Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "logs" / "corpus"
CRASHES = sorted((CORPUS / "crash").glob("*.log"))
HEALTHY = sorted((CORPUS / "healthy").glob("*.log"))
HELD_CRASHES = sorted((CORPUS / "heldout" / "crash").glob("*.log"))
HELD_HEALTHY = sorted((CORPUS / "heldout" / "healthy").glob("*.log"))
TUNED_ACCURACY = 0.97
# The issue asks 90 % on the held-out split. Measured (README.md beside the
# corpus): 67 of 78 (85.9 %) before the family layer; with 22 files frozen
# before it (batch 3) and the layer built on the tuned part, measured once:
# 92 of 100 (92.0 %), batch 3 alone 19 of 22. Batch 4 (29 crash files from
# 2025-26 threads, frozen before the next family round), measured once after it:
# 21 of 29 (72.4 %; the same 21 with the code before the round), the whole split
# 116 of 129 (89.9 %). Batch 5 (33 crash files), frozen before the next round,
# measured once after it: 22 of 33 (66.7 %), the split 142 of 162 (87.7 %), one of
# its healthy files flagged. Batch 6 (33), frozen before the round that made cause
# over symptom, terminal lines and the loading phase part of the classifier,
# measured once after it: 30 of 33 (90.9 %), the split 180 of 195 (92.3 %), no
# healthy file flagged (README.md beside the corpus). Batch 7 (38 crash files, two
# thirds non-NVIDIA hardware or OS-level records), frozen before issue 51's round
# (structural deaths, the family layer opening events), measured once after it: 26 of
# 38 (68.4 %; 23 with the code before the round), the split 206 of 233 (88.4 %), no
# healthy file flagged. Tuned batch 8 (issue 51's second round: family work on new tuned
# examples of batch 7's miss families, read as a list only) took the split to 215 of 233
# (92.3 %; batch 7 34 of 38), read as optimistic: batch 7's misses were known. The
# floor guards the measured figure; a fresh batch is the honest check. Batch 8 (41
# crash files, 34 non-NVIDIA, gathered blind while that round ran), measured once after
# it: 22 of 41 (53.7 %; 19 with the code before the round), 26 of 41 raised an event,
# the split 237 of 274 (86.5 %), no healthy file flagged. A third round (crash reports
# open events by their shape) took batch 8 to 26 of 41 (optimistic: its misses were
# known); batch 9 (34 crash files, gathered blind during that round), measured once after
# it: 16 of 34 (47.1 %; 10 with the code before both rounds), 23 raised an event, the
# split 259 of 308 (84.1 %), and one of its 11 healthy files flagged (also flagged by the
# code before both rounds). A fourth round (phase, cause over symptom across the window,
# more shapes; batch 9's misses read as a list) took batch 9 to 23 of 34 and the split
# to 267 of 308 (86.7 %), optimistic; batch 10 (33 crash files, 12 healthy, gathered
# blind during that round), measured once after it: 20 of 33 (60.6 %; 17 with the code
# before the round), 25 raised an event, no healthy file flagged; the split 287 of 341
# (84.2 %).
HELD_OUT_ACCURACY = 0.90
HELD_OUT_FLOOR = 0.84
# Held-out healthy files the classifier flags, as measured: the split is never tuned on,
# so a miss stays until family work on the tuned part fixes it (strict: a fix shows).
# (Batch 9's llama.cpp fit-params file, flagged at its one measurement, is no longer
# flagged since issue 51's fourth round: a fatal marker below error level is none.)
HELD_FLAGGED: dict[str, str] = {}


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


def verdict(sigs: SignatureSet, path: Path) -> tuple[str, str]:
    """(expected category, first event's category or 'none') for one corpus file."""
    header, lines = read(path)
    events = classify(sigs, lines)
    return header["expected"], events[0].category if events else "none"


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def test_the_corpus_is_large_enough_and_well_formed() -> None:
    assert len(CRASHES) + len(HELD_CRASHES) >= 160 and len(HEALTHY) + len(HELD_HEALTHY) >= 50
    held = {p.name for p in HELD_CRASHES + HELD_HEALTHY}
    assert not held & {p.name for p in CRASHES + HEALTHY}  # a file is in one split only
    for path in CRASHES + HEALTHY + HELD_CRASHES + HELD_HEALTHY:
        header, lines = read(path)
        assert header.get("source", "").startswith("https://github.com/"), path.name
        expected = header.get("expected")
        assert expected in (*CATEGORIES, "none"), path.name
        assert (expected == "none") == (path in HEALTHY + HELD_HEALTHY), path.name
        assert any(line.strip() for line in lines), path.name
        year = header.get("year", "")
        assert year == "unknown" or (year.isdigit() and 2010 <= int(year) <= 2026), path.name


def test_two_thirds_of_the_corpus_is_from_2025_26() -> None:
    paths = CRASHES + HEALTHY + HELD_CRASHES + HELD_HEALTHY
    recent = [p for p in paths if read(p)[0].get("year") in ("2025", "2026")]
    assert len(recent) * 3 >= len(paths) * 2, f"{len(recent)} of {len(paths)}"


def accuracy(sigs: SignatureSet, paths: list[Path]) -> tuple[float, list[str]]:
    """Share of crash logs whose first event has the expected category, and the misses."""
    misses = []
    for path in paths:
        expected, got = verdict(sigs, path)
        if got != expected:
            misses.append(f"{path.name}: expected {expected}, got {got}")
    return 1 - len(misses) / len(paths), misses


def test_the_tuned_part_names_at_least_97_percent_of_crashes(sigs: SignatureSet) -> None:
    share, misses = accuracy(sigs, CRASHES)
    assert share >= TUNED_ACCURACY, f"{share:.1%}: {misses}"


def test_the_held_out_split_stays_at_its_measured_floor(sigs: SignatureSet) -> None:
    share, misses = accuracy(sigs, HELD_CRASHES)
    assert share >= HELD_OUT_FLOOR, f"{share:.1%}: {misses}"


@pytest.mark.xfail(strict=True, reason="issue 51 is open: fresh held-out batches 8, 9 and "
                   "10 scored 22 of 41, 16 of 34 and 20 of 33; the split is at 84.2 %")
def test_the_held_out_split_names_at_least_90_percent_of_crashes(sigs: SignatureSet) -> None:
    share, misses = accuracy(sigs, HELD_CRASHES)
    assert share >= HELD_OUT_ACCURACY, f"{share:.1%}: {misses}"


@pytest.mark.parametrize("path", CRASHES + HELD_CRASHES, ids=lambda p: p.stem)
def test_batching_does_not_change_the_answer(sigs: SignatureSet, path: Path) -> None:
    _, lines = read(path)
    assert classify(sigs, lines, batch=1) == classify(sigs, lines)


def _healthy_params() -> list[object]:
    return [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=HELD_FLAGGED[p.name]))
            if p.name in HELD_FLAGGED else p for p in HEALTHY + HELD_HEALTHY]


@pytest.mark.parametrize("path", _healthy_params(), ids=lambda p: p.stem)
def test_no_healthy_or_tricky_log_produces_an_event(sigs: SignatureSet, path: Path) -> None:
    _, lines = read(path)
    events = classify(sigs, lines)
    assert events == [], f"{path.name}: {[(e.signature, e.excerpt[:3]) for e in events]}"


def family_table(sigs: SignatureSet) -> str:
    """Per expected category: right / total on each split (printed for the closing note)."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for offset, paths in ((0, CRASHES), (2, HELD_CRASHES)):
        for path in paths:
            expected, got = verdict(sigs, path)
            rows[expected][offset] += got == expected
            rows[expected][offset + 1] += 1
    out = [f"{'category':26} {'tuned':>9} {'held-out':>9}"]
    for category in sorted(rows):
        r = rows[category]
        out.append(f"{category:26} {r[0]:>4}/{r[1]:<4} {r[2]:>4}/{r[3]:<4}")
    years = Counter(read(p)[0].get("year", "?") for p in CRASHES + HEALTHY + HELD_CRASHES
                    + HELD_HEALTHY)
    out.append(f"files by year: {dict(sorted(years.items()))}")
    return "\n".join(out)


if __name__ == "__main__":  # python tests/test_logs_corpus.py: the per-family table
    signatures = load_signature_file(ROOT / "rules" / "signatures.yaml")
    print(family_table(signatures))
    for name, paths in (("tuned", CRASHES), ("held-out", HELD_CRASHES)):
        share, misses = accuracy(signatures, paths)
        print(f"{name}: {share:.1%} of {len(paths)}", *misses, sep="\n  ")
    flagged = [p.name for p in HEALTHY + HELD_HEALTHY if classify(signatures, read(p)[1])]
    print(f"healthy flagged: {len(flagged)} of {len(HEALTHY) + len(HELD_HEALTHY)} {flagged}")
