"""`sentinel logs classify FILE…`: run the crash signatures over log files or stdin.

Prints one line per event, `category signature line` (prefixed by the file
name when several files are given), or with `--json` one JSON array of
objects (file, line, category, signature, severity, excerpt). Exit status 0
when every file was read (events or not), 2 when a file could not be read
or the signature file is invalid.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from sentinel.logs.classify import Classifier
from sentinel.logs.signatures import SignatureFileError, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

_BATCH = 8192


def default_signature_file() -> Path:
    """rules/signatures.yaml from the bundled rules folder."""
    from sentinel.paths import bundled_dir

    return bundled_dir("rules") / "signatures.yaml"


def classify_files(paths: Sequence[str], as_json: bool, out: TextIO,
                   signatures: str | Path | None = None, err: TextIO | None = None) -> int:
    """Classify each file (`-` = stdin) and print its events; return the exit status."""
    err = err if err is not None else sys.stderr
    try:
        sigset = load_signature_file(signatures or default_signature_file())
    except (SignatureFileError, FileNotFoundError) as exc:
        print(f"sentinel logs classify: invalid signatures:\n{exc}", file=err)
        return 2
    status = 0
    found: list[tuple[str, LogEvent]] = []
    for path in paths:
        try:
            events = _classify_path(path, sigset)
        except OSError as exc:
            print(f"sentinel logs classify: cannot read {path}: {exc.strerror or exc}", file=err)
            status = 2
            continue
        found.extend((path, ev) for ev in events)
    if as_json:
        json.dump([_as_dict(path, ev) for path, ev in found], out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        several = len(paths) > 1
        for path, ev in found:
            where = f"{path} " if several else ""
            out.write(f"{where}{ev.category} {ev.signature} {ev.line_no}\n")
    return status


def _classify_path(path: str, sigset: SignatureSet) -> list[LogEvent]:
    source = "stdin" if path == "-" else f"file:{path}"
    classifier = Classifier(sigset)
    events: list[LogEvent] = []
    if path == "-":
        stream: BinaryIO = sys.stdin.buffer
        return _run(classifier, _entries(stream, path, source))
    with open(path, "rb") as stream:
        events = _run(classifier, _entries(stream, path, source))
    return events


def _run(classifier: Classifier, batches: Iterator[list[LogEntry]]) -> list[LogEvent]:
    events: list[LogEvent] = []
    for batch in batches:
        events.extend(classifier.feed_many(batch))
    events.extend(classifier.flush())
    return events


def _entries(stream: BinaryIO, target: str, source: str) -> Iterator[list[LogEntry]]:
    """Batches of entries, one per line; invalid UTF-8 is replaced, never fatal."""
    batch: list[LogEntry] = []
    for line_no, raw in enumerate(stream, start=1):
        text = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
        batch.append(LogEntry(target=target, source=source, t_ms=0, text=text, line_no=line_no))
        if len(batch) >= _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _as_dict(path: str, ev: LogEvent) -> dict[str, object]:
    return {
        "file": path, "line": ev.line_no, "category": ev.category, "signature": ev.signature,
        "severity": ev.severity, "excerpt": list(ev.excerpt),
    }
