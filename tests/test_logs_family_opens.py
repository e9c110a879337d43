"""The family layer opens an event (issue 51): a family's words meet a fatal marker.

A line at an error or fatal level, an abort or an exit opens an event only
when it, or an error line among the 30 before it, speaks the words of a
family that stops a process; the event is named after that family. A
marker with no such words, or such words with no marker, raise nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
INFO = [f"INFO 12-07 10:00:{i:02d} [model_runner.py:1100] Loading model weights took 4.1 GB"
        for i in range(3)]


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def run(sigs: SignatureSet, lines: list[str], batch: int = 4) -> list[LogEvent]:
    c = Classifier(sigs)
    es = [LogEntry("t", "file:x", 1_000 + i, x, i + 1) for i, x in enumerate(lines)]
    out: list[LogEvent] = []
    for i in range(0, len(es), batch):
        out += c.feed_many(es[i:i + batch])
    return out + c.flush()


@pytest.mark.parametrize(("lines", "signature"), [
    # the cache the download writes to is not writable, then the server gives up
    (["WARNING 12-07 10:00:01 [hub.py:80] Ignored error while writing commit hash to "
      "/root/.cache/huggingface/hub/models--x/refs/main: [Errno 13] Permission denied: "
      "'/root/.cache/huggingface/hub'",
      "ERROR 12-07 10:00:02 [server.py:40] Exiting: the model could not be fetched"],
     "model_load_failed"),
    # a fatal line in a collective's words
    (["F1207 10:00:02.123 ProcessGroupGloo.cpp:144] Fatal: gloo allreduce lost its peer"],
     "collective_failure"),
    # host memory refused, then the process aborts
    (["terminate: std::bad_alloc while reserving the host KV buffer", "Aborted"],
     "host_memory_exhausted"),
], ids=["cache-permission", "collective-fatal", "host-memory-abort"])
def test_a_familys_words_next_to_a_fatal_marker_open_an_event(
        sigs: SignatureSet, lines: list[str], signature: str) -> None:
    events = run(sigs, INFO + lines + INFO)
    assert [e.signature for e in events] == [signature]


@pytest.mark.parametrize("lines", [
    ["ERROR 12-07 10:00:02 [serving.py:200] Error in request chatcmpl-1: client disconnected"],
    ["WARNING 12-07 10:00:02 [worker.py:80] CUDA out of memory is likely at this batch size"],
    ["INFO 12-07 10:00:02 [engine.py:300] Aborted request chatcmpl-7."],
], ids=["marker-without-words", "words-without-marker", "an-aborted-request"])
def test_a_marker_or_the_words_alone_raise_nothing(sigs: SignatureSet,
                                                    lines: list[str]) -> None:
    assert run(sigs, INFO + lines + INFO) == []
