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
from collections.abc import Sequence
from dataclasses import dataclass, field

from sentinel.model import METRIC_NAME, Labels, is_stale, label_value

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


@dataclass(slots=True)
class Summary:
    """What rate(), increase(), delta() and friends read of a series in a range.

    The non-stale samples in the range: how many, the first and the last,
    and the counter corrections (the value before each drop, in order) that
    Prometheus's extrapolatedRate adds. Built from the store's indexes
    without copying the samples out.
    """

    labels: Labels
    count: int
    t_first: int
    v_first: float
    t_last: int
    v_last: float
    corrections: Sequence[float]


_INT32 = 2**31 - 1
_EPOCH = 2**30  # buffer bases are multiples of this (~12.4 days), so they are shared
_BASES: dict[int, int] = {}


def _base_for(t_ms: int) -> int:
    """A shared int object for the base of a buffer whose oldest sample is at `t_ms`."""
    base = t_ms - t_ms % _EPOCH
    return _BASES.setdefault(base, base)


class _Buffer:
    """One series: timestamps as int32 ms after `base` (int64 past ~24 days), values as
    float32 while each is exactly a float32 (counts, bucket counts, small integers),
    float64 from the first value that is not (and for any NaN, so staleness markers
    keep their bits).

    Two small packed indexes are kept as samples arrive, so range functions
    need not walk the samples: the times of staleness markers, and the sample
    numbers of counter drops (a sample lower than the previous non-stale
    one). A sample's number is its position plus `gone`, the samples trimmed
    so far, so it holds while older samples are trimmed.
    """

    __slots__ = ("labels", "base", "ts", "vs", "stale_ts", "reset_at", "gone")

    def __init__(self, labels: Labels, base: int) -> None:
        self.labels = labels
        self.base = base
        self.ts = array("i")
        self.vs = array("f")  # float32 while every value is exactly one, then float64
        self.stale_ts: array[int] | None = None
        self.reset_at: array[int] | None = None
        self.gone = 0

    def note(self, t_ms: int, value: float) -> None:
        """Index the sample just appended (the newest)."""
        if value != value and is_stale(value):
            if self.stale_ts is None:
                self.stale_ts = array("q")
            self.stale_ts.append(t_ms)
            return
        vs = self.vs
        i = len(vs) - 2
        while i >= 0:  # the previous non-stale value
            prev = vs[i]
            if prev != prev and is_stale(prev):
                i -= 1
                continue
            if value < prev:
                if self.reset_at is None:
                    self.reset_at = array("q")
                self.reset_at.append(self.gone + len(vs) - 1)
            return

    def reindex(self) -> None:
        """Rebuild the indexes from the samples (after the newest one was overwritten)."""
        self.stale_ts = self.reset_at = None
        base, ts, vs = self.base, self.ts, self.vs
        prev: float | None = None
        for i, (t, v) in enumerate(zip(ts, vs, strict=True)):
            if v != v and is_stale(v):
                if self.stale_ts is None:
                    self.stale_ts = array("q")
                self.stale_ts.append(base + t)
                continue
            if prev is not None and v < prev:
                if self.reset_at is None:
                    self.reset_at = array("q")
                self.reset_at.append(self.gone + i)
            prev = v

    def widen(self) -> None:
        """Hold values as float64 from now on (float32 values convert exactly)."""
        if self.vs.typecode == "f":
            self.vs = array("d", self.vs)

    def rebase(self, t_ms: int) -> None:
        """Make room for `t_ms`: a new base before the oldest sample, or int64 timestamps."""
        old = [self.base + t for t in self.ts]
        self.base = _base_for(old[0] if old else t_ms)
        rel = [t - self.base for t in old]
        code = "i" if t_ms - self.base <= _INT32 else "q"
        self.ts = array(code, rel)

    def trim(self, cutoff_ms: int, most: int = 0) -> None:
        """Drop samples (and index entries) older than `cutoff_ms`; at most `most` if set."""
        cut = bisect_left(self.ts, cutoff_ms - self.base)
        if most and cut > most:
            cut = most
            cutoff_ms = self.base + self.ts[cut]
        if cut:
            del self.ts[:cut]
            del self.vs[:cut]
            self.gone += cut
        if self.stale_ts:
            del self.stale_ts[:bisect_left(self.stale_ts, cutoff_ms)]
        if self.reset_at:
            del self.reset_at[:bisect_left(self.reset_at, self.gone)]


