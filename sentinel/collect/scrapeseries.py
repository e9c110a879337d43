"""A scraped target's series: parse cache, store refs, staleness, limits and the keep filter.

Split from `scrape.py` (which owns the HTTP side). One `TargetSeries` per
target; it is used by one scrape at a time under its `lock`.

Series the store does not want (no loaded rule reads their metric name,
see `MemoryStore.wants`) are parsed like any other, so a bad page is still
a failed scrape, but they get no store series and no label tuple kept: only
the parse cache's entry for their line, so the next scrape skips them with
one dict lookup. They are counted as dropped.
"""

from __future__ import annotations

import logging
import threading

from sentinel.collect.exposition import Page, SeriesCache
from sentinel.model import METRIC_NAME, STALE_NAN, Labels, label_value, labels_of
from sentinel.store.memory import MemoryStore, StoreFullError

log = logging.getLogger(__name__)

_EXPORTED = "exported_"


class LimitError(Exception):
    """A page broke the target's `sample_limit` or `label_limit` (`limit` names which)."""

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)


class TargetSeries:
    """Series of one target: the parse cache, slot → store ref, and last scrape's series.

    A slot is the scraper's stable number for one scraped label set; the
    store ref behind it can change when the store garbage-collects the
    series, so both the final labels and the ref are kept (for kept series
    only: a slot with no ref is a dropped series).
    """

    def __init__(self, store: MemoryStore, target: object, base: dict[str, str],
                 label_limit: int = 0) -> None:
        self.store = store
        self.target = target
        self.lock = threading.Lock()
        self.last_error: str | None = None
        self.last_duplicates = 0
        self.base = base
        self.label_limit = label_limit
        self.refs: dict[int, int] = {}
        self.labels: dict[int, Labels] = {}
        self.slot_of: dict[Labels, int] = {}
        self.prev: set[int] = set()
        self.next_slot = 0
        self.filter_version = store.filter_version
        self.cache = SeriesCache(self._resolve)
        self.reports = {
            name: labels_of({**base, METRIC_NAME: name})
            for name in ("up", "scrape_duration_seconds", "scrape_samples_scraped")
        }

    def _resolve(self, scraped: Labels) -> int:
        slot = self.slot_of.get(scraped)
        if slot is not None:
            return slot
        final = with_target_labels(scraped, self.base)
        if self.label_limit and len(final) > self.label_limit:
            raise LimitError("label_limit", (
                f"label_limit exceeded (metric: {label_value(final, METRIC_NAME)[:50]}, "
                f"number of labels: {len(final)}, limit: {self.label_limit})"))
        slot = self.next_slot
        self.next_slot += 1
        if not self.store.wants(final):
            return slot  # dropped: nothing kept but the parse cache's line → slot
        self.refs[slot] = self.store.ref(final)
        self.labels[slot] = final
        self.slot_of[scraped] = slot
        return slot

    def refresh_filter(self) -> None:
        """Apply a new store filter (rules reloaded): re-decide every series at the next parse.

        Kept series the filter no longer wants are dropped from now on;
        dropped series are forgotten by the parse cache so their lines are
        resolved again, and kept if the new rules read them.
        """
        if self.filter_version == self.store.filter_version:
            return
        self.filter_version = self.store.filter_version
        for slot in [s for s, lb in self.labels.items() if not self.store.wants(lb)]:
            del self.refs[slot], self.labels[slot]
        self.slot_of = {lb: s for lb, s in self.slot_of.items() if s in self.refs}
        self.prev &= self.refs.keys()
        self.cache.retain(set(self.refs))

    def store_page(self, page: Page, now_ms: int) -> tuple[int, int]:
        """Append a parsed page at `now_ms`; returns (stale markers written, samples dropped)."""
        refs = self.refs
        get = refs.get
        append = self.store.append
        kept = 0
        if page.timestamps:
            kept = self._store_timestamped(page, now_ms)
        else:
            for slot, value in zip(page.slots, page.values, strict=True):
                ref = get(slot)
                if ref is None:
                    continue
                kept += 1
                if not append(ref, now_ms, value):
                    self._append_again(slot, now_ms, value)
        current = {s for s in page.slots if s in refs}
        if page.timestamps:
            # Prometheus tracks no staleness for series with explicit timestamps.
            current.difference_update(page.slots[i] for i in page.timestamps)
        gone = self.prev - current
        for slot in gone:
            self._append_stale(slot, now_ms)
        self.prev = current
        if len(self.cache) > 2 * len(page.slots) + 1000:
            self._compact(set(page.slots))
        return len(gone), len(page.slots) - kept

    def _store_timestamped(self, page: Page, now_ms: int) -> int:
        stamps = page.timestamps
        kept = 0
        for i, (slot, value) in enumerate(zip(page.slots, page.values, strict=True)):
            ref = self.refs.get(slot)
            if ref is None:
                continue
            kept += 1
            t = stamps.get(i, now_ms)
            if not self.store.append(ref, t, value):
                self._append_again(slot, t, value)
        return kept

    def _append_again(self, slot: int, t_ms: int, value: float) -> None:
        # The store garbage-collected the series (it was absent for a whole
        # retention); take a fresh ref for the same labels.
        self.refs[slot] = ref = self.store.ref(self.labels[slot])
        self.store.append(ref, t_ms, value)

    def _append_stale(self, slot: int, now_ms: int) -> None:
        # False means the series is already collected: nothing left to mark.
        self.store.append(self.refs[slot], now_ms, STALE_NAN)

    def mark_all_stale(self, now_ms: int) -> int:
        """Write staleness markers for every series of the last good scrape."""
        n = len(self.prev)
        for slot in self.prev:
            self._append_stale(slot, now_ms)
        self.prev = set()
        return n

    def mark_reports_stale(self, now_ms: int) -> int:
        """Write staleness markers for `up` and the other per-scrape series."""
        for labels in self.reports.values():
            self.store.add(labels, now_ms, STALE_NAN)
        return len(self.reports)

    def report(self, now_ms: int, up: bool, duration_s: float, samples: int) -> None:
        """Write `up`, `scrape_duration_seconds`, `scrape_samples_scraped`."""
        values = (1.0 if up else 0.0, duration_s, float(samples))
        try:
            for labels, value in zip(self.reports.values(), values, strict=True):
                self.store.add(labels, now_ms, value)
        except StoreFullError as e:
            log.warning("cannot record scrape health of %s: %s", self.base.get("target"), e)

    def _compact(self, keep: set[int]) -> None:
        """Forget series not in the last page, so label churn cannot grow memory forever."""
        self.cache.retain(keep)
        self.refs = {s: r for s, r in self.refs.items() if s in keep}
        self.labels = {s: lb for s, lb in self.labels.items() if s in keep}
        self.slot_of = {lb: s for lb, s in self.slot_of.items() if s in keep}


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
