"""A scraped target's series: staleness, limits and the keep filter, over a fleet-wide parse cache.

Split from `scrape.py` (which owns the HTTP side).

Targets of a fleet serve the same page shape: the same lines
`vllm:num_requests_waiting{engine="0",model_name="gemma-4"}` with their own
values; target labels are added after parsing. So the parse cache
(`SeriesCache`, line text → slot) is shared by every target of a scraper
(`SharedSeries`): a slot stands for one scraped label set, whatever target
it came from, and each target only maps the slots it stores to store refs.
With 1,000 targets this holds one copy of each line text instead of 1,000
(about 90 MB less at 1,000 vLLM targets).

Series the store does not want (no loaded rule reads their metric name,
see `MemoryStore.wants`) are parsed like any other, so a bad page is still
a failed scrape, but they get no store series: they are counted as dropped.
"""

from __future__ import annotations

import logging
import threading

from sentinel.collect.exposition import Page, SeriesCache
from sentinel.model import METRIC_NAME, STALE_NAN, Labels, label_value, labels_of
from sentinel.store.memory import Clock, MemoryStore, SeriesRef

log = logging.getLogger(__name__)

_EXPORTED = "exported_"
# The shared cache is rebuilt past this many distinct line texts (label churn).
MAX_SHARED_SERIES = 200_000


class LimitError(Exception):
    """A page broke the target's `sample_limit` or `label_limit` (`limit` names which)."""

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)


class SharedSeries:
    """The fleet's parse cache: line text → slot, slot → scraped labels and whether it is kept.

    Thread-safe: parsing holds the lock (scrapes parse on the one I/O loop,
    so it is rarely contended). When label churn grows it past
    MAX_SHARED_SERIES it starts over with a new `generation`, and targets
    drop their slot maps.
    """

    def __init__(self, store: MemoryStore, max_series: int = MAX_SHARED_SERIES) -> None:
        self.store = store
        self.max_series = max_series
        self.lock = threading.Lock()
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        self.cache = SeriesCache(self._resolve)
        self.labels: list[Labels] = []
        self.nlabels: list[int] = []
        self.wanted: list[bool] = []
        self.slot_of: dict[Labels, int] = {}
        self.filter_version = self.store.filter_version

    def _resolve(self, scraped: Labels) -> int:
        slot = self.slot_of.get(scraped)
        if slot is None:
            slot = self.slot_of[scraped] = len(self.labels)
            self.labels.append(scraped)
            self.nlabels.append(len(scraped))
            self.wanted.append(self.store.wants(scraped))
        return slot

    def parse(self, text: str, openmetrics: bool) -> tuple[Page, int]:
        """Parse a page into shared slots; returns it with the generation its slots belong to."""
        with self.lock:
            if len(self.cache) > self.max_series:
                self._reset()
                self.generation += 1
            if self.filter_version != self.store.filter_version:  # rules reloaded
                self.filter_version = self.store.filter_version
                self.wanted = [self.store.wants(lb) for lb in self.labels]
            self.cache.openmetrics = openmetrics
            return self.cache.parse(text, strict=False), self.generation


