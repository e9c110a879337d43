"""A cold start noticed while it happens, whoever started the server (Sentinel, Kubernetes,
an OOM kill and a supervisor, a person).

A start shows in the server's log: vLLM's first line names its platform
("Automatically detected platform cuda."). From then until it serves
("Application startup complete.") the start is watched, and called cold on the
first of:

- compile lines in the log: torch.compile compiling a graph (GPU: "Compiling a
  graph for dynamic shape takes 41.27 s"), the TPU runner compiling its input
  shapes ("Compiling the model with different input shapes");
- cache files being written: the target's XLA cache (its `xla_cache_path`
  watch) grows during the start;
- no serving after the expected warm time (restart_cost.expect per accelerator).

Each cold start is noticed once (`tick`), with its evidence; `samples` gives
`sentinel_cold_start{target}` (1 while a noticed cold start has not served) for
the shipped `VLLMColdStart` rule. Time is passed in.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sentinel.model import METRIC_NAME, Labels, LogEntry, labels_of

SERIES = "sentinel_cold_start"
_START = re.compile(r"Automatically detected platform \w+")
_COMPILE = re.compile(r"Compiling a graph for dynamic shape|Compiling the model with different "
                      r"input shapes|torch\.compile takes [0-9.]+ s in total")
_SERVING = re.compile(r"Application startup complete")
_CHEAP = ("platform", "Compiling", "torch.compile", "startup complete")  # fast pre-test
# Every process of a server (API server, engine core, tensor-parallel workers) names the
# platform as it imports vLLM: lines this close to a start still being watched are that start.
SAME_START_MS = 120_000


@dataclass(frozen=True, slots=True)
class ColdStart:
    """One cold start noticed: where, when it began, when it was noticed, and why."""

    target: str
    started_ms: int
    noticed_ms: int
    evidence: str


@dataclass
class _Start:
    started_ms: int
    files_at_start: float | None = None
    evidence: list[str] = field(default_factory=list)
    noticed: bool = False


class ColdStarts:
    """Per target: the start being watched, if any. Thread-safe (log polls, cache scans)."""

    def __init__(self, warm_ms: Callable[[str], int]) -> None:
        self.warm_ms = warm_ms  # the expected warm time to serve of a target
        self._starts: dict[str, _Start] = {}
        self._files: dict[str, float] = {}
        self._cold: set[str] = set()  # noticed and not serving yet (the series is 1)
        self._lock = threading.Lock()

    def saw(self, entries: Sequence[LogEntry]) -> None:
        """A log poll's lines: starts, compile lines, serving."""
        for e in entries:
            if not any(w in e.text for w in _CHEAP):
                continue
            with self._lock:
                if _START.search(e.text):
                    current = self._starts.get(e.target)
                    if current is not None and e.t_ms - current.started_ms < SAME_START_MS:
                        continue  # another process of the same start (an engine, a worker)
                    self._starts[e.target] = _Start(e.t_ms, self._files.get(e.target))
                    self._cold.discard(e.target)
                elif _SERVING.search(e.text):
                    self._starts.pop(e.target, None)
                    self._cold.discard(e.target)
                elif (m := _COMPILE.search(e.text)) and e.target in self._starts:
                    self._starts[e.target].evidence.append(f'compile line in the log: '
                                                           f'"{m.group(0)}"')

    def cache_files(self, target: str, files: float) -> None:
        """The target's XLA cache holds `files` now (its watch's scan)."""
        with self._lock:
            start = self._starts.get(target)
            if start is not None and start.files_at_start is not None \
                    and files > start.files_at_start:
                start.evidence.append(f"cache files being written ({start.files_at_start:g} "
                                      f"→ {files:g} in the XLA cache)")
            self._files[target] = files
            if start is not None and start.files_at_start is None:
                start.files_at_start = files

    def tick(self, now_ms: int) -> list[ColdStart]:
        """The cold starts noticed now (each once)."""
        out = []
        with self._lock:
            for target, start in self._starts.items():
                if start.noticed:
                    continue
                evidence = list(start.evidence)
                warm = self.warm_ms(target)
                if not evidence and now_ms - start.started_ms > warm:
                    evidence.append(f"not serving {(now_ms - start.started_ms) / 1000:.0f}s "
                                    f"after the start (expected warm: {warm / 1000:.0f}s)")
                if evidence:
                    start.noticed = True
                    self._cold.add(target)
                    out.append(ColdStart(target, start.started_ms, now_ms, "; ".join(evidence)))
        return out

    def samples(self, targets: Sequence[str]) -> list[tuple[Labels, float]]:
        """`sentinel_cold_start{target}` for these targets: 1 while cold and not serving."""
        with self._lock:
            return [(labels_of({METRIC_NAME: SERIES, "target": t}),
                     1.0 if t in self._cold else 0.0) for t in targets]
