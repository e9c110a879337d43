"""The embedded series store: one bounded buffer of samples per series, in packed arrays.

Writers (the sources) get a small integer reference for a label set once and
append to it cheaply; readers (the PromQL engine) select series by matchers
over a time range. Samples live in `array('q')` / `array('d')` pairs (16
bytes a sample, not ~50 as Python floats in lists). Memory is bounded three
ways: samples older than the retention are dropped, the number of series is
capped, and scraped series that no loaded rule reads can be refused at
ingest (`set_filter` with a `SeriesFilter`; scrapers ask `wants(labels)`).
Series written with `add` (other sources, recording rules, `ALERTS`) are
never filtered.
"""

from __future__ import annotations

import re
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sentinel.model import METRIC_NAME, Labels, label_value

DEFAULT_RETENTION_MS = 15 * 60 * 1000


class StoreFullError(Exception):
    """Raised when a new series would exceed the store's series limit."""


@dataclass(frozen=True, slots=True)
class Matcher:
    """A label matcher: `=`, `!=`, `=~` or `!~`, regexes fully anchored as in PromQL."""

    name: str
    op: str
    value: str
    _re: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"unknown matcher operator {self.op!r}")
        if self.op in ("=~", "!~"):
            object.__setattr__(self, "_re", re.compile(self.value))

    def matches(self, value: str) -> bool:
        """Whether a label value (empty when the label is absent) satisfies the matcher."""
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        assert self._re is not None
        # fullmatch, not ^...$: "$" would also match before a trailing newline.
        hit = self._re.fullmatch(value) is not None
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True, slots=True)
class SeriesFilter:
    """Which scraped series to keep: metric names, plus `__name__` matchers for regex selectors.

    Built from the rule expressions (`sentinel.rules.needs.needed_series`);
    `keep_all` keeps everything (a selector with no metric name, or the
    config switch).
    """

    names: frozenset[str] = frozenset()
    name_matchers: tuple[Matcher, ...] = ()
    keep_all: bool = False

    def wants_name(self, name: str) -> bool:
        """Whether series of this metric name are kept."""
        return (self.keep_all or name in self.names
                or any(m.matches(name) for m in self.name_matchers))


@dataclass(slots=True)
class Series:
    """The samples of one series in a time range, oldest first."""

    labels: Labels
    ts: list[int]
    vs: list[float]


class _Buffer:
    __slots__ = ("labels", "ts", "vs")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self.ts = array("q")
        self.vs = array("d")