class MemoryStore:
    """In-memory series store with per-series packed buffers and a metric-name index.

    Thread-safe: scrapes append from worker threads while rules read. Label
    pairs are interned (one `("target", "a")` tuple for all of a target's
    series), and the name index keeps each name's buffers in creation order,
    so a selector by name neither scans nor sorts.
    """

    def __init__(
        self, retention_ms: int = DEFAULT_RETENTION_MS, max_series: int = 1_000_000
    ) -> None:
        self.retention_ms = retention_ms
        self.max_series = max_series
        self._lock = threading.Lock()
        # Samples change under this lock and are read under it, one series at a
        # time: a reader never sees timestamps and values half appended or trimmed.
        self._data = threading.Lock()
        self._refs: dict[Labels, int] = {}
        self._buffers: dict[int, _Buffer] = {}
        # name -> ref -> buffer, in creation (= reference) order: refs only grow.
        self._by_name: dict[str, dict[int, _Buffer]] = {}
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
        # Postings of (name, other matchers) -> (series version, buffers), as
        # Prometheus caches postings: valid until a series is created or removed.
        self._postings: dict[tuple[str, tuple[Matcher, ...]], tuple[int, list[_Buffer]]] = {}
        self._version = 0
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
            pairs = self._pairs
            labels = tuple([pairs.setdefault(kv, kv) for kv in labels])
            buf = self._buffers[ref] = _Buffer(labels, 0)
            self._by_name.setdefault(label_value(labels, METRIC_NAME), {})[ref] = buf
            self._refs[labels] = ref
            self._version += 1
            return ref

    def append(self, ref: int, t_ms: int, value: float) -> bool:
        """Append a sample; out-of-order samples (older than the newest) are dropped.

        Returns False when the reference is unknown (its series was garbage
        collected): the caller should take a fresh `ref()` and append again.
        """
        buf = self._buffers.get(ref)
        if buf is None:
            return False
        with self._data:
            self._append(buf, t_ms, value)
        return True

    def _append(self, buf: _Buffer, t_ms: int, value: float) -> None:
        ts = buf.ts
        if ts:
            newest = buf.base + ts[-1]
            if t_ms <= newest:
                if t_ms == newest:
                    buf.vs[-1] = value
                    if buf.vs[-1] != value:  # not a float32 (or a NaN): widen
                        buf.widen()
                        buf.vs[-1] = value
                    buf.reindex()
                return
        else:
            buf.base = _base_for(t_ms)
        rel = t_ms - buf.base
        if rel > _INT32 and ts.typecode == "i":
            buf.rebase(t_ms)
            ts = buf.ts
            rel = t_ms - buf.base
        ts.append(rel)
        vs = buf.vs
        vs.append(value)
        if vs[-1] != value:  # not exactly a float32 (or a NaN): widen to float64
            buf.widen()
            buf.vs[-1] = value
        buf.note(t_ms, value)
        # Trim as samples age out, fewer than 16 at a time: CPython's array keeps
        # its allocation when it shrinks by less than 16 items, so once a buffer
        # has grown to the retention's size it is never reallocated again (no
        # churn of differently sized blocks, hence no fragmentation).
        cutoff = t_ms - self.retention_ms
        if buf.base + ts[0] < cutoff:
            buf.trim(cutoff, 15)

    def add(self, labels: Labels, t_ms: int, value: float) -> None:
        """Append one sample by label set."""
        if not self.append(self.ref(labels), t_ms, value):
            self.append(self.ref(labels), t_ms, value)

    def _matching(self, matchers: Sequence[Matcher]) -> list[_Buffer]:
        """Buffers whose labels satisfy all matchers, in creation (reference) order."""
        with self._lock:
            rest = list(matchers)
            key = None
            for i, m in enumerate(matchers):
                if m.name == METRIC_NAME and m.op == "=":
                    del rest[i]
                    key = (m.value, tuple(rest))
                    version = self._version
                    if rest:
                        hit = self._postings.get(key)
                        if hit is not None and hit[0] == version:
                            return hit[1]
                    found = self._by_name.get(m.value)
                    buffers = list(found.values()) if found else []
                    break
            else:
                buffers = list(self._buffers.values())
        if not rest:
            return buffers
        buffers = [b for b in buffers
                   if all(m.matches(label_value(b.labels, m.name)) for m in rest)]
        if key is not None:
            with self._lock:
                if len(self._postings) > 10_000:
                    self._postings.clear()
                self._postings[key] = (version, buffers)
        return buffers

    def select(self, matchers: Sequence[Matcher], start_ms: int, end_ms: int) -> list[Series]:
        """Series matching all matchers, with their samples in [start_ms, end_ms].

        In the order the series were created (the PromQL engine relies on it).
        """
        out = []
        data = self._data
        for buf in self._matching(matchers):
            with data:
                ts, base = buf.ts, buf.base
                lo = bisect_left(ts, start_ms - base)
                hi = bisect_right(ts, end_ms - base)
                if lo >= hi:
                    continue
                rel, vs = ts[lo:hi], buf.vs[lo:hi]
            out.append(Series(buf.labels, [base + t for t in rel], vs.tolist()))
        return out

    def select_last(self, matchers: Sequence[Matcher], start_ms: int,
                    end_ms: int) -> list[Series]:
        """Like `select`, but each series carries only its newest sample in the range.

        What an instant vector selector reads: one sample, not the whole lookback
        window copied out of the packed arrays.
        """
        out = []
        data = self._data
        for buf in self._matching(matchers):
            with data:
                ts, base = buf.ts, buf.base
                hi = bisect_right(ts, end_ms - base)
                if not hi or base + ts[hi - 1] < start_ms:
                    continue
                t, v = base + ts[hi - 1], buf.vs[hi - 1]
            out.append(Series(buf.labels, [t], [v]))
        return out

    def summarize(self, matchers: Sequence[Matcher], start_ms: int,
                  end_ms: int) -> list[Summary]:
        """Like `select`, but a `Summary` of each series' non-stale samples in the range.

        Read from the indexes (two bisects and the counter drops in the range)
        unless a staleness marker lies in the range; series with no non-stale
        sample in it are left out.
        """
        out = []
        data = self._data
        for buf in self._matching(matchers):
            with data:
                summary = _summary(buf, start_ms, end_ms)
            if summary is not None:
                out.append(summary)
        return out

    def has_live(self, name: str, start_ms: int, end_ms: int) -> bool:
        """Whether some series of the metric `name` has a non-stale sample in the range."""
        with self._lock:
            found = self._by_name.get(name)
            buffers = list(found.values()) if found else []
        data = self._data
        for buf in buffers:
            with data:
                ts, base = buf.ts, buf.base
                n = bisect_right(ts, end_ms - base) - bisect_left(ts, start_ms - base)
                stale = buf.stale_ts
                if stale:
                    n -= bisect_right(stale, end_ms) - bisect_left(stale, start_ms)
            if n > 0:
                return True
        return False

    def gc(self, now_ms: int) -> int:
        """Drop samples older than the retention and series left empty; returns series removed."""
        cutoff = now_ms - self.retention_ms
        removed = 0
        with self._lock:
            for ref, buf in list(self._buffers.items()):
                with self._data:
                    buf.trim(cutoff)
                if not buf.ts:
                    del self._buffers[ref]
                    del self._refs[buf.labels]
                    del self._by_name[label_value(buf.labels, METRIC_NAME)][ref]
                    removed += 1
                    self._version += 1
            if removed and len(self._pairs) > 2 * len(self._buffers) + 10_000:
                self._pairs = {kv: kv for b in self._buffers.values() for kv in b.labels}
        return removed

    def series_count(self) -> int:
        """Number of series held."""
        return len(self._buffers)

    def sample_count(self) -> int:
        """Number of samples held across all series."""
        return sum(len(b.ts) for b in list(self._buffers.values()))

    def sample_bytes(self) -> int:
        """Bytes of the samples held (timestamps and values)."""
        return sum(len(b.ts) * (b.ts.itemsize + b.vs.itemsize)
                   for b in list(self._buffers.values()))


