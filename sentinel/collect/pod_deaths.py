"""A discovered pod's container deaths as a log stream of its own (issue 51).

Kubernetes discovery (`kubernetes_sd.py`) sees each container that the
kubelet restarted after it ended non-zero and hands over one line in
`kubectl describe`'s words (`logs/deaths.py`). This source holds those
lines until LogWatch polls it, so they go through the classifier, the
counters and the database like any log line: an OOMKilled container is
`container_oom_killed`, another exit the catch-all. Sentinel does not read
the pod's own output, so the excerpt is the kubelet's record.
"""

from __future__ import annotations

import threading
from collections import deque

from sentinel.collect.logsource import SourceHealth
from sentinel.model import LogEntry

MAX_LINES = 1_000  # deaths waiting for a poll (a crash loop of many containers at most)
SOURCE = "kubernetes:pod-status"


class PodDeathSource:
    """A `LogSource` of one target's container deaths, pushed by discovery's thread."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.name = SOURCE
        # Records of deaths only: LogWatch joins them to the crash events of the target's
        # other streams (logs/deathjoin.py), so a death the server's log named is one event.
        self.structural = True
        self.health = SourceHealth()
        self.dropped_lines = 0
        self._lines: deque[tuple[int, str]] = deque()
        self._lock = threading.Lock()

    def push(self, line: str, t_ms: int) -> None:
        """A death seen at `t_ms` (Sentinel's clock: when the watch reported it)."""
        with self._lock:
            self._lines.append((t_ms, line))
            while len(self._lines) > MAX_LINES:
                self._lines.popleft()
                self.dropped_lines += 1

    def poll(self, now_ms: int) -> list[LogEntry]:
        """The deaths pushed since the last poll; never raises."""
        with self._lock:
            batch, self._lines = list(self._lines), deque()
        self.health = SourceHealth(True, None, now_ms)
        return [LogEntry(self.target, self.name, t, line) for t, line in batch]

    def close(self) -> None:
        """Nothing to release."""
