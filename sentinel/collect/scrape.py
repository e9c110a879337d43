"""Scrape a target's Prometheus `/metrics` into the series store, as Prometheus does.

Per scrape: GET the page (text format, gzip, a total deadline, a body size
limit), parse it completely, then store every sample at the scrape time
with the target's labels, write `up`, `scrape_duration_seconds` and
`scrape_samples_scraped`, and write staleness markers for the series that
disappeared since the previous scrape. A failed scrape (HTTP error, timeout,
bad page, full store) stores nothing from the page, writes `up 0` and marks
every series of the target stale. `scrape` never raises. A series repeated
within a page is not a failure: as in Prometheus, its first sample is kept
and the others are dropped (and logged).

Thread-safety: the daemon runs one scrape job per target in a thread pool.
Each target has its own state and lock; the store and the HTTP client are
shared and thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from sentinel.collect.exposition import ExpositionError, Page, SeriesCache
from sentinel.collect.httpdeadline import deadline, deadline_client
from sentinel.model import METRIC_NAME, STALE_NAN, Labels, labels_of
from sentinel.store.memory import MemoryStore, StoreFullError

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
# What Prometheus sends when scrape_protocols is [PrometheusText0.0.4].
ACCEPT = "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
_EXPORTED = "exported_"


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One endpoint to scrape: `<url><metrics_path>`, with labels added to its series."""

    name: str
    url: str
    metrics_path: str = "/metrics"
    labels: Labels = ()
    interval_ms: int = 15_000
    timeout_ms: int = 10_000

    @property
    def scrape_url(self) -> str:
        """The URL that is fetched."""
        return self.url.rstrip("/") + self.metrics_path

    @property
    def instance(self) -> str:
        """`host:port` of the target, the port filled in from the scheme as Prometheus does."""
        u = httpx.URL(self.url)
        port = u.port or (443 if u.scheme == "https" else 80)
        host = f"[{u.host}]" if ":" in u.host else u.host
        return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """The outcome of one scrape: `samples` stored from the page, `stale` markers written."""

    target: ScrapeTarget
    up: bool
    duration_s: float
    samples: int
    stale: int
    error: str | None


class ScrapeError(Exception):
    """The target answered, but not with a usable page (status, size, deadline)."""