def _summary(buf: _Buffer, start_ms: int, end_ms: int) -> Summary | None:
    """One series' summary of [start_ms, end_ms], or None without a non-stale sample."""
    ts, base = buf.ts, buf.base
    lo = bisect_left(ts, start_ms - base)
    hi = bisect_right(ts, end_ms - base)
    if lo >= hi:
        return None
    stale = buf.stale_ts
    if stale and bisect_right(stale, end_ms) > bisect_left(stale, start_ms):
        return _walk(buf, lo, hi)  # a marker in the range: the long way
    t0, t1 = base + ts[lo], base + ts[hi - 1]
    corrections: Sequence[float] = ()
    vs = buf.vs
    drops = buf.reset_at
    if drops:
        gone = buf.gone
        a, b = bisect_right(drops, gone + lo), bisect_left(drops, gone + hi)
        if a < b:
            # No marker in the range: each drop's correction (the value
            # before it) is the sample just before it.
            corrections = [vs[d - gone - 1] for d in drops[a:b]]
    return Summary(buf.labels, hi - lo, t0, vs[lo], t1, vs[hi - 1], corrections)


def _walk(buf: _Buffer, lo: int, hi: int) -> Summary | None:
    """The summary of samples lo..hi-1 the long way, skipping staleness markers."""
    base, ts, vs = buf.base, buf.ts, buf.vs
    count = 0
    t0 = t1 = 0
    v0 = v1 = 0.0
    corrections: list[float] = []
    for i in range(lo, hi):
        v = vs[i]
        if v != v and is_stale(v):
            continue
        if count == 0:
            t0, v0 = base + ts[i], v
        elif v < v1:
            corrections.append(v1)
        t1, v1 = base + ts[i], v
        count += 1
    if not count:
        return None
    return Summary(buf.labels, count, t0, v0, t1, v1, corrections)