class MemoryStore:
    """In-memory series store with per-series ring buffers and a metric-name index.

    Thread-safe: scrapes append from worker threads while rules read.
    """

    def __init__(
        self, retention_ms: int = DEFAULT_RETENTION_MS, max_series: int = 1_000_000
    ) -> None:
        self.retention_ms = retention_ms
        self.max_series = max_series
        self._lock = threading.Lock()
        self._refs: dict[Labels, int] = {}
        self._buffers: dict[int, _Buffer] = {}
        self._by_name: dict[str, set[int]] = {}
        self._next_ref = 1
        self._filter = SeriesFilter(keep_all=True)
        self._wanted: dict[str, bool] = {}
        self.filter_version = 0

    def set_filter(self, keep: SeriesFilter) -> None:
        """Keep only the scraped series `keep` wants from now on (scrapers re-check each page)."""
        with self._lock:
            self._filter = keep
            self._wanted = {}
            self.filter_version += 1

    def wants(self, labels: Labels) -> bool:
        """Whether a scraped series with these labels should be stored."""
        name = label_value(labels, METRIC_NAME)
        hit = self._wanted.get(name)
        if hit is None:
            self._wanted[name] = hit = self._filter.wants_name(name)
        return hit

    def ref(self, labels: Labels) -> int:
        """A stable reference for a label set, creating the series if new."""
        ref = self._refs.get(labels)
        if ref is not None:
            return ref
        with self._lock:
            ref = self._refs.get(labels)
            if ref is not None:
                return ref
            if len(self._buffers) >= self.max_series:
                raise StoreFullError(f"series limit {self.max_series} reached")
            ref = self._next_ref
            self._next_ref += 1
            self._buffers[ref] = _Buffer(labels)
            self._by_name.setdefault(label_value(labels, METRIC_NAME), set()).add(ref)
            self._refs[labels] = ref
            return ref

    def append(self, ref: int, t_ms: int, value: float) -> bool:
        """Append a sample; out-of-order samples (older than the newest) are dropped.

        Returns False when the reference is unknown (its series was garbage
        collected): the caller should take a fresh `ref()` and append again.
        """
        buf = self._buffers.get(ref)
        if buf is None:
            return False
        ts = buf.ts
        if ts and t_ms <= ts[-1]:
            if t_ms == ts[-1]:
                buf.vs[-1] = value
            return True
        ts.append(t_ms)
        buf.vs.append(value)
        # Trim in batches (a quarter of the retention at a time) so the cost of
        # deleting a list prefix is amortised over many appends.
        cutoff = t_ms - self.retention_ms
        if ts[0] < cutoff - self.retention_ms // 4:
            cut = bisect_left(ts, cutoff)
            del ts[:cut]
            del buf.vs[:cut]
        return True

    def add(self, labels: Labels, t_ms: int, value: float) -> None:
        """Append one sample by label set."""
        if not self.append(self.ref(labels), t_ms, value):
            self.append(self.ref(labels), t_ms, value)

    def select(self, matchers: Sequence[Matcher], start_ms: int, end_ms: int) -> list[Series]:
        """Series matching all matchers, with their samples in [start_ms, end_ms].

        In the order the series were created (the PromQL engine relies on it).
        """
        with self._lock:
            candidates = self._candidates(matchers)
            buffers = [self._buffers[r] for r in candidates if r in self._buffers]
        out = []
        for buf in buffers:
            if not all(m.matches(label_value(buf.labels, m.name)) for m in matchers):
                continue
            ts = buf.ts
            lo = bisect_left(ts, start_ms)
            hi = bisect_right(ts, end_ms)
            if lo < hi:
                out.append(Series(buf.labels, ts[lo:hi].tolist(), buf.vs[lo:hi].tolist()))
        return out

    def select_last(self, matchers: Sequence[Matcher], start_ms: int,
                    end_ms: int) -> list[Series]:
        """Like `select`, but each series carries only its newest sample in the range.

        What an instant vector selector reads: one sample, not the whole lookback
        window copied out of the packed arrays.
        """
        with self._lock:
            candidates = self._candidates(matchers)
            buffers = [self._buffers[r] for r in candidates if r in self._buffers]
        out = []
        for buf in buffers:
            if not all(m.matches(label_value(buf.labels, m.name)) for m in matchers):
                continue
            ts = buf.ts
            hi = bisect_right(ts, end_ms)
            if hi and ts[hi - 1] >= start_ms:
                out.append(Series(buf.labels, [ts[hi - 1]], [buf.vs[hi - 1]]))
        return out

    def _candidates(self, matchers: Sequence[Matcher]) -> Iterable[int]:
        # In creation (reference) order, as Prometheus's head returns series.
        for m in matchers:
            if m.name == METRIC_NAME and m.op == "=":
                return sorted(self._by_name.get(m.value, ()))
        return list(self._buffers)

    def gc(self, now_ms: int) -> int:
        """Drop samples older than the retention and series left empty; returns series removed."""
        cutoff = now_ms - self.retention_ms
        removed = 0
        with self._lock:
            for ref, buf in list(self._buffers.items()):
                cut = bisect_left(buf.ts, cutoff)
                if cut:
                    del buf.ts[:cut]
                    del buf.vs[:cut]
                if not buf.ts:
                    del self._buffers[ref]
                    del self._refs[buf.labels]
                    self._by_name[label_value(buf.labels, METRIC_NAME)].discard(ref)
                    removed += 1
        return removed

    def series_count(self) -> int:
        """Number of series held."""
        return len(self._buffers)

    def sample_count(self) -> int:
        """Number of samples held across all series."""
        return sum(len(b.ts) for b in list(self._buffers.values()))

    def sample_bytes(self) -> int:
        """Bytes of the samples held (timestamps and values, 16 bytes a sample)."""
        return sum(16 * len(b.ts)
                   for b in list(self._buffers.values()))