class Scraper:
    """Scrapes targets into a `MemoryStore`; keeps per-target series caches and staleness state.

    With no `client`, the scraper builds one whose sockets obey the scrape
    deadline at every read, so a target that trickles bytes or stalls
    mid-body is cut off at `timeout_ms`. A caller-supplied client gets the
    deadline checked between body chunks only.
    """

    def __init__(
        self,
        store: MemoryStore,
        client: httpx.Client | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.max_body_bytes = max_body_bytes
        self._own_client = client is None
        self._client = client if client is not None else deadline_client()
        self._clock = clock
        self._states: dict[str, _TargetState] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the HTTP client if the scraper created it."""
        if self._own_client:
            self._client.close()

    def scrape(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target at `now_ms` (the timestamp of its samples); never raises."""
        state = self._state(target, now_ms)
        with state.lock:
            start = self._clock()
            try:
                text, openmetrics = self._fetch(target, start)
            except (httpx.HTTPError, ScrapeError, UnicodeDecodeError) as e:
                return self._finish(state, now_ms, start, "", False, _describe(e, target))
            except Exception as e:  # a bug, not the target: record it, keep the loop alive
                log.exception("scrape of %s failed unexpectedly", target.name)
                return self._finish(state, now_ms, start, "", False, _internal(e))
            return self._finish(state, now_ms, start, text, openmetrics, None)

    def ingest(
        self, target: ScrapeTarget, text: str, now_ms: int, openmetrics: bool = False
    ) -> ScrapeResult:
        """Everything `scrape` does after the HTTP GET, for a page already in hand; never raises.

        Parses and stores `text` as `target`'s page at `now_ms`, with
        staleness and the `up`/`scrape_*` series. Used by the ingest benchmark
        and by sources that obtain exposition text another way.
        """
        state = self._state(target, now_ms)
        with state.lock:
            return self._finish(state, now_ms, self._clock(), text, openmetrics, None)

    def _finish(
        self, state: _TargetState, now_ms: int, start: float, text: str, openmetrics: bool,
        error: str | None,
    ) -> ScrapeResult:
        """Parse and store the page unless the fetch failed, then record the scrape's health."""
        samples = stale = 0
        if error is None:
            try:
                state.cache.openmetrics = openmetrics
                page = state.cache.parse(text, strict=False)
                stale = state.store_page(page, now_ms)
                samples = len(page.values)
                if page.duplicates and page.duplicates != state.last_duplicates:
                    log.warning("%s exposes %d duplicate samples; kept the first of each",
                                state.target.name, page.duplicates)
                state.last_duplicates = page.duplicates
            except (ExpositionError, StoreFullError) as e:
                error = _describe(e, state.target)
            except Exception as e:  # a bug, not the target: record it, keep the loop alive
                log.exception("storing the page of %s failed unexpectedly", state.target.name)
                error = _internal(e)
        if error is not None:
            stale = state.mark_all_stale(now_ms)
        duration = self._clock() - start
        state.report(now_ms, error is None, duration, samples)
        if error != state.last_error:
            if error is not None:
                log.warning("scrape of %s failed: %s", state.target.name, error)
            state.last_error = error
        return ScrapeResult(state.target, error is None, duration, samples, stale, error)

    def forget(self, name: str, now_ms: int) -> int:
        """Stop tracking a target: mark all its series (and its report series) stale.

        Returns the number of stale markers written. Call when a target is
        removed from the configuration, as Prometheus does when a target goes.
        """
        with self._lock:
            state = self._states.pop(name, None)
        if state is None:
            return 0
        with state.lock:
            return state.mark_all_stale(now_ms) + state.mark_reports_stale(now_ms)

    def _state(self, target: ScrapeTarget, now_ms: int) -> _TargetState:
        with self._lock:
            state = self._states.get(target.name)
            if state is not None and state.target == target:
                return state
            self._states[target.name] = new = _TargetState(self.store, target)
        if state is not None:  # the target's definition changed: its old series end
            with state.lock:
                state.mark_all_stale(now_ms)
        return new

    def _fetch(self, target: ScrapeTarget, start: float) -> tuple[str, bool]:
        """The page text and whether it is OpenMetrics; raises on anything but a good 200."""
        timeout_s = target.timeout_ms / 1000
        ends_at = start + timeout_s
        headers = {
            "Accept": ACCEPT,
            "Accept-Encoding": "gzip",
            "X-Prometheus-Scrape-Timeout-Seconds": f"{timeout_s:g}",
        }
        with deadline(ends_at), self._client.stream(
            "GET", target.scrape_url, headers=headers, timeout=timeout_s
        ) as resp:
            if resp.status_code != 200:
                raise ScrapeError(
                    f"server returned HTTP status {resp.status_code} {resp.reason_phrase}"
                )
            body = self._read_body(resp, ends_at, timeout_s)
            ctype = resp.headers.get("content-type", "")
        return body.decode("utf-8"), ctype.startswith("application/openmetrics-text")

    def _read_body(self, resp: httpx.Response, ends_at: float, timeout_s: float) -> bytes:
        limit = self.max_body_bytes
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit and "content-encoding" not in resp.headers:
            raise ScrapeError(f"body size limit exceeded: {declared} > {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_bytes():  # decompressed, so the limit bounds what we hold
            size += len(chunk)
            if size > limit:
                raise ScrapeError(f"body size limit exceeded: more than {limit} bytes")
            if self._clock() > ends_at:
                raise ScrapeError(f"scrape timed out after {timeout_s:g}s (body incomplete)")
            chunks.append(chunk)
        return b"".join(chunks)


def _internal(e: Exception) -> str:
    return f"internal error: {type(e).__name__}: {e}"


def _describe(e: Exception, target: ScrapeTarget) -> str:
    """A one-line reason for a failed scrape, naming the kind of failure."""
    if isinstance(e, httpx.TimeoutException):
        return f"scrape timed out after {target.timeout_ms / 1000:g}s ({type(e).__name__})"
    if isinstance(e, httpx.ConnectError):
        return f"connection failed: {e}"
    if isinstance(e, httpx.HTTPError):
        return f"{type(e).__name__}: {e}"
    if isinstance(e, ExpositionError):
        return f"invalid exposition: {e}"
    if isinstance(e, StoreFullError):
        return f"store full: {e}"
    if isinstance(e, UnicodeDecodeError):
        return f"body is not UTF-8: {e.reason} at byte {e.start}"
    return str(e)


class _TargetState:
    """Series of one target: the parse cache, slot → store ref, and last scrape's series.

    A slot is the scraper's stable number for one scraped label set; the
    store ref behind it can change when the store garbage-collects the
    series, so both the final labels and the ref are kept.
    """

    def __init__(self, store: MemoryStore, target: ScrapeTarget) -> None:
        self.store = store
        self.target = target
        self.lock = threading.Lock()
        self.last_error: str | None = None
        self.last_duplicates = 0
        self.base = {"target": target.name, "instance": target.instance, **dict(target.labels)}
        self.refs: dict[int, int] = {}
        self.labels: dict[int, Labels] = {}
        self.slot_of: dict[Labels, int] = {}
        self.prev: set[int] = set()
        self.next_slot = 0
        self.cache = SeriesCache(self._resolve)
        self.reports = {
            name: labels_of({**self.base, METRIC_NAME: name})
            for name in ("up", "scrape_duration_seconds", "scrape_samples_scraped")
        }

    def _resolve(self, scraped: Labels) -> int:
        slot = self.slot_of.get(scraped)
        if slot is not None:
            return slot
        final = with_target_labels(scraped, self.base)
        ref = self.store.ref(final)
        slot = self.next_slot
        self.next_slot += 1
        self.refs[slot] = ref
        self.labels[slot] = final
        self.slot_of[scraped] = slot
        return slot

    def store_page(self, page: Page, now_ms: int) -> int:
        """Append a parsed page at `now_ms`; returns the stale markers written."""
        refs = self.refs
        append = self.store.append
        if page.timestamps:
            self._store_timestamped(page, now_ms)
        else:
            for slot, value in zip(page.slots, page.values, strict=True):
                if not append(refs[slot], now_ms, value):
                    self._append_again(slot, now_ms, value)
        current = set(page.slots)
        if page.timestamps:
            # Prometheus tracks no staleness for series with explicit timestamps.
            current.difference_update(page.slots[i] for i in page.timestamps)
        gone = self.prev - current
        for slot in gone:
            self._append_stale(slot, now_ms)
        self.prev = current
        if len(self.refs) > 2 * len(page.slots) + 1000:
            self._compact(set(page.slots))
        return len(gone)

    def _store_timestamped(self, page: Page, now_ms: int) -> None:
        stamps = page.timestamps
        for i, (slot, value) in enumerate(zip(page.slots, page.values, strict=True)):
            t = stamps.get(i, now_ms)
            if not self.store.append(self.refs[slot], t, value):
                self._append_again(slot, t, value)

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
            log.warning("cannot record scrape health of %s: %s", self.target.name, e)

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

