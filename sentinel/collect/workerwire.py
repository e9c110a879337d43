"""The messages between the daemon and its collect workers, and how they are framed.

One pipe each way (the worker's stdin and stdout), each message a 4-byte
big-endian length and a pickled tuple whose first item says its kind.
Pickle is safe here: both ends are this program, the pipe is private to
the parent and its child.

Daemon → worker:

- `("filter", names, matchers, keep_all)`: which metric names to keep
  (`MemoryStore`'s `SeriesFilter` as plain data; matchers as
  `(name, op, value)` triples).
- `("target", key, ScrapeTarget)`: define (or redefine) target `key`.
- `("scrape", key, seq, now_ms, deadline_ms)`: scrape it now; answer with
  `seq`. Read after `deadline_ms` (wall clock), it is answered `expired`
  without a scrape.
- `("forget", key)`: close its connection and drop it.

Worker → daemon:

- `("ready",)`: first, once its imports are done and its pipes open.
- `("labels", generation, first, [labels, ...])`: the scraped label sets of
  the worker's new series slots `first`, `first + 1`, … in its parse cache
  `generation` (a new generation starts the table over). Sent before the
  result that first uses them, so the daemon always knows a slot it is told.
- `("result", seq, generation, Outcome)`: one scrape.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass

from sentinel.store.memory import Matcher, SeriesFilter

_LEN = struct.Struct(">I")
# Far above any result (a 10 MB page's kept samples are < 2 MB); a longer frame is a bug.
MAX_FRAME = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Outcome:
    """One scrape as the worker saw it: the kept samples, packed, and the page's health.

    `slots` (array 'I' bytes) and `values` (array 'd' bytes) are the kept
    samples without an explicit timestamp, in page order; `stamped` the
    rare kept samples with one, as (slot, timestamp ms, value).
    """

    up: bool
    duration_s: float
    samples: int
    dropped: int
    error: str | None
    limit: str | None
    duplicates: int
    slots: bytes = b""
    values: bytes = b""
    stamped: tuple[tuple[int, int, float], ...] = ()
    expired: bool = False  # not scraped: the request was read after its deadline
    late: bool = False  # not finished: the worker reached the fetch's deadline late


def frame(message: tuple[object, ...]) -> bytes:
    """A message as bytes on the pipe."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> tuple[object, ...]:
    """The next message; IncompleteReadError at the end of the pipe."""
    (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes")
    # Our own child (or parent) on a private pipe: see the module docstring.
    message = pickle.loads(await reader.readexactly(n))  # noqa: S301
    if not isinstance(message, tuple) or not message:
        raise ValueError("not a message")
    return message


def filter_message(keep: SeriesFilter) -> tuple[object, ...]:
    """A series filter as a message (compiled matchers do not cross the pipe)."""
    matchers = tuple((m.name, m.op, m.value) for m in keep.name_matchers)
    return ("filter", tuple(sorted(keep.names)), matchers, keep.keep_all)


def filter_from(message: tuple[object, ...]) -> SeriesFilter:
    """The series filter a `filter` message carries."""
    _, names, matchers, keep_all = message
    assert isinstance(names, tuple) and isinstance(matchers, tuple)
    return SeriesFilter(frozenset(names), tuple(Matcher(*m) for m in matchers),
                        bool(keep_all))
