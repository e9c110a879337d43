"""`sentinel logs classify FILE…`: run the crash signatures over log files or stdin.

Prints one line per event, `category signature line` (prefixed by the file
name when several files are given), or with `--json` one JSON array of
objects (file, line, category, signature, severity, excerpt). Exit status 0
when every file was read (events or not), 2 when a file could not be read
or the signature file is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from sentinel import exitcodes

if TYPE_CHECKING:
    from sentinel.logs.classify import Classifier
    from sentinel.logs.signatures import SignatureSet
    from sentinel.model import LogEntry, LogEvent

_CHUNK = 1 << 20  # bytes read at a time


def add_parser(sub: Any) -> None:
    """Register `logs classify`."""
    logs = sub.add_parser("logs", help="crash signatures in logs").add_subparsers(
        title="what", metavar="WHAT")
    lc = logs.add_parser(
        "classify", help="run the crash signatures over log files and print the events",
        description="Run the crash signatures (rules/signatures.yaml) over log files\n"
        "or stdin. "
        "Prints one line per event: CATEGORY SIGNATURE LINE (the file name first when\n"
        "several files are given); a multi-line traceback is one event.\n"
        "Exit status: 0 when every file was read (events or not), 2 when a file could\n"
        "not be read or the signature file is invalid.",
        epilog="examples:\n  sentinel logs classify /var/log/vllm.log\n"
        "  docker logs vllm 2>&1 | sentinel logs classify -\n"
        "  sentinel logs classify --json a.log b.log",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    lc.add_argument("files", nargs="+", metavar="FILE", help="log file, or - for stdin")
    lc.add_argument("--json", action="store_true",
                    help="print a JSON array of objects (file, line, category, signature, "
                    "severity, excerpt)")
    lc.add_argument("--signatures", metavar="FILE",
                    help="signature file (default: the bundled rules/signatures.yaml)")
    lc.set_defaults(func=cmd_classify, quick_exit=True)


def cmd_classify(args: argparse.Namespace) -> int:
    """Handle `sentinel logs classify`."""
    return classify_files(args.files, args.json, sys.stdout, signatures=args.signatures)


def default_signature_file() -> Path:
    """rules/signatures.yaml from the bundled rules folder."""
    from sentinel.paths import bundled_dir

    return bundled_dir("rules") / "signatures.yaml"


def classify_files(paths: Sequence[str], as_json: bool, out: TextIO,
                   signatures: str | Path | None = None, err: TextIO | None = None) -> int:
    """Classify each file (`-` = stdin) and print its events; return the exit status."""
    from sentinel.logs.signatures import SignatureFileError, load_signature_file

    err = err if err is not None else sys.stderr
    try:
        sigset = load_signature_file(signatures or default_signature_file())
    except (SignatureFileError, FileNotFoundError) as exc:
        print(f"sentinel logs classify: invalid signatures:\n{exc}", file=err)
        return exitcodes.CONFIG  # as `check config` and `run` for the same file
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
    from sentinel.logs.classify import Classifier

    source = "stdin" if path == "-" else f"file:{path}"
    classifier = Classifier(sigset)
    if path == "-":
        return _run(classifier, sys.stdin.buffer, path, source)
    with open(path, "rb") as stream:
        return _run(classifier, stream, path, source)


def _run(classifier: Classifier, stream: BinaryIO, target: str, source: str) -> list[LogEvent]:
    """Classify the stream in chunks of whole lines; invalid UTF-8 is replaced, never fatal.

    Lines are split as bytes (a newline byte is never inside a UTF-8
    character, nor inside an invalid sequence the decoder replaces), and a
    line is decoded, and given an entry, only when the classifier looks at
    it (`Classifier.feed_bytes`).
    """
    from sentinel.model import LogEntry

    events: list[LogEvent] = []
    first = 1  # line number of the chunk's first line
    rest = b""
    while True:
        data = stream.read(_CHUNK)
        if not data:
            break
        if rest:
            data = rest + data
        cut = data.rfind(b"\n")
        if cut == -1:
            rest = data
            continue
        rest = data[cut + 1:]
        block = data[:cut]
        if b"\r" in block:  # CRLF: drop the CR as the reader of a LF file would see it
            block = block.replace(b"\r\n", b"\n")

        def entry_of(i: int, text: str, first: int = first) -> LogEntry:
            return LogEntry(target=target, source=source, t_ms=0, text=text, line_no=first + i)

        lines = block.count(b"\n") + 1
        events.extend(classifier.feed_bytes(block, entry_of, lines=lines))
        first += lines
    if rest:
        text = rest.decode("utf-8", errors="replace").rstrip("\r")
        events.extend(classifier.feed_lines(
            [text], lambda _: LogEntry(target=target, source=source, t_ms=0, text=text,
                                       line_no=first)))
    events.extend(classifier.flush())
    return events


def _as_dict(path: str, ev: LogEvent) -> dict[str, object]:
    return {
        "file": path, "line": ev.line_no, "category": ev.category, "signature": ev.signature,
        "severity": ev.severity, "excerpt": list(ev.excerpt),
    }
