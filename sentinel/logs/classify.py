"""Turn a stream of log lines into crash events, each with its excerpt.

One `Classifier` per log stream (per source of a target): context lines only
make sense within one stream. `feed(entry)` takes one entry, `feed_many`
a batch (the fast path: the prefilter runs over the whole batch at once and
quiet lines are never looked at one by one), `flush()` ends the stream.

An event is a *group* of lines: it opens on a line that matches a signature
or starts a traceback, keeps the traceback together (see `tracebacks.py`),
absorbs a traceback that follows within the context-after window (vLLM
prints the engine's traceback, then the API server's EngineDeadError), and
closes once `context_after` quiet lines have passed. Within a group the hit
of the highest priority names the event and each signature counts once;
a traceback that matches no signature produces no event. A different
signature on a plain line closes the group and opens a new one.

Excerpts are capped (lines and bytes, keeping head and tail); lines longer
than `max_line_chars` are truncated before matching and the truncation is
recorded in the line itself and in `stats`.

A traceback no signature claims is held while the lines that follow decide
whether the process survived it (see `fatal.py`): when it did not, the event
is the catch-all `unclassified_crash` (category `other`). A symptom's hit
(lower priority, e.g. engine-dead) inside an open group's window joins the
group instead of opening its own event, so the root cause names the event
and the symptom's lines are part of its excerpt. When only symptoms matched,
the first exception in the group that no signature knows (an assertion in
the scheduler, an error in a kernel library) is their cause, and the
catch-all names the event at that line.

One crash, one event: a structural record of a death (the container
engine's exit, systemd's unit result, the kernel's OOM kill; see
`deaths.py`) within `deaths.DEDUPE_LINES` lines after an event of the same
stream is that event's death and opens nothing; an event such a record
opens shows `deaths.CONTEXT_BEFORE` lines before it.

Crash reports known by their shape (`SHAPES`: the kernel's oops, a
debugger's backtrace of a fatal signal, a runtime's error status) are
symptom-level hits: a cause joins and names them, a report while loading is
a start-up failure (`phase.py`), and one right after a crash's event is that
crash's. A frame line outside any traceback with no header in the ring
(`FRAMES`) starts a traceback whose header was cut; only an exception line
after its frames makes it a crash report.

Time: `flush(now_ms)` on a quiet poll lets an undecided traceback wait
`fatal.SETTLE_MS` from the batch that brought the stream's last line (not
from the last poll), on the caller's clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sentinel.logs import deaths, families, fatal
from sentinel.logs.bytelines import ByteLines, may_hold_long_line
from sentinel.logs.groups import (
    MAX_EXCERPT_LINES,
    SYMPTOM_PRIORITY,
    TRACEBACK_AFTER,
    Group,
    Hit,
)
from sentinel.logs.naming import SHAPES, Namer
from sentinel.logs.signatures import TRACEBACK, Signature, SignatureSet
from sentinel.logs.tracebacks import TracebackTracker
from sentinel.model import LogEntry, LogEvent

MAX_LINE_CHARS = 65_536
MAX_EXCERPT_CHARS = 65_536
MAX_GROUP_LINES = 5_000  # a group this long is closed regardless (a runaway traceback)
CATCH_ALL = "unclassified_crash"
# A fatal marker (error level, abort, exit): an event only with a family's words in its
# window, named after that family (families.opening); never a name of its own.
MARKER = "family_fatal_marker"
NATIVE = "native_crash"  # a process's native death: a cause printed after it joins it
# A frame line outside any traceback with no header in the ring: a traceback whose
# header was cut; it starts a traceback there and is never a hit of its own.
FRAMES = "python_frames_cut"
# The family layer reads this many lines before a group for a cause printed ahead of
# it (c10d's socket timing out, then the scheduler dying); see groups.SYMPTOM_WAIT.
FAMILY_LOOKBACK = 30
# Reports of a death that follow its crash's own lines (see `_same_death`).
REPORTS = SHAPES | {"python_fault_dump"}
# Used when a signature file defines no `unclassified_crash` of its own.
DEFAULT_CATCH_ALL = Signature(
    name=CATCH_ALL, category="other", severity="critical",
    patterns=("Fatal Python error",), priority=5, context_before=5, context_after=5,
    runbook=("A process ended on an error no crash signature knows (the excerpt shows the "
             "exception or signal). Restart the server if it did not come back, read the "
             "first exception in the excerpt, and add a signature for it."),
)


@dataclass(frozen=True, slots=True)
class ClassifierStats:
    """Counters since the classifier was created."""

    lines: int
    truncated_lines: int
    events: int


class Classifier:
    """Matches log entries against signatures and assembles `LogEvent`s with excerpts."""

    def __init__(self, signatures: SignatureSet, *, max_line_chars: int = MAX_LINE_CHARS,
                 max_excerpt_lines: int = MAX_EXCERPT_LINES,
                 max_excerpt_chars: int = MAX_EXCERPT_CHARS) -> None:
        self.signatures = signatures
        self.max_line_chars = max_line_chars
        self.max_excerpt_lines = max_excerpt_lines
        self.max_excerpt_chars = max_excerpt_chars
        self._ring: deque[str] = deque(maxlen=max(signatures.max_before, FAMILY_LOOKBACK, 1))
        self._group: Group | None = None
        self._lines = 0
        self._truncated = 0
        self._events = 0
        self._last_line_ms: int | None = None  # when the last non-empty batch came
        self._event_at: int | None = None  # self._lines when the last event was emitted
        self._event_ms = 0  # and the time of its last hit (the entries' clock)
        self._event_category = ""  # and its category
        found = signatures.by_name(CATCH_ALL)
        self._catch_all = found if found is not None else DEFAULT_CATCH_ALL
        self._namer = Namer(signatures, self._catch_all)

    @property
    def pending(self) -> LogEntry | None:
        """The first entry of the event still being assembled (None: nothing is open).

        Its lines are not on record yet: a reader that saves where it stopped
        saves the position before this entry, so a restart reads them again.
        """
        group = self._group
        return None if group is None or group.first is None else group.first[0]

    @property
    def stats(self) -> ClassifierStats:
        """Lines seen, lines truncated, events emitted."""
        return ClassifierStats(self._lines, self._truncated, self._events)

    def feed(self, entry: LogEntry) -> list[LogEvent]:
        """Classify one entry (several lines when its text has newlines); return closed events."""
        events: list[LogEvent] = []
        for offset, line in enumerate(entry.text.split("\n")):
            line_no = None if entry.line_no is None else entry.line_no + offset
            line = self._clean(line)
            anchored = self.signatures.has_anchor(line)
            signature = self.signatures.match_line(line) if anchored else None
            events.extend(self._step(entry, line, line_no, signature,
                                     anchored and TRACEBACK in line))
        return events

    def feed_many(self, entries: Sequence[LogEntry], now_ms: int | None = None) -> list[LogEvent]:
        """Classify a batch; same result as feeding one by one, much faster on quiet logs.

        `now_ms` (when the batch was read, on Sentinel's clock) starts the settle
        time of a traceback still undecided at the end of the batch (see `flush`).
        An empty batch leaves it alone: the quiet time runs from the last *line*,
        so a poller that calls this on every (empty) poll still sees it run out.
        """
        return self.feed_lines([e.text for e in entries], entries.__getitem__, now_ms)

    def feed_lines(self, texts: list[str], entry_of: Callable[[int], LogEntry],
                   now_ms: int | None = None) -> list[LogEvent]:
        """`feed_many` for a reader that has the lines as text (`sentinel logs classify`).

        `entry_of(i)` makes the entry of line i; it is called only for the lines
        the classifier looks at (matches, tracebacks, their context), so a quiet
        stretch costs no objects at all.
        """
        if not texts:
            return []
        if now_ms is not None:
            self._last_line_ms = now_ms
        block = "\n".join(texts)
        if block.count("\n") != len(texts) - 1 or max(map(len, texts)) > self.max_line_chars:
            # multi-line or huge: the slow path, line by line
            return [ev for i in range(len(texts)) for ev in self.feed(entry_of(i))]
        hits = self.signatures.scan(block)
        return self._walk(hits, len(texts), texts.__getitem__, texts.__getitem__, entry_of)

    def feed_bytes(self, data: bytes, entry_of: Callable[[int, str], LogEntry],
                   errors: str = "replace", lines: int | None = None) -> list[LogEvent]:
        """`feed_lines` for a reader holding whole lines as UTF-8 bytes (`sentinel logs classify`).

        `data` is lines joined by b"\\n" (no newline at its end); each line is
        decoded with `errors`. Only the lines the classifier looks at are cut
        out and decoded, and `entry_of(i, text)` makes line i's entry: a quiet
        stretch costs one Hyperscan pass and no objects. Without Hyperscan, or
        where a line may be longer than `max_line_chars`, the block is decoded
        and fed by `feed_lines`. `lines`: how many lines `data` holds, when the
        caller counted them already (a pass over the block saved).
        """
        hits = None if may_hold_long_line(data, self.max_line_chars) \
            else self.signatures.scan_bytes(data, errors)
        if hits is None:
            texts = data.decode("utf-8", errors).split("\n")
            return self.feed_lines(texts, lambda i: entry_of(i, texts[i]))
        end = data.count(b"\n") + 1 if lines is None else lines
        cut = ByteLines(data, errors, hits, end)
        return self._walk([(i, sig, tb) for i, _, sig, tb in hits], end,
                          cut.text, cut.between, lambda i: entry_of(i, cut.text(i)))

    def _walk(self, hits: Sequence[tuple[int, Signature | None, bool]], end: int,
              text_of: Callable[[int], str], texts_of: Callable[[slice], Sequence[str]],
              entry_of: Callable[[int], LogEntry]) -> list[LogEvent]:
        """Step through `end` lines given the scan's hits: every line while a group is
        open, else only the hits (a quiet stretch moves the ring and the counter)."""
        events: list[LogEvent] = []
        i = 0
        for hit, signature, starts_tb in [*hits, (end, None, False)]:
            while i < hit and self._group is not None:  # an open group needs every line
                entry = entry_of(i)
                events.extend(self._step(entry, text_of(i).rstrip("\r"), entry.line_no, None,
                                         False))
                i += 1
            if i < hit:  # quiet stretch: only the ring and the counter change
                self._ring.extend(texts_of(slice(max(i, hit - (self._ring.maxlen or 1)), hit)))
                self._lines += hit - i
                i = hit
            if hit < end:
                entry = entry_of(hit)
                events.extend(self._step(entry, text_of(hit).rstrip("\r"), entry.line_no,
                                         signature, starts_tb))
                i = hit + 1
        return events

    def flush(self, now_ms: int | None = None) -> list[LogEvent]:
        """The stream went quiet (`now_ms` given) or ended (None): close the open group.

        A traceback whose fate is still undecided waits, on a quiet stream,
        until `fatal.SETTLE_MS` after the batch that brought its last line
        (`now_ms` and that batch's time are both Sentinel's clock);
        then (and at the end of the stream) its shape decides. A group of
        symptoms only (an engine's death) waits as long for its cause.
        """
        group = self._group
        waiting = group is not None and (
            (not group.hits and group.tb_header is not None) or group.symptoms_only())
        if group is not None and waiting and now_ms is not None \
                and self._last_line_ms is not None \
                and now_ms - self._last_line_ms < fatal.SETTLE_MS:
            # an undecided traceback, or a death whose cause may still be on its way
            # (servers print a child's death before its traceback is flushed)
            return []
        if group is not None and not group.hits and group.tb_header is not None:
            self._decide_by_shape(group, ended=True)
        return self._close()

    def _clean(self, line: str) -> str:
        """Drop a trailing CR; truncate a line past max_line_chars, saying so."""
        line = line.rstrip("\r")
        if len(line) > self.max_line_chars:
            self._truncated += 1
            cut = len(line) - self.max_line_chars
            line = f"{line[: self.max_line_chars]} … [truncated {cut} chars]"
        return line

    def _step(self, entry: LogEntry, line: str, line_no: int | None,
              signature: Signature | None, starts_tb: bool) -> list[LogEvent]:
        """Advance the state machine by one line, given what the line matched."""
        self._lines += 1
        if signature is not None and signature.name == MARKER:
            signature = self._by_marker(line)
        elif signature is not None and signature.name == FRAMES:
            signature, starts_tb = None, starts_tb or self._cut_traceback()
        if signature is not None and signature.unless_after \
                and self.signatures.follows_benign(signature, self._ring):
            signature = None  # e.g. "Killed" right after vLLM stopped its own workers
        events: list[LogEvent] = []
        group = self._group
        if group is not None:
            if self._continue(group, entry, line, line_no, signature, starts_tb):
                self._ring.append(line)
                if group.size >= MAX_GROUP_LINES:
                    events.extend(self._close())
                return events
            events.extend(self._close())
        if signature is not None and self._same_death(signature, line, entry.t_ms):
            signature = None  # the death of the crash whose event was just emitted
        if signature is not None or starts_tb:
            self._open(entry, line, line_no, signature, starts_tb)
        self._ring.append(line)
        return events

    def _continue(self, group: Group, entry: LogEntry, line: str, line_no: int | None,
                  signature: Signature | None, starts_tb: bool) -> bool:
        """Add `line` to the open group if it belongs there; False means close the group."""
        if group.traceback is not None:
            was_after = group.traceback.after_exception
            if group.traceback.accepts(line):
                group.add(line)
                group.note(line, entry, line_no, group.traceback.after_exception, True)
                if not was_after and group.traceback.after_exception:
                    group.exception = (entry, line, line_no)
                    if group.cause is None and signature is None and fatal.is_cause(line):
                        group.cause = (entry, line_no)
                if signature is not None:
                    group.hit(signature, entry, line_no)
                return True
            group.traceback = None
            group.after_left = group.window()
            if group.tb_cut and group.exception is None and not group.hits:
                return False  # frames that ended without an exception: no crash report
        deciding = self._deciding(group)
        if starts_tb and (group.after_left > 0 or deciding):
            group.traceback = TracebackTracker.start(line)
            group.add(line)
            group.note(line, entry, line_no, False, True)
            if signature is not None:
                group.hit(signature, entry, line_no)
            return True
        if signature is not None:
            if any(h.signature is signature for h in group.hits):  # a repeat of the same error
                group.add(line)
                group.note(line, entry, line_no, True)
                group.after_left = group.window()
                return True
            if self._joins(group, signature, deciding):
                group.add(line)
                group.note(line, entry, line_no, True)
                group.hit(signature, entry, line_no)
                return True
            return False
        if deciding:
            return self._decide(group, entry, line, line_no)
        if group.after_left <= 0:
            return False
        group.add(line)
        group.note(line, entry, line_no, True)
        group.after_left -= 1
        return True

    def _by_marker(self, line: str) -> Signature | None:
        """A fatal marker's line: the signature of the family its window speaks, or None.

        The window is the error lines among the ring's (the 30 lines before
        it) and the marker's own line, if an error line; the earliest cause
        names it.
        """
        found = families.opening([*self._ring, line])
        return None if found is None else self.signatures.by_name(found.signature)

    def _cut_traceback(self) -> bool:
        """A frame line here starts a traceback whose header was cut.

        Only outside a traceback being read, and only when no header is among
        the lines the ring holds (a frame after a header is that traceback's).
        """
        group = self._group
        if group is not None and group.traceback is not None:
            return False
        return not any(TRACEBACK in line for line in self._ring)

    def _same_death(self, signature: Signature, line: str, t_ms: int) -> bool:
        """A record of a death right after a crash's event of this stream: that crash's death.

        Right after: within `deaths.DEDUPE_LINES` lines of the event's end and
        `deaths.DEDUPE_MS` of its last hit on the entries' clock (a server
        restarted in a loop dies again, later). A crash report known by its shape
        (`SHAPES`: a debugger's backtrace, the kernel's oops) is such a record too. The
        OOM killer's record after a
        crash of another kind (a CUDA OOM, then host memory ran out too) names
        a cause of its own: an event of its own.
        """
        return self._event_at is not None \
            and self._lines - self._event_at <= deaths.DEDUPE_LINES \
            and t_ms - self._event_ms <= deaths.DEDUPE_MS \
            and (deaths.is_record(line) or signature.name in REPORTS) \
            and (signature.category != deaths.OOM_KILLED
                 or self._event_category == deaths.OOM_KILLED)

    @staticmethod
    def _deciding(group: Group) -> bool:
        """The group is an unclaimed traceback whose process's fate is still open."""
        return not group.hits and group.tb_header is not None and group.traceback is None

    @staticmethod
    def _joins(group: Group, signature: Signature, deciding: bool) -> bool:
        """Whether a new signature's hit belongs to the open group rather than its own event.

        An unclaimed traceback is the context of what follows it; within the
        window, a symptom joins its cause and a cause joins its symptoms. A
        native death (an abort, a fatal signal) is how a process ends after its
        cause, and a runtime prints the two in either order: a cause that
        follows it within its window joins it and names the event.
        """
        if not group.hits:
            return deciding or group.after_left > 0
        if group.after_left <= 0:
            return False
        top = max(group.hits, key=lambda h: h.signature.priority).signature
        best = top.priority
        crash = signature.severity in ("critical", "error")
        return (signature.priority <= SYMPTOM_PRIORITY or best <= SYMPTOM_PRIORITY
                or (signature.priority < best and crash)
                or (top.name == NATIVE and signature.priority > best and crash))

    def _decide(self, group: Group, entry: LogEntry, line: str, line_no: int | None) -> bool:
        """One line after an unclaimed traceback: keep waiting, or decide its fate."""
        verdict = fatal.after_traceback(line, group.tb_process)
        if verdict is fatal.Verdict.FATAL and group.exception is not None \
                and fatal.is_benign(group.exception[1]):
            verdict = fatal.Verdict.SURVIVED  # an operator's stop: the teardown is expected
        if verdict is fatal.Verdict.FATAL and group.tb_cut and group.exception is None:
            verdict = fatal.Verdict.SURVIVED  # frames without an exception: not a crash report
        if verdict is fatal.Verdict.SURVIVED:
            group.tb_header = None  # handled: the group closes without an event
            return False
        group.add(line)
        group.note(line, entry, line_no, True)
        if verdict is fatal.Verdict.FATAL:
            self._crash(group)
            return True
        group.waited += 1
        if group.waited >= fatal.DECIDE_LINES:
            self._decide_by_shape(group)
            if not group.hits:
                return False
        return True

    def _decide_by_shape(self, group: Group, ended: bool = False) -> None:
        """No line told: how the traceback was printed decides (see `fatal.by_shape`).

        `ended`: the stream stopped (end of input, or quiet past the settle time).
        A traceback cut off before its exception line then counts by its header:
        a process that stops in the middle of printing an uncaught exception died.
        """
        if group.tb_header is None or (group.exception is None and not ended):
            return
        if group.tb_cut and group.exception is None:
            group.tb_header = None  # frames alone, cut at both ends: nothing says it ended
            return
        exception = group.exception[1] if group.exception is not None else ""
        if fatal.by_shape(group.tb_header, group.tb_before, exception, group.tb_process):
            self._crash(group)
        else:
            group.tb_header = None

    def _crash(self, group: Group) -> None:
        """The unclaimed traceback ended its process: it is an `unclassified_crash`."""
        sig = self._catch_all
        if group.exception is not None:
            entry, _, line_no = group.exception
            group.hits.append(Hit(sig, entry, line_no, cause=True))
        elif group.tb_start is not None:
            group.hits.append(Hit(sig, *group.tb_start, cause=True))
        group.after_left = sig.context_after

    def _open(self, entry: LogEntry, line: str, line_no: int | None,
              signature: Signature | None, starts_tb: bool) -> None:
        group = Group(before=list(self._ring), first=(entry, line_no))
        group.add(line)
        group.note(line, entry, line_no, not starts_tb, starts_tb)
        if starts_tb:
            group.traceback = TracebackTracker.start(line)
            group.tb_cut = TRACEBACK not in line
            group.tb_header = group.traceback.header() if group.tb_cut else line
            group.tb_start = (entry, line_no)
            group.tb_before = self._ring[-1] if self._ring else ""
            group.tb_process = fatal.process_of(line)
        if signature is not None:
            group.hit(signature, entry, line_no)
            group.death = deaths.is_record(line)
        else:
            group.after_left = TRACEBACK_AFTER
        self._group = group

    def _close(self) -> list[LogEvent]:
        group, self._group = self._group, None
        if group is None or not group.hits:
            return []
        sig, best, entry, line_no, back = self._namer.name(group)
        keep = max(best.signature.context_before, back)  # a cause further back is shown too
        if group.death:  # a bare record of a death: the last lines before it say why
            keep = max(keep, deaths.CONTEXT_BEFORE)
        before = group.before[-keep:] if keep else []
        body = group.head + ([f"… [{group.omitted} lines omitted] …"] if group.omitted else [])
        body += list(group.tail)
        self._events += 1
        if sig.severity in ("critical", "error"):  # a crash (a refused request kills nothing)
            self._event_at, self._event_ms = self._lines, max(h.entry.t_ms for h in group.hits)
            self._event_category = sig.category
        return [LogEvent(
            target=entry.target, source=entry.source, signature=sig.name,
            category=sig.category, severity=sig.severity, t_ms=entry.t_ms,
            line_no=line_no, excerpt=self._cap(before + body), runbook=sig.runbook,
        )]

    def _cap(self, lines: list[str]) -> tuple[str, ...]:
        """Keep the excerpt within max lines and chars, keeping head and tail."""
        if len(lines) > self.max_excerpt_lines:
            half = self.max_excerpt_lines // 2
            cut = len(lines) - 2 * half
            lines = lines[:half] + [f"… [{cut} lines omitted] …"] + lines[-half:]
        if sum(len(x) for x in lines) > self.max_excerpt_chars:
            per_line = max(80, self.max_excerpt_chars // max(len(lines), 1))
            lines = [x if len(x) <= per_line else x[:per_line] + " …" for x in lines]
        return tuple(lines)

