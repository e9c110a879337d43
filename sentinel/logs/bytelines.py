"""Lines of a bytes block, cut out and decoded only when asked for (`Classifier.feed_bytes`).

`sentinel logs classify` reads raw UTF-8 chunks: a sparse log's quiet
stretches are never split into lines nor decoded; only hit lines, the lines
of an open group and the few lines before a hit become `str`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentinel.logs.signatures import Signature


def may_hold_long_line(data: bytes, limit: int) -> bool:
    """Whether a line of `data` may be longer than `limit` characters, in a few `find`s.

    Such a line has more than `limit` bytes (a character takes one byte or
    more), so it covers a whole aligned window of `limit // 2` bytes without
    a newline: only windows are probed, not lines. True may be a false alarm.
    """
    half = max(limit // 2, 1)
    find = data.find
    return any(find(b"\n", at, at + half) == -1 for at in range(0, len(data) - half + 1, half))


class ByteLines:
    """Lines of a bytes block by index, cut out and decoded on demand.

    `Classifier._walk` asks for lines in ascending order (a hit, the lines of an open
    group after it, the ring before the next hit), so a cursor (line index,
    byte offset of its start) moves forward one `find` at a time, and jumps
    to a hit by the offset inside it that the scan reported.
    """

    def __init__(self, data: bytes, errors: str,
                 hits: Sequence[tuple[int, int, Signature | None, bool]], lines: int) -> None:
        self._data = data
        self._errors = errors
        self._offset = {i: at for i, at, _, _ in hits}
        self._last = lines - 1  # index of the last line
        self._index = 0
        self._start = 0
        self._cached: tuple[int, str] = (-1, "")

    def _seek(self, index: int) -> int:
        """Byte offset where line `index` starts (one past the block for the line after it)."""
        data = self._data
        if index == self._index:
            return self._start
        if index > self._last:
            start = len(data) + 1
        elif index in self._offset and index != self._index + 1:
            start = data.rfind(b"\n", 0, self._offset[index]) + 1
        elif index > self._index:
            start = self._start
            for _ in range(index - self._index):
                start = data.index(b"\n", start) + 1
        else:
            raise ValueError(f"line {index} is behind the cursor (line {self._index})")
        self._index, self._start = index, start
        return start

    def text(self, index: int) -> str:
        """Line `index`, decoded."""
        if self._cached[0] == index:
            return self._cached[1]
        start = self._seek(index)
        end = self._data.find(b"\n", start)
        text = self._data[start:None if end == -1 else end].decode("utf-8", self._errors)
        self._cached = (index, text)
        return text

    def between(self, lines: slice) -> list[str]:
        """Lines `lines.start` to `lines.stop - 1`, read backwards from the start of the last."""
        data = self._data
        end = self._seek(lines.stop) - 1  # the newline that ends line stop - 1
        out = []
        for _ in range(lines.stop - lines.start):
            start = data.rfind(b"\n", 0, end) + 1
            out.append(data[start:end].decode("utf-8", self._errors))
            end = start - 1
        out.reverse()
        return out