class TargetSeries:
    """Series of one target: shared slot → store ref for the series it keeps, and staleness.

    `prev` holds the store refs written by the last good scrape, so the
    series missing from the next one get a staleness marker.
    """

    def __init__(self, shared: SharedSeries, target: object, base: dict[str, str],
                 label_limit: int = 0) -> None:
        self.shared = shared
        self.store = shared.store
        self.target = target
        self.lock = threading.Lock()
        self.last_error: str | None = None
        self.last_duplicates = 0
        self.base = base
        self.label_limit = label_limit
        self.refs: dict[int, SeriesRef] = {}
        # The series of one scrape are written at one time: they share its clock.
        self.clock = Clock()
        self.generation = shared.generation
        # Refs written by the last good scrape, in page order.
        self.prev: list[SeriesRef] = []
        self.reports = {
            name: labels_of({**base, METRIC_NAME: name})
            for name in ("up", "scrape_duration_seconds", "scrape_samples_scraped")
        }

    def parse(self, text: str, openmetrics: bool) -> Page:
        """Parse a page into shared slots; LimitError past the label limit."""
        page, generation = self.shared.parse(text, openmetrics)
        if generation != self.generation:
            self.refs, self.generation = {}, generation
        if self.label_limit:
            self._check_label_limit(page)
        return page

    def _check_label_limit(self, page: Page) -> None:
        # Target labels are added to every series, renaming clashes to exported_*,
        # so each series ends with exactly its scraped labels plus the target's.
        nlabels = self.shared.nlabels
        extra = len(self.base)
        for slot in page.slots:
            if nlabels[slot] + extra > self.label_limit:
                name = label_value(self.shared.labels[slot], METRIC_NAME)
                raise LimitError("label_limit", (
                    f"label_limit exceeded (metric: {name[:50]}, number of labels: "
                    f"{nlabels[slot] + extra}, limit: {self.label_limit})"))

    def _ref(self, slot: int, stamped: bool = False) -> SeriesRef:
        # A series with its own timestamps cannot share the scrape's time: its own clock.
        clock = None if stamped else self.clock
        ref = self.refs[slot] = self.store.ref(self._final(slot), clock)
        return ref

    def _final(self, slot: int) -> Labels:
        return with_target_labels(self.shared.labels[slot], self.base)

    def store_page(self, page: Page, now_ms: int) -> tuple[int, int]:
        """Append a parsed page at `now_ms`; returns (stale markers written, samples dropped)."""
        wanted = self.shared.wanted
        get = self.refs.get
        append = self.store.append
        stamps = page.timestamps
        current: list[SeriesRef] = []  # written at now_ms, in page order
        values: list[float] = []
        slots: list[int] = []
        for i, (slot, value) in enumerate(zip(page.slots, page.values, strict=True)):
            if not wanted[slot]:
                continue
            if stamps and i in stamps:  # no staleness tracking for explicit timestamps
                ref = get(slot)
                if ref is None or not append(ref, stamps[i], value):
                    append(self._ref(slot, True), stamps[i], value)
                continue
            ref = get(slot)
            current.append(ref if ref is not None else self._ref(slot))
            values.append(value)
            slots.append(slot)
        for i in self.store.append_at(now_ms, current, values):
            # The store garbage-collected the series (absent for a whole
            # retention): take a fresh ref for the same labels.
            current[i] = self._ref(slots[i])
            append(current[i], now_ms, values[i])
        kept = sum(1 for slot in page.slots if wanted[slot])
        # Pages keep their shape from scrape to scrape: comparing the refs in page
        # order is cheap (identity first), a set is built only when the shape changed.
        gone = set(self.prev).difference(current) if current != self.prev else ()
        for ref in gone:
            append(ref, now_ms, STALE_NAN)  # False: already collected, nothing to mark
        self.prev = current
        if len(self.refs) > 2 * kept + 1000:  # label churn: forget slots not seen now
            seen = set(page.slots)
            self.refs = {s: r for s, r in self.refs.items() if s in seen}
        return len(gone), len(page.slots) - kept

    def mark_all_stale(self, now_ms: int) -> int:
        """Write staleness markers for every series of the last good scrape."""
        refs = set(self.prev)
        for ref in refs:
            self.store.append(ref, now_ms, STALE_NAN)
        self.prev = []
        return len(refs)

    def mark_reports_stale(self, now_ms: int) -> int:
        """Write staleness markers for `up` and the other per-scrape series."""
        for labels in self.reports.values():
            self.store.add(labels, now_ms, STALE_NAN)
        return len(self.reports)

    def report(self, now_ms: int, up: bool, duration_s: float, samples: int) -> None:
        """Write `up`, `scrape_duration_seconds`, `scrape_samples_scraped`.

        Past the store's series cap too (three series a target): a full store
        must still tell which targets are up.
        """
        values = (1.0 if up else 0.0, duration_s, float(samples))
        for labels, value in zip(self.reports.values(), values, strict=True):
            self.store.add(labels, now_ms, value, capped=False)


def with_target_labels(scraped: Labels, target_labels: dict[str, str]) -> Labels:
    """Attach target labels to scraped labels, as Prometheus does with honor_labels: false.

    A scraped label that clashes with a target label is kept as
    `exported_<name>` (more `exported_` prefixes while that name is taken).
    """
    out = dict(scraped)
    conflicts = [(k, out[k]) for k in target_labels if out.get(k)]
    out.update(target_labels)
    for name, value in sorted(conflicts, key=lambda kv: len(kv[0])):
        new = name
        while True:
            new = _EXPORTED + new
            if not out.get(new):
                out[new] = value
                break
    return labels_of(out)


def count_samples(text: str) -> int:
    """Sample lines of an exposition page (neither empty nor a comment), without parsing it."""
    return sum(1 for line in text.split("\n") if line and line[0] != "#")
