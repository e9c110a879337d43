"""The lines of one crash event being assembled, and the hits that will name it.

`classify.py` feeds lines into a `Group` (excerpt head and tail, the
traceback being read, the statements and frames the family layer reads);
`naming.py` decides, once the group closes, which hit and family name it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sentinel.logs import families, fatal
from sentinel.logs.signatures import Signature
from sentinel.logs.tracebacks import TracebackTracker
from sentinel.model import LogEntry

MAX_EXCERPT_LINES = 200
TRACEBACK_AFTER = 3  # context after a traceback that matched nothing yet
SYMPTOM_PRIORITY = 25  # hits at or below this (engine dead, catch-all) are symptoms of a cause
MAX_STATEMENTS = 400  # statements and frames kept per group for the family layer
# Root cause over symptom, both ways round. A group holding only symptoms (an
# engine's or scheduler's death) waits this many lines for its cause to join
# (servers print a child's death before, after or between its traceback's
# lines).
SYMPTOM_WAIT = 30


@dataclass(slots=True)
class Hit:
    """A signature matched at one line of a group."""

    signature: Signature
    entry: LogEntry
    line_no: int | None
    cause: bool = False  # the catch-all on a traceback that ended its process: a root cause


@dataclass(slots=True)
class Group:
    """The lines of one event being assembled."""

    before: list[str]
    head: list[str] = field(default_factory=list)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_EXCERPT_LINES // 2))
    omitted: int = 0
    size: int = 0
    hits: list[Hit] = field(default_factory=list)
    traceback: TracebackTracker | None = None
    after_left: int = 0
    # A traceback no signature claimed yet: header, line before it, last exception line.
    tb_header: str | None = None
    tb_before: str = ""
    tb_process: str | None = None
    exception: tuple[LogEntry, str, int | None] | None = None
    tb_start: tuple[LogEntry, int | None] | None = None  # the first header's entry and line
    waited: int = 0  # neutral lines seen while deciding
    # The first exception line in the group that no signature names: when only
    # symptoms (engine dead) follow, it is the root cause that names the event.
    cause: tuple[LogEntry, int | None] | None = None
    # For the family layer (families.py): exception and error lines, frames and processes.
    statements: list[tuple[str, LogEntry, int | None]] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    first: tuple[LogEntry, int | None] | None = None  # the group's first line
    death: bool = False  # opened by a structural record of a death (deaths.py)
    tb_cut: bool = False  # the traceback's header was cut: it started at a frame line

    def note(self, line: str, entry: LogEntry, line_no: int | None, statement: bool,
             in_traceback: bool = False) -> None:
        """Keep what the family layer reads: a statement, or where an exception was raised.

        Inside a traceback only the exception line and what continues it are
        statements (`statement`); frames say where; source lines are neither.
        Outside one, a line is a statement when it reports an error.
        """
        if len(self.statements) >= MAX_STATEMENTS or len(self.where) >= MAX_STATEMENTS:
            return
        frame = families.frames_of(line)
        if frame is not None:
            self.where.append(frame)
        elif statement if in_traceback else families.is_error_line(line):
            self.statements.append((line, entry, line_no))
        process = fatal.process_of(line)
        if process is not None and (not self.where or self.where[-1] != process):
            self.where.append(process)

    def add(self, line: str) -> None:
        """Keep a line in the excerpt (head first, then a rolling tail)."""
        self.size += 1
        if len(self.head) < MAX_EXCERPT_LINES // 2:
            self.head.append(line)
            return
        if len(self.tail) == self.tail.maxlen:
            self.omitted += 1
        self.tail.append(line)

    def hit(self, signature: Signature, entry: LogEntry, line_no: int | None) -> None:
        """Record a signature's match (each signature once) and owe its context after."""
        if all(h.signature is not signature for h in self.hits):  # each signature once
            self.hits.append(Hit(signature, entry, line_no))
        self.after_left = max(self.after_left, self.window())

    def symptoms_only(self) -> bool:
        """Every hit is a symptom (engine dead) and no cause has been seen yet."""
        return bool(self.hits) and self.cause is None and all(
            h.signature.priority <= SYMPTOM_PRIORITY and not h.cause for h in self.hits)

    def window(self) -> int:
        """Context-after lines owed once the matched lines end."""
        if not self.hits:
            return TRACEBACK_AFTER
        after = max(h.signature.context_after for h in self.hits)
        return max(after, SYMPTOM_WAIT) if self.symptoms_only() else after

