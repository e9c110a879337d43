"""Scrape a target's Prometheus `/metrics` into the series store, as Prometheus does.

Per scrape: GET the page (text format, gzip, a total deadline, a size limit
on the decoded body), parse it completely, then store every sample the
store wants at the scrape time with the target's labels, write `up`,
`scrape_duration_seconds` and `scrape_samples_scraped`, and write staleness
markers for the series that disappeared since the previous scrape. A failed
scrape (HTTP error, timeout, bad page, `sample_limit`/`label_limit`
exceeded, full store) stores nothing from the page, writes `up 0` and marks
every series of the target stale. A series repeated within a page is not a
failure: as in Prometheus, its first sample is kept and the others dropped.

Concurrency: the HTTP side is asyncio. `scrape_async` runs on the daemon's
one I/O loop (`sentinel.collect.ioloop`), with one kept-alive connection
per target (`sentinel.collect.http1`); the parse and store step is plain
code run on the loop, guarded by the target's lock so `ingest` may be
called from other threads. `scrape` is the blocking form for tools and
tests: it runs `scrape_async` on the scraper's loop and waits. Neither
raises.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sentinel.collect.deadlines import SentinelLate
from sentinel.collect.exposition import ExpositionError
from sentinel.collect.http1 import Connection, HTTPError, build_request
from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrapeseries import (
    LimitError,
    SharedSeries,
    TargetSeries,
    count_samples,
    with_target_labels,
)
from sentinel.collect.tlssettings import TLSSettings, tls_context, tls_problem
from sentinel.model import Labels
from sentinel.store.memory import MemoryStore, StoreFullError

__all__ = ["Scraper", "ScrapeTarget", "ScrapeResult", "ScrapeError", "with_target_labels"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
# What Prometheus sends when scrape_protocols is [PrometheusText0.0.4].
ACCEPT = "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
USER_AGENT = "Sentinel"


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One endpoint to scrape: `<url><metrics_path>`, with labels added to its series.

    `sample_limit` and `label_limit` are Prometheus's: more samples in a
    page, or more labels on one series (target labels included), fail the
    whole scrape; 0 means no limit.
    """

    name: str
    url: str
    metrics_path: str = "/metrics"
    labels: Labels = ()
    interval_ms: int = 15_000
    timeout_ms: int = 10_000
    sample_limit: int = 0
    label_limit: int = 0
    # How the page is reached (config/scrapeclient.py): an Authorization header value,
    # TLS settings for an https target, an http proxy.
    auth_header: str | None = field(default=None, repr=False)
    tls: TLSSettings | None = None
    proxy_url: str | None = None

    @property
    def scrape_url(self) -> str:
        """The URL that is fetched."""
        return self.url.rstrip("/") + self.metrics_path

    @property
    def instance(self) -> str:
        """`host:port` of the target, the port filled in from the scheme as Prometheus does."""
        u = urlsplit(self.url)
        try:
            port = u.port
        except ValueError:
            port = None
        port = port or (443 if u.scheme == "https" else 80)
        host = u.hostname or ""
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """The outcome of one scrape: `samples` in the page, `stale` markers written.

    `dropped` counts samples of the page that the store did not want (no
    rule reads them); `limit` names the limit a failed scrape broke.
    `missed`: the scrape did not happen (its collect worker was lost, see
    `sentinel.collect.workerpool`); it was counted as missed, and nothing
    about the target was written. `late`: it did not finish because Sentinel
    was behind (its deadline was reached late, `SentinelLate`): nothing about
    the target was written either (`up` is not 0), it is `missed` too, and the
    pipeline counts it in `sentinel_scrapes_late_total`.
    """

    target: ScrapeTarget
    up: bool
    duration_s: float
    samples: int
    stale: int
    error: str | None
    dropped: int = 0
    limit: str | None = None
    missed: bool = False
    late: bool = False


class ScrapeError(Exception):
    """The target answered, but not with a usable page (status, size, deadline)."""


class _Target(TargetSeries):
    """A target's series plus its connection and prepared request bytes."""

    def __init__(self, shared: SharedSeries, target: ScrapeTarget) -> None:
        base = {"target": target.name, "instance": target.instance, **dict(target.labels)}
        super().__init__(shared, target, base, target.label_limit)
        self.spec = target
        self.conn: Connection | None = None
        self.request = b""


