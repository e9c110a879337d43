"""Where a log source stopped reading, and the store that keeps it across restarts.

A timestamp alone is not a cursor: several entries can share one timestamp,
and a page (or a poll) may end between them. So the cursor is the last
timestamp read plus the insertIds already read at exactly that timestamp;
the next read asks for `timestamp >= at` and drops those ids. Nothing is
missed (the boundary timestamp is read again) and nothing is counted twice.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sentinel.model import LogEntry

# Recent lines whose cursor before them a source remembers (`cursor_before`): an event
# being assembled spans fewer (the classifier closes a group at 5,000 lines).
MAX_STARTS = 20_000


@dataclass(frozen=True, slots=True)
class LogCursor:
    """The last entry timestamp read (aware, microseconds) and the ids read at it."""

    at: datetime
    insert_ids: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise ValueError(f"naive cursor timestamp {self.at!r}")


class CursorStore(Protocol):
    """Keeps cursors by source key (the database in production)."""

    def load(self, key: str) -> LogCursor | None:
        """The saved cursor for `key`, or None when the source never read anything."""
        ...

    def save(self, key: str, cursor: LogCursor) -> None:
        """Replace the cursor for `key`."""
        ...


class MemoryCursorStore:
    """A `CursorStore` in a dict, for tests and for running without a database."""

    def __init__(self) -> None:
        self.cursors: dict[str, LogCursor] = {}

    def load(self, key: str) -> LogCursor | None:
        """The saved cursor, or None."""
        return self.cursors.get(key)

    def save(self, key: str, cursor: LogCursor) -> None:
        """Keep the cursor."""
        self.cursors[key] = cursor


def cursor_before(starts: deque[tuple[LogEntry, LogCursor]],
                  entry: LogEntry) -> LogCursor | None:
    """The cursor a source stood at just before handing out `entry`, or None.

    `starts` pairs each recent entry with the cursor before it, oldest first
    (searched newest first: the entry asked for is an open event's first line).
    Identity, not equality: two equal lines are two entries.
    """
    for found, before in reversed(starts):
        if found is entry:
            return before
    return None
