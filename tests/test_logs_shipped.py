"""The bundled signature file ships its anchors: a first run chooses none (issue 34)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sentinel.logs.signatures as signatures
from sentinel.logs import load_signature_file, shipped, sigcache
from sentinel.logs.anchors import pattern_units
from sentinel.logs.signatures import parse_signatures, signature_dicts

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "rules" / "signatures.yaml"
REGENERATE = ("stale: run `python -m sentinel.logs.shipgen` and commit "
              "rules/signatures.compiled.json")


def test_the_shipped_compilation_is_current_and_sound() -> None:
    source = BUNDLED.read_bytes()
    doc = shipped.read(BUNDLED, source)
    assert doc is not None, REGENERATE
    assert doc["signatures"] == json.loads(json.dumps(
        signature_dicts(parse_signatures(source.decode(), str(BUNDLED))))), REGENERATE
    anchors = doc["anchors"]
    assert signatures.TRACEBACK in anchors
    for sig in doc["signatures"]:  # every alternative of every pattern holds an anchor
        for pattern in sig["patterns"]:
            for runs in pattern_units(pattern):
                assert any(a in run for a in anchors for run in runs), (sig["name"], pattern)


def test_a_first_run_takes_the_shipped_anchors_and_caches_the_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sigcache.ENV, str(tmp_path))

    def refuse(*_: object) -> None:
        raise AssertionError("anchors chosen on a first run: the shipped file was not used")

    monkeypatch.setattr(signatures, "choose_anchors", refuse)
    monkeypatch.setattr(signatures, "parse_signatures", refuse)
    sigset = load_signature_file(BUNDLED)
    doc = shipped.read(BUNDLED, BUNDLED.read_bytes())
    assert doc is not None
    assert sigset.anchors == tuple(doc["anchors"])
    assert json.loads(json.dumps(signature_dicts(sigset.signatures))) == doc["signatures"]
    assert len(list(tmp_path.glob("signatures-*.sigset"))) == 1  # the next run starts warm


def test_an_edited_or_damaged_copy_does_not_take_the_shipped_file(tmp_path: Path) -> None:
    copy = tmp_path / "signatures.yaml"
    shutil.copy(BUNDLED, copy)
    shutil.copy(shipped.path_for(BUNDLED), shipped.path_for(copy))
    assert shipped.read(copy, copy.read_bytes()) is not None
    edited = copy.read_bytes() + b"\n# a comment is an edit too\n"
    assert shipped.read(copy, edited) is None
    shipped.path_for(copy).write_text("{ not json")
    assert shipped.read(copy, copy.read_bytes()) is None
