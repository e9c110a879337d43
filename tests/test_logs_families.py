"""Failure families: the cause names the event, whatever follows it in the same excerpt.

Each case is one failure as its server prints it, shortened to the lines that
decide the category: the root cause (a context-length refusal inside the
scheduler's traceback, an exception on the engine's start-up path, a hang the
watchdog ended) and the symptoms after it (the child's SIGQUIT, the "Killed"
of the process tree, engine-dead lines). The symptoms stay on the excerpt; the
category is the cause's. The corpus (tests/test_logs_corpus.py) holds the real
logs of each family; these pin the semantics on the smallest shape of each
(tests/data/logs/families/: composed from the corpus's lines, not quoted whole).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "logs" / "families"


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def events(sigs: SignatureSet, text: str) -> list[LogEvent]:
    c = Classifier(sigs)
    lines = text.strip("\n").split("\n")
    entries = [LogEntry("t", "file:x", 1_000 + i, line, i + 1) for i, line in enumerate(lines)]
    return c.feed_many(entries) + c.flush()


def case(name: str) -> str:
    """One family's shortest shape (tests/data/logs/families/NAME.log)."""
    return (CASES / f"{name}.log").read_text(encoding="utf-8")


@pytest.mark.parametrize(("name", "category", "signature"), [
    # the scheduler died of a refused prompt: not engine_dead, not the OOM killer
    ("sglang_context_in_scheduler", "context_length_exceeded", "vllm_context_length_exceeded"),
    # SGLang killed its own tree after the watchdog: a hang, not the OOM killer
    ("sglang_watchdog", "engine_dead", "engine_hang_watchdog"),
    # an unknown exception on the start-up path: a start-up failure, not engine_dead
    ("v1_startup_assert", "startup_failure", "engine_startup_exception"),
    # a known root cause on the start-up path outranks the start-up frames
    ("startup_model_load", "startup_failure", "model_load_failed"),
    # the same unknown exception while serving stays the catch-all's (its cause, not the frames)
    ("v1_runtime_assert", "other", "unclassified_crash"),
])
def test_one_event_named_by_the_cause_with_the_symptoms_on_its_excerpt(
        sigs: SignatureSet, name: str, category: str, signature: str) -> None:
    text = case(name)
    found = events(sigs, text)
    assert [(e.category, e.signature) for e in found] == [(category, signature)]
    last = text.strip("\n").split("\n")[-1]
    assert last in found[0].excerpt  # the symptom's line is on the cause's excerpt


def test_killed_without_sglang_killing_its_tree_is_still_the_oom_killer(sigs: SignatureSet) -> None:
    found = events(sigs, """
INFO 05-01 10:00:00 [loader.py:458] Loading weights took 38.52 seconds
Killed
""")
    assert [(e.category, e.signature) for e in found] == [("host_oom_killed", "process_killed")]
