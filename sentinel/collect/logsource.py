"""The seam every log source implements: poll for new lines, never raise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sentinel.model import LogEntry


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """How a source's last poll went."""

    ok: bool = True
    last_error: str | None = None
    last_success_ms: int | None = None


class LogSource(Protocol):
    """A source of log lines for one target."""

    name: str
    target: str
    health: SourceHealth

    def poll(self, now_ms: int) -> list[LogEntry]:
        """New entries since the last poll; records errors in `health` instead of raising."""
        ...

    def close(self) -> None:
        """Release files, subprocesses and connections."""
        ...
