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


@dataclass(slots=True)
class TracebackTracker:
    """Follows one traceback line by line; `accepts(line)` says whether the line is part of it."""

    prefix: str
    fuzzy: bool  # prefix starts with a timestamp: compare it up to digits
    after_exception: bool = False

    @classmethod
    def start(cls, line: str) -> TracebackTracker:
        """A tracker for the traceback whose header is `line`."""
        prefix = line[: line.find(TRACEBACK)] if TRACEBACK in line else ""
        if prefix and not prefix[-1].isspace() and prefix[-1] not in ")]|:>":
            prefix = ""  # junk glued to the header (a terminal's "^C" echo), not a log prefix
        return cls(prefix, prefix[:1].isdigit())

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
        if body is None:
            return False
        if body.startswith(TRACEBACK):
            self.after_exception = False
            return True
        if not body.strip() or body[0] in " \t" or body.startswith(_CHAINS):
            return True
        if not self.after_exception:
            self.after_exception = True  # the exception line: `torch.OutOfMemoryError: ...`
            return True
        return _LOG_START.match(body) is None
