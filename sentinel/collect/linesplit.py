"""Split a byte stream into text lines with bounded memory.

Shared by the file and the subprocess log sources. Bytes come in chunks of
any size; complete lines go out. A line longer than `max_line_bytes` keeps
its first `max_line_bytes` bytes and a marker saying how long it was: the
rest is counted and dropped as it streams past, so a 10 MB line (or a
binary file with no newline at all) never holds more than the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_LINE_BYTES = 65_536


@dataclass(frozen=True, slots=True)
class RawLine:
    """One complete line as bytes, without its newline, and where it ended in the stream."""

    data: bytes  # at most max_line_bytes; a trailing CR (from CRLF) already removed
    total_bytes: int  # the line's length as written, newline excluded
    end_offset: int  # stream offset just past the line's newline (or its last byte, on flush)

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped because the line was longer than the bound."""
        return self.total_bytes > len(self.data)


def decode_line(line: RawLine) -> str:
    """The line as text: invalid UTF-8 replaced, truncation marked."""
    text = line.data.decode("utf-8", errors="replace")
    if line.truncated:
        text += f" …[line truncated: {line.total_bytes} bytes]"
    return text


class LineSplitter:
    """Turns chunks into `RawLine`s; remembers the partial last line between chunks."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, offset: int = 0) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self.reset(offset)

    def reset(self, offset: int) -> None:
        """Forget any partial line; the next chunk starts at stream `offset`."""
        self._offset = offset
        self._head = bytearray()
        self._total = 0

    @property
    def offset(self) -> int:
        """Stream offset just past the last byte fed."""
        return self._offset

    @property
    def line_start(self) -> int:
        """Where to resume so the pending partial line is read again (== offset when none)."""
        return self._offset - self._total

    @property
    def pending(self) -> bool:
        """Whether a partial line (bytes with no newline yet) is buffered."""
        return self._total > 0

    def feed(self, chunk: bytes) -> list[RawLine]:
        """Consume `chunk`; return the lines it completed, in order."""
        out: list[RawLine] = []
        start = 0
        base = self._offset
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._append(chunk, start, len(chunk))
                break
            self._append(chunk, start, nl)
            out.append(self._take(base + nl + 1))
            start = nl + 1
        self._offset = base + len(chunk)
        return out

    def flush(self) -> RawLine | None:
        """The partial line as a final line (its file will not grow again), or None."""
        if not self.pending:
            return None
        return self._take(self._offset)

    def _append(self, chunk: bytes, start: int, end: int) -> None:
        if self._total == 0 and start < end and chunk[start] == 0:
            # NULs opening a line are skipped: copytruncate behind a writer without
            # O_APPEND leaves a hole of NULs up to the writer's old offset, which would
            # otherwise swallow the next real line into one giant truncated junk line.
            start = end - len(chunk[start:end].lstrip(b"\x00"))
        room = self.max_line_bytes - len(self._head)
        if room > 0:
            self._head += chunk[start : min(end, start + room)]
        self._total += end - start

    def _take(self, end_offset: int) -> RawLine:
        data = bytes(self._head)
        total = self._total
        if total == len(data) and data.endswith(b"\r"):
            data = data[:-1]
            total -= 1
        self._head = bytearray()
        self._total = 0
        return RawLine(data, total, end_offset)