class Scraper:
    """Scrapes targets into a `MemoryStore`; keeps per-target state and connections.

    `io` is the event loop that runs the HTTP side; without one the scraper
    starts a private loop when `scrape` is first called.
    """

    def __init__(
        self,
        store: MemoryStore,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        clock: Callable[[], float] = time.monotonic,
        io: IOLoop | None = None,
    ) -> None:
        self.store = store
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        self._own_io = io is None
        self._io = io
        self._states: dict[str, _Target] = {}
        self._shared = SharedSeries(store)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close every connection, and the loop if the scraper started it."""
        for state in list(self._states.values()):
            if state.conn is not None:
                conn, state.conn = state.conn, None
                if self._io is not None and self._io.running and not self._io.in_loop():
                    self._io.call_soon(conn.close)
                else:
                    conn.close()
        if self._own_io and self._io is not None:
            self._io.stop(2.0)
            self._io = None

    def scrape(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target at `now_ms`, blocking until done; never raises."""
        if self._io is None:
            with self._lock:
                if self._io is None:
                    self._io = IOLoop("sentinel-scraper").start()
        return self._io.run(self.scrape_async(target, now_ms))

    async def scrape_async(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target at `now_ms` on the running loop; never raises."""
        state = self._state(target, now_ms)
        start = self._clock()
        try:
            text, openmetrics = await self._fetch(state)
        except SentinelLate:  # Sentinel was behind, not the target: nothing is written
            return ScrapeResult(target, False, self._clock() - start, 0, 0, None,
                                missed=True, late=True)
        except (HTTPError, ScrapeError, UnicodeDecodeError, TimeoutError) as e:
            error = describe_error(e, target)
            return self._locked_finish(state, now_ms, start, "", False, error)
        except Exception as e:  # a bug, not the target: record it, keep the loop alive
            log.exception("scrape of %s failed unexpectedly", target.name)
            return self._locked_finish(state, now_ms, start, "", False, internal_error(e))
        return self._locked_finish(state, now_ms, start, text, openmetrics, None)

    def ingest(
        self, target: ScrapeTarget, text: str, now_ms: int, openmetrics: bool = False
    ) -> ScrapeResult:
        """Everything `scrape` does after the HTTP GET, for a page already in hand; never raises.

        Parses and stores `text` as `target`'s page at `now_ms`, with
        staleness and the `up`/`scrape_*` series. Used by the ingest benchmark
        and by sources that obtain exposition text another way.
        """
        state = self._state(target, now_ms)
        return self._locked_finish(state, now_ms, self._clock(), text, openmetrics, None)

    def _locked_finish(self, state: _Target, now_ms: int, start: float, text: str,
                       openmetrics: bool, error: str | None) -> ScrapeResult:
        with state.lock:
            if self._states.get(state.spec.name) is not state:
                # The target went (or was redefined) while this scrape was in flight: its
                # series already ended with staleness markers, and a page stored now would
                # bring them back after the marker (a reload on a starved machine did).
                return ScrapeResult(state.spec, False, self._clock() - start, 0, 0, None,
                                    missed=True)
            return self._finish(state, now_ms, start, text, openmetrics, error)

    def _finish(
        self, state: _Target, now_ms: int, start: float, text: str, openmetrics: bool,
        error: str | None,
    ) -> ScrapeResult:
        """Parse and store the page unless the fetch failed, then record the scrape's health."""
        samples = stale = dropped = 0
        limit = None
        if error is None:
            try:
                check_sample_limit(text, state.spec.sample_limit)
                page = state.parse(text, openmetrics)
                stale, dropped = state.store_page(page, now_ms)
                samples = len(page.values)
                if page.duplicates and page.duplicates != state.last_duplicates:
                    log.warning("%s exposes %d duplicate samples; kept the first of each",
                                state.spec.name, page.duplicates)
                state.last_duplicates = page.duplicates
            except LimitError as e:
                error, limit = str(e), e.limit
            except (ExpositionError, StoreFullError) as e:
                error = describe_error(e, state.spec)
            except Exception as e:  # a bug, not the target: record it, keep the loop alive
                log.exception("storing the page of %s failed unexpectedly", state.spec.name)
                error = internal_error(e)
        if error is not None:
            stale = state.mark_all_stale(now_ms)
        duration = self._clock() - start
        state.report(now_ms, error is None, duration, samples)
        if error != state.last_error:
            if error is not None:
                log.warning("scrape of %s failed: %s", state.spec.name, error)
            state.last_error = error
        return ScrapeResult(state.spec, error is None, duration, samples, stale, error,
                            dropped, limit)

    def forget(self, name: str, now_ms: int) -> int:
        """Stop tracking a target: mark all its series (and its report series) stale.

        Returns the number of stale markers written. Call when a target is
        removed from the configuration, as Prometheus does when a target goes.
        """
        with self._lock:
            state = self._states.pop(name, None)
        if state is None:
            return 0
        if state.conn is not None:
            state.conn.close()
        with state.lock:
            return state.mark_all_stale(now_ms) + state.mark_reports_stale(now_ms)

    def _state(self, target: ScrapeTarget, now_ms: int) -> _Target:
        with self._lock:
            state = self._states.get(target.name)
            if state is not None and state.spec == target:
                return state
            self._states[target.name] = new = _Target(self._shared, target)
        if state is not None:  # the target's definition changed: its old series end
            if state.conn is not None:
                state.conn.close()
            with state.lock:
                state.mark_all_stale(now_ms)
        return new

    def target_state(self, target: ScrapeTarget, now_ms: int) -> _Target:
        """The target's state (series, connection), new when its definition changed."""
        return self._state(target, now_ms)

    async def fetch(self, state: _Target) -> tuple[str, bool]:
        """The page of a target (`target_state`): its text and whether it is OpenMetrics."""
        return await self._fetch(state)

    async def _fetch(self, state: _Target) -> tuple[str, bool]:
        """The page text and whether it is OpenMetrics; raises on anything but a good 200."""
        target = state.spec
        timeout_s = target.timeout_ms / 1000
        if state.conn is None:
            state.conn, state.request = self._connection(target, timeout_s)
        deadline = asyncio.get_running_loop().time() + timeout_s
        resp = await state.conn.get(state.request, self.max_body_bytes, deadline=deadline)
        if resp.status != 200:
            raise ScrapeError(f"server returned HTTP status {resp.status} {resp.reason}")
        ctype = resp.headers.get("content-type", "")
        return resp.body.decode("utf-8"), ctype.startswith("application/openmetrics-text")


    def _connection(self, target: ScrapeTarget, timeout_s: float) -> tuple[Connection, bytes]:
        """The connection (direct, or to the proxy) and the request sent on it each scrape."""
        tls = target.tls or TLSSettings()
        context = tls_context_or_error(tls) if target.url.startswith("https://") else None
        conn = Connection(target.proxy_url or target.url, context, tls.server_name)
        # The URL's own path is a prefix: http://h/vllm + /metrics → GET /vllm/metrics.
        # Through a proxy the request names the whole URL (absolute form).
        path = target.scrape_url if target.proxy_url else urlsplit(target.scrape_url).path or "/"
        headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT, "Accept-Encoding": "gzip",
                   "X-Prometheus-Scrape-Timeout-Seconds": f"{timeout_s:g}"}
        if target.auth_header is not None:
            headers["Authorization"] = target.auth_header
        return conn, build_request(target.url, path, headers)


