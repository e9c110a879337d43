"""Follow a log file like `tail -F`: across rotation and truncation, no line lost or read twice.

What each poll does, and why:

- The open file is read from the offset reached so far to its end (at most
  `max_read_bytes` per poll, so one burst cannot stall the loop; the rest is
  read by the next polls). Complete lines are handed out; a partial last line
  waits for its newline.
- Truncation (copytruncate): the file is smaller than our offset, or the
  few bytes just before our offset changed (truncated and already written
  past our offset again). Reading restarts at 0.
- Rotation (rename, then a new file at the path): only once the open file
  has been read to its end is the path looked at again. A different inode
  there means rotation: the old file is kept open ("retired") and drained
  once more on the next poll, because writers often append a few lines to
  it between the rename and reopening (logrotate's postrotate HUP); then it
  is closed and its unterminated last line handed out. The new file is read
  from its start.
- A missing path is recorded in `health`; the file is picked up from its
  start when it appears.

- Rotated more than once between two polls (or while Sentinel was stopped):
  the files rotated after the one being read are found beside the path
  (`vllm.log.1`, `vllm.log.2`, `vllm.log-20261207`: names that start with
  the file's name, not compressed), those written after it (by modification
  time) are read in that order, from their start, before the new file.

Guarantees and limits. Every byte of a file this source has opened is read
exactly once (we hold the descriptor, so renames do not matter). Lost, by
nature of the rotation scheme: a rotated file that was compressed or
deleted before we found it; with copytruncate, lines written after our
last poll and before the truncation are only in the copy; lines a writer
appends to a rotated file after the poll that closed it. Line numbers count
lines within the current file (None where the file was joined at an offset
too far in to count).

Restart: with a `PositionStore`, the (device, inode, offset, line number) of
the last line handed out is saved after each poll that moved it (or, with
`auto_commit=False`, the caller saves `position` under `position_key` in the
same transaction as the events those lines led to, as the daemon does):
the oldest file not yet read to its end, so a restart in the middle of
draining rotated files drains them again from there. On start, the same
inode resumes at the offset; a different inode means rotation while we
were down: the old inode is looked for beside the path (by inode, whatever
its name now) and drained from the saved offset first, then each file
rotated after it, then the new file.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from sentinel.collect.linesplit import DEFAULT_MAX_LINE_BYTES, LineSplitter, RawLine, decode_line
from sentinel.collect.linestamp import line_time_ms
from sentinel.collect.logrotation import rotated_between
from sentinel.collect.logsource import SourceHealth
from sentinel.model import LogEntry

log = logging.getLogger(__name__)

DEFAULT_MAX_READ_BYTES = 8 * 1024 * 1024
_CHUNK = 1024 * 1024
_TAIL_CHECK_BYTES = 64
_MAX_RETIRED = 16  # rotated files drained at once (one more closes the oldest)
_MAX_OPENED = 256
_MAX_STARTS = 20_000  # lines whose start `position_at` can answer
_MAX_COUNT_BYTES = 256 * 1024 * 1024  # joining a file at its end: count lines up to here


@dataclass(frozen=True, slots=True)
class FilePosition:
    """Where reading a file stopped: just past the last line handed out."""

    dev: int
    inode: int
    offset: int
    line_no: int | None  # lines handed out from this file so far; None where unknown


class PositionStore(Protocol):
    """Persists a `FilePosition` per source key so a restart resumes where it stopped."""

    def load(self, key: str) -> FilePosition | None:
        """The saved position for `key`, or None."""
        ...

    def save(self, key: str, position: FilePosition) -> None:
        """Remember `position` for `key`."""
        ...


class MemoryPositionStore:
    """A `PositionStore` in memory: survives re-creating the source, not the process."""

    def __init__(self) -> None:
        self.positions: dict[str, FilePosition] = {}

    def load(self, key: str) -> FilePosition | None:
        """The saved position for `key`, or None."""
        return self.positions.get(key)

    def save(self, key: str, position: FilePosition) -> None:
        """Remember `position` for `key`."""
        self.positions[key] = position


class _OpenFile:
    """One open descriptor being followed, with its line splitter and line count."""

    def __init__(self, fd: int, offset: int, line_no: int | None, max_line_bytes: int) -> None:
        st = os.fstat(fd)
        self.fd = fd
        self.id = (st.st_dev, st.st_ino)
        self.lines = LineSplitter(max_line_bytes, offset)
        self.line_no = line_no
        self.emitted = offset  # where the next line handed out starts
        n = min(offset, _TAIL_CHECK_BYTES)
        self.tail = os.pread(fd, n, offset - n)  # what must stay before our offset

    def rewritten(self) -> bool:
        """Whether the file was truncated: smaller, or the bytes before our offset changed."""
        offset = self.lines.offset
        if os.fstat(self.fd).st_size < offset:
            return True
        n = len(self.tail)
        return n > 0 and os.pread(self.fd, n, offset - n) != self.tail

    def restart(self) -> None:
        """Read again from the start (after truncation); the partial line is dropped with it."""
        self.lines.reset(0)
        self.line_no = 0
        self.emitted = 0
        self.tail = b""

    def read(self, budget: int) -> tuple[list[RawLine], int, bool]:
        """Read up to `budget` bytes: (complete lines, bytes read, reached end of file)."""
        out: list[RawLine] = []
        n = 0
        while n < budget:
            chunk = os.pread(self.fd, min(_CHUNK, budget - n), self.lines.offset)
            if not chunk:
                return out, n, True
            n += len(chunk)
            self.tail = (self.tail + chunk[-_TAIL_CHECK_BYTES:])[-_TAIL_CHECK_BYTES:]
            out.extend(self.lines.feed(chunk))
        return out, n, False

    def position(self) -> FilePosition:
        """The position to persist: the partial line, if any, is read again after a restart."""
        return FilePosition(self.id[0], self.id[1], self.lines.line_start, self.line_no)

    def close(self) -> None:
        """Close the descriptor."""
        os.close(self.fd)


class LogFileSource:
    """A `LogSource` that follows one file by path (see the module docstring)."""

    def __init__(
        self,
        target: str,
        path: str | os.PathLike[str],
        start_at_end: bool = True,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        offset_store: PositionStore | None = None,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        auto_commit: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.name = f"file:{self.path}"
        self.position_key = f"file:{target}:{self.path}"  # the key in the PositionStore
        self.target = target
        self.health = SourceHealth()
        self.start_at_end = start_at_end
        self.max_line_bytes = max_line_bytes
        self.max_read_bytes = max_read_bytes
        self._store: PositionStore = (
            offset_store if offset_store is not None else MemoryPositionStore()
        )
        self._current: _OpenFile | None = None
        self._retired: list[_OpenFile] = []  # rotated away, drained until a poll finds nothing
        self._unfinished: _OpenFile | None = None  # the oldest file a poll did not read to its end
        # Files opened before (device, inode): a rotated file written late is no new file.
        self._opened: deque[tuple[int, int]] = deque(maxlen=_MAX_OPENED)
        self._joined = False  # first open done: a file appearing later is read from its start
        self._attached: FilePosition | None = None  # where attach() joined, until the first open
        self._saved: FilePosition | None = None
        self._auto_commit = auto_commit
        self.position: FilePosition | None = None  # after the last poll that opened the file
        # Where each recent line handed out starts, so a caller still assembling an
        # event from a line (LogWatch) can save the position before it (`position_at`).
        self._starts: deque[tuple[LogEntry, FilePosition]] = deque(maxlen=_MAX_STARTS)

    def poll(self, now_ms: int) -> list[LogEntry]:
        """New complete lines since the last poll; never raises (errors go to `health`)."""
        out: list[LogEntry] = []
        try:
            if self._poll(now_ms, out):
                self.health = SourceHealth(True, None, now_ms)
        except Exception as e:  # one bad file never stops the loop
            self._failed(f"{self.path}: {type(e).__name__}: {e}")
        return out

    def attach(self) -> None:
        """Note where the file ends now, before the first poll; never raises.

        The daemon attaches before it reports ready: joined at its end at the
        first poll instead, a line written between "ready" and that poll would
        be behind the offset and never read (issue 53). The point noted stands
        in for a saved position (a saved one wins, as an HA leader's does), so
        a rotation before the first poll is followed as after a restart.
        """
        if self._current is not None or self._joined or not self.start_at_end:
            return
        try:
            fd = _open(self.path)
            if fd is None:  # it appears later: read from its start, it is all new
                self._joined = True
                return
            try:
                st = os.fstat(fd)
                offset, line_no = _join_at_end(fd, st.st_size, self.max_line_bytes)
            finally:
                os.close(fd)
            self._attached = FilePosition(st.st_dev, st.st_ino, offset, line_no)
        except OSError as e:
            self._failed(f"{self.path}: {type(e).__name__}: {e}")

    def close(self) -> None:
        """Close every open descriptor; the saved position stays where the last poll left it."""
        for f in self._retired:
            f.close()
        self._retired = []
        if self._current is not None:
            self._current.close()
            self._current = None

    def _poll(self, now_ms: int, out: list[LogEntry]) -> bool:
        if self._current is None:
            self._current = self._open_first()
            if self._current is None:
                self._failed(f"{self.path}: no such file (waiting for it to appear)")
                return False
        budget = self.max_read_bytes
        budget -= self._drain_retired(now_ms, out, budget)
        cur = self._current
        if cur.rewritten():
            log.info("log file %s was truncated; reading it again from the start", self.path)
            cur.restart()
        lines, n, eof = cur.read(budget)
        self._emit(cur, lines, now_ms, out)
        if eof and (new := self._rotated_to(cur)) is not None:
            between = self._rotated_after(cur.id, new.id)
            self._retire(cur, now_ms, out)
            for f in between:
                self._retire(f, now_ms, out)
            self._current = new
            if between:  # the next poll drains them first, then reads the new file
                self._unfinished = self._unfinished or between[0]
            else:
                lines, _, _ = new.read(budget - n)
                self._emit(new, lines, now_ms, out)
        self._save()
        return True

    def _open_first(self) -> _OpenFile | None:
        """Open the path the first time (or after it was missing); None if it does not exist."""
        fd = _open(self.path)
        if fd is None:
            self._joined = True
            return None
        saved = self._store.load(self.position_key) or self._attached
        self._attached = None
        st = os.fstat(fd)
        offset: int = 0
        line_no: int | None = 0
        if saved is not None and (saved.dev, saved.inode) == (st.st_dev, st.st_ino):
            if saved.offset <= st.st_size:
                offset, line_no = saved.offset, saved.line_no  # else truncated while we were down
        elif saved is not None:
            self._resume_rotated(saved)
        elif self.start_at_end and not self._joined:
            offset, line_no = _join_at_end(fd, st.st_size, self.max_line_bytes)
        self._joined = True
        return self._note(_OpenFile(fd, offset, line_no, self.max_line_bytes))

    def _resume_rotated(self, saved: FilePosition) -> None:
        """Rotated while we were down: drain the saved inode first if it is beside the path,
        then every file rotated after it, oldest first (the new file is read after them)."""
        directory = os.path.dirname(self.path) or "."
        with os.scandir(directory) as entries:
            found = [e.path for e in entries
                     if e.inode() == saved.inode and e.is_file(follow_symlinks=False)]
        fd = _open(found[0]) if found else None
        if fd is None:
            log.warning("%s was rotated while stopped and the file read last is gone; "
                        "lines written to it after the saved position are lost", self.path)
            return
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (saved.dev, saved.inode) or st.st_size < saved.offset:
            os.close(fd)
            return
        log.info("%s was rotated while stopped; draining %s", self.path, found[0])
        self._retired.append(self._note(_OpenFile(fd, saved.offset, saved.line_no,
                                                  self.max_line_bytes)))
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return
        self._retired += self._rotated_after((saved.dev, saved.inode),
                                             (now.st_dev, now.st_ino))

    def _rotated_after(self, old: tuple[int, int], new: tuple[int, int]) -> list[_OpenFile]:
        """The files rotated after `old` and before `new`, opened, oldest first
        (see `logrotation.rotated_between`)."""
        held = self._fd_of(old)
        old_mtime = os.fstat(held).st_mtime_ns if held >= 0 else None
        out = []
        for path in rotated_between(self.path, old, new, old_mtime, set(self._opened)):
            fd = _open(path)
            if fd is not None:
                log.info("%s: reading %s, rotated after the file read last", self.path, path)
                out.append(self._note(_OpenFile(fd, 0, 0, self.max_line_bytes)))
        return out

    def _note(self, f: _OpenFile) -> _OpenFile:
        """Remember that `f` was opened (see `_rotated_after`)."""
        if f.id not in self._opened:
            self._opened.append(f.id)
        return f

    def _fd_of(self, file_id: tuple[int, int]) -> int:
        """The descriptor held for `file_id` (current or retired), or -1."""
        for f in [*self._retired, *([self._current] if self._current else [])]:
            if f.id == file_id:
                return f.fd
        return -1

    def _rotated_to(self, cur: _OpenFile) -> _OpenFile | None:
        """The file now at the path if it is not `cur` (rotation), else None."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None  # between the rename and the new file: keep following the old one
        if (st.st_dev, st.st_ino) == cur.id:
            return None
        fd = _open(self.path)
        if fd is None:
            return None
        log.info("log file %s was rotated; following the new file", self.path)
        return self._note(_OpenFile(fd, 0, 0, self.max_line_bytes))

    def _retire(self, f: _OpenFile, now_ms: int, out: list[LogEntry]) -> None:
        self._retired.append(f)
        while len(self._retired) > _MAX_RETIRED:
            self._close_retired(self._retired.pop(0), now_ms, out)

    def _drain_retired(self, now_ms: int, out: list[LogEntry], budget: int) -> int:
        """Read late writes to rotated files; close each at the first poll that finds none.

        The first one not read to its end (the budget ran out) is `_unfinished`:
        its position is what a restart must resume from.
        """
        used = 0
        keep: list[_OpenFile] = []
        self._unfinished = None
        for f in self._retired:
            if used >= budget:
                keep.append(f)
                self._unfinished = self._unfinished or f
                continue
            lines, n, eof = f.read(budget - used)
            used += n
            self._emit(f, lines, now_ms, out)
            if eof and n == 0:
                self._close_retired(f, now_ms, out)
            else:
                keep.append(f)
                if not eof:
                    self._unfinished = self._unfinished or f
        self._retired = keep
        return used

    def _close_retired(self, f: _OpenFile, now_ms: int, out: list[LogEntry]) -> None:
        last = f.lines.flush()
        if last is not None:
            self._emit(f, [last], now_ms, out)
        f.close()

    def _emit(self, f: _OpenFile, lines: list[RawLine], now_ms: int, out: list[LogEntry]) -> None:
        for raw in lines:
            start = FilePosition(f.id[0], f.id[1], f.emitted, f.line_no)
            if f.line_no is not None:
                f.line_no += 1
            text = decode_line(raw)
            # The line's own stamp where it prints a plausible one (linestamp.py), so an
            # incident's clock starts at the crash line, not at the poll that read it.
            entry = LogEntry(self.target, self.name, line_time_ms(text, now_ms), text,
                             f.line_no)
            f.emitted = raw.end_offset
            self._starts.append((entry, start))
            out.append(entry)

    def position_at(self, entry: LogEntry) -> FilePosition | None:
        """The position just before `entry` (one of the recent lines `poll` returned), or None.

        A restart that resumes there reads `entry` again: LogWatch saves it
        instead of `position` while an event that began at `entry` is still
        being assembled, so a kill -9 in between loses no event.
        """
        for found, start in reversed(self._starts):
            if found is entry:
                return start
        return None

    def _save(self) -> None:
        if self._current is None:
            return
        # Lines of the new file are never handed out before the rotated ones are read
        # to their end, so the oldest unfinished file is where a restart resumes.
        oldest = self._unfinished if self._unfinished is not None else self._current
        position = self.position = oldest.position()
        if self._auto_commit and position != self._saved:
            self._store.save(self.position_key, position)
            self._saved = position

    def _failed(self, error: str) -> None:
        if error != self.health.last_error:
            log.warning("log source %s: %s", self.name, error)
        self.health = SourceHealth(False, error, self.health.last_success_ms)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _join_at_end(fd: int, size: int, max_line_bytes: int) -> tuple[int, int | None]:
    """Where to start when joining an existing file at its end: after its last complete line.

    Returns (offset, lines before it); the count is None for files too big to count cheaply.
    """
    window = min(size, max_line_bytes)
    tail = os.pread(fd, window, size - window)
    nl = tail.rfind(b"\n")
    if nl >= 0:
        offset = size - window + nl + 1
    else:  # one partial line: all of it if it is all there, else skip the giant line's rest
        offset = 0 if window == size else size
    if offset > _MAX_COUNT_BYTES:
        return offset, None
    count, pos = 0, 0
    while pos < offset:
        chunk = os.pread(fd, min(_CHUNK, offset - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return offset, count
