"""The compiled signature set is cached on disk, keyed by the file's hash, and never required."""

from __future__ import annotations

from pathlib import Path

import pytest

import sentinel.logs.signatures as signatures
from sentinel.logs import Classifier, load_signature_file, sigcache
from sentinel.model import LogEntry

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "rules" / "signatures.yaml"
LINES = [
    "(EngineCore_DP0 pid=9) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    '(APIServer pid=1) INFO:     10.0.0.7:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
    "[ 4018.450000] Out of memory: Killed process 935 (python) total-vm:113656kB",
    "Traceback (most recent call last):",
    '  File "/x.py", line 1, in f',
    "QuokkaError: lattice lost",
]


def _events(sigs: signatures.SignatureSet) -> list[tuple[str, int | None]]:
    c = Classifier(sigs)
    entries = [LogEntry("t", "s", i, x, i + 1) for i, x in enumerate(LINES)]
    return [(e.signature, e.line_no) for e in c.feed_many(entries) + c.flush()]


def _no_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("anchors chosen again: the cache was not used")
    monkeypatch.setattr(signatures, "choose_anchors", refuse)


def test_a_second_load_comes_from_the_cache_and_classifies_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sigcache.ENV, str(tmp_path))
    first = load_signature_file(BUNDLED)
    assert len(list(tmp_path.glob("signatures-*.sigset"))) == 1
    _no_building(monkeypatch)
    second = load_signature_file(BUNDLED)
    assert second.signatures == first.signatures and second.anchors == first.anchors
    assert second.engine == first.engine
    assert _events(second) == _events(first) != []


def test_an_edited_file_misses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sigcache.ENV, str(tmp_path / "cache"))
    edited = tmp_path / "signatures.yaml"
    edited.write_text(BUNDLED.read_text())
    load_signature_file(edited)
    edited.write_text(BUNDLED.read_text().replace("'NCCL error'", "'NCCL error:'"))
    assert any("NCCL error:" in p for s in load_signature_file(edited).signatures
               for p in s.patterns)
    assert len(list((tmp_path / "cache").glob("signatures-*.sigset"))) == 2


def test_an_unwritable_or_damaged_cache_only_means_building_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(sigcache.ENV, str(blocker / "cache"))  # mkdir fails
    reference = _events(load_signature_file(BUNDLED))
    monkeypatch.setenv(sigcache.ENV, str(tmp_path))
    load_signature_file(BUNDLED)
    for entry in tmp_path.glob("signatures-*.sigset"):
        entry.write_bytes(entry.read_bytes()[:100])  # cut short
    assert _events(load_signature_file(BUNDLED)) == reference


def test_old_entries_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sigcache.ENV, str(tmp_path))
    for i in range(sigcache.KEEP + 3):
        sigcache.write(f"k{i}", b"x")
    assert len(list(tmp_path.glob("signatures-*.sigset"))) == sigcache.KEEP
