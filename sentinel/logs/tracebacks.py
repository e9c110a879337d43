"""Where a multi-line Python (or JAX/XLA) traceback in a log ends.

Loggers print a traceback as many lines; vLLM repeats its prefix on each
(`(EngineCore_0 pid=897) ERROR 08-07 01:47:24 [core.py:398] `), plain stderr
has none, `docker logs -t` puts a fresh timestamp on each. So the prefix is
whatever precedes `Traceback (most recent call last):` on the first line, and
a later line belongs to the traceback when it carries the same prefix (equal
up to digits when the prefix starts with a timestamp) and its body is:

- indented or blank (frames, source lines, `^^^^` markers, indented detail);
- a chaining line ("During handling of the above exception...", "The above
  exception was the direct cause...") or a new `Traceback` header;
- the exception line itself (the first unindented body after the frames);
- after the exception line, anything that does not look like the start of a
  new log record: XLA's multi-line messages ("Total hbm usage >= 65.05G:",
  "Program hbm requirement ...") continue without indentation.

A log record may hold a message and then the traceback (SGLang's `[time TP0]
Scheduler hit an exception: Traceback ...`): when the first line after such a
header is a bare frame line, the traceback has no prefix.

A traceback whose header line was cut (a collector's line limit, a quoted
excerpt) starts at its first frame line: the prefix is what precedes
`File "..."` without the frame's indentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sentinel.logs.signatures import TRACEBACK

_CHAINS = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
# The start of a new log record: a level word, a timestamp or date, a glog
# header (I0511 18:18:50.79), a bracketed or parenthesised prefix.
_LOG_START = re.compile(
    r"(?:\(|\[|\d|[IWEF]\d{4} |(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|TRACE)\b"
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d )"
)
_DIGITS = re.compile(r"\d")
# A traceback's frame line, where the header was cut: `  File "x.py", line 3, in f`.
_FRAME = re.compile(r'File "[^"]+", line \d+, in ')
# A frame line with nothing before it: a traceback printed inside one log record.
_OWN_FRAME = re.compile(r' {2}File "[^"]+", line \d+, in ')
# The exception line that ends a traceback: `ValueError: x`, `torch._dynamo.exc.Foo: y`.
_EXCEPTION = re.compile(r"\s*[A-Za-z_][\w.]*(?:Error|Exception|Failure|Fault|Exit)\b")


@dataclass(slots=True)
class TracebackTracker:
    """Follows one traceback line by line; `accepts(line)` says whether the line is part of it."""

    prefix: str
    fuzzy: bool  # prefix starts with a timestamp: compare it up to digits
    after_exception: bool = False
    cut: bool = False  # started at a frame line: the header was cut
    seen: bool = False  # a line after the header was accepted

    @classmethod
    def start(cls, line: str) -> TracebackTracker:
        """A tracker for the traceback whose header is `line`."""
        if TRACEBACK not in line and (frame := _FRAME.search(line)) is not None:
            # a traceback whose header was cut: the prefix is what precedes the frame
            # without the frame's own indentation (`[core.py:398]   File ...`)
            prefix = line[: frame.start()].rstrip()
            prefix = f"{prefix} " if prefix else ""
            return cls(prefix, prefix[:1].isdigit(), cut=True)
        prefix = line[: line.find(TRACEBACK)] if TRACEBACK in line else ""
        if prefix and not prefix[-1].isspace() and prefix[-1] not in ")]|:>":
            prefix = ""  # junk glued to the header (a terminal's "^C" echo), not a log prefix
        return cls(prefix, prefix[:1].isdigit())

    def header(self) -> str:
        """The header line this traceback has or would have had (its prefix and the marker)."""
        return f"{self.prefix}{TRACEBACK}"

    def _body(self, line: str) -> str | None:
        """The line without the traceback's prefix, or None when the prefix differs."""
        n = len(self.prefix)
        if line.startswith(self.prefix):
            return line[n:]
        if self.fuzzy and _DIGITS.sub("0", line[:n]) == _DIGITS.sub("0", self.prefix):
            return line[n:]
        return None

    def accepts(self, line: str) -> bool:
        """Whether `line` continues the traceback (updates the tracker's phase)."""
        body = self._body(line)
        if body is None and not self.seen and self.prefix.rstrip().endswith(":") \
                and _OWN_FRAME.match(line):
            # one log record holding a message and its traceback (SGLang's "[time TP0]
            # Scheduler hit an exception: Traceback ..."): the frames carry no prefix
            self.prefix, self.fuzzy, body = "", False, line
        if body is None:
            return False
        self.seen = True
        if body.startswith(TRACEBACK):
            self.after_exception = False
            return True
        if TRACEBACK in body:
            return False  # another process's traceback (another prefix) begins
        if not body.strip() or body[0] in " \t" or body.startswith(_CHAINS):
            return True
        if not self.after_exception:
            if self.cut and _EXCEPTION.match(body) is None:
                return False  # frames of a cut traceback end at an exception or not at all
            self.after_exception = True  # the exception line: `torch.OutOfMemoryError: ...`
            return True
        return _LOG_START.match(body) is None