def tls_context_or_error(tls: TLSSettings) -> ssl.SSLContext:
    """The scrape's SSLContext; a bad file raises ScrapeError naming it and the fix.

    The config's fault, so one clear line (logged once, as the scrape's error does
    not change) instead of an ssl.SSLError traceback on every scrape.
    """
    try:
        return tls_context(tls)
    except (ssl.SSLError, OSError, ValueError) as exc:
        problem = tls_problem(tls)
        raise ScrapeError(f"{problem or exc}; fix the target's tls_config and reload") from None


def check_sample_limit(text: str, limit: int) -> None:
    """Refuse a page with more than `limit` samples before parsing it (cheap: a line count)."""
    if limit and text.count("\n") > limit and (n := count_samples(text)) > limit:
        raise LimitError("sample_limit", f"sample_limit exceeded: {n} samples > limit {limit}")


def internal_error(e: Exception) -> str:
    return f"internal error: {type(e).__name__}: {e}"


def describe_error(e: Exception, target: ScrapeTarget) -> str:
    """A one-line reason for a failed scrape, naming the kind of failure."""
    if isinstance(e, TimeoutError):
        return f"scrape timed out after {target.timeout_ms / 1000:g}s"
    if isinstance(e, ExpositionError):
        return f"invalid exposition: {e}"
    if isinstance(e, StoreFullError):
        return f"store full: {e}"
    if isinstance(e, UnicodeDecodeError):
        return f"body is not UTF-8: {e.reason} at byte {e.start}"
    return str(e)
