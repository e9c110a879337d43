"""Scheduled probe jobs: one per probed target, on the I/O loop, samples into the store.

The jobs go through the scrape jobs' timers (`ScrapeJobs.add`, kind
"probe"): each target's probe runs as a coroutine on the one I/O loop,
at an offset within its interval hashed from its name, so 1,000 targets'
probes spread over the 15 s instead of firing together and cost no thread
(in 250 ms slots, clear of the rule groups' start: `probe_offset_ms`).
A probe that cannot start on time (the previous one still running) is
counted in `sentinel_probes_missed_total{target}`, as is one the loop reached
more than half an interval late.

The store keeps the probe series a loaded rule reads, as it keeps scraped
ones (`MemoryStore.wants`; `keep_all_series: true` keeps all), and always
the two the target view shows (`SHOWN_SERIES`, which the shipped rules
read too): the series of durations and HTTP statuses, which no shipped rule
reads, were 4 of a probe's 7 store writes. The probe counters count every
probe regardless.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from sentinel.collect.ioloop import IOLoop
from sentinel.collect.probe import CANARY, ProbeTarget
from sentinel.collect.probe_runner import SKIP_BUSY, SKIP_CAP, ProbeRunner, ReadTotal
from sentinel.config import Config, TargetConfig
from sentinel.config.probe import effective_probe
from sentinel.daemon.scrapejobs import SLOT_MS, ScrapeJobs, offset_ms
from sentinel.model import STALE_NAN, Labels, is_stale, label_value, labels_of
from sentinel.promql import DEFAULT_LOOKBACK_MS
from sentinel.store import MemoryStore
from sentinel.store.memory import Clock, SeriesRef

log = logging.getLogger(__name__)


def probe_target_of(t: TargetConfig, default_interval_ms: int) -> ProbeTarget | None:
    """The ProbeTarget of a target (static or discovered); None when its probe interval is 0."""
    interval, timeout = effective_probe(t.probe, default_interval_ms)
    if not interval:
        return None
    p = t.probe
    return ProbeTarget(
        name=t.name, url=t.url, labels=labels_of(dict(t.labels)), interval_ms=interval,
        timeout_ms=timeout, canary=p.canary if p else True, expect=p.expect if p else "",
        skip_canary_when_busy=p.skip_canary_when_busy if p else True,
        api_key=p.api_key if p else "")


def build_probe_targets(config: Config) -> list[ProbeTarget]:
    """A ProbeTarget for every static target whose effective probe interval is not 0."""
    out = [probe_target_of(t, config.probe_interval_ms) for t in config.targets]
    return [t for t in out if t is not None]


def probes_on(config: Config) -> bool:
    """Whether any target is probed: a static one, or the pods `kubernetes_sd` will find
    (probed at the global `probe_interval`)."""
    return bool(build_probe_targets(config)) or (
        bool(config.kubernetes_sd) and config.probe_interval_ms > 0)


# How long one fleet-wide reading of the token counters may serve the probes: one
# scrape interval (the default 5 s), as the counters only move when scraped. The
# heartbeat compares readings an interval (15 s) apart, so a few seconds of age
# change nothing. One query per second cost a third of the probes' own CPU on the
# I/O loop at 1,000 idle targets (py-spy); one per probe was worse (each scanned
# every target's series). A probe never reuses the reading its target's previous
# probe used: at intervals under 5 s both would read the same total and see no flow.
READING_MS = 5_000
# The counter the heartbeat reads: the store keeps it whenever probes are on,
# whether or not a loaded rule reads it.
HEARTBEAT_SERIES = "vllm:generation_tokens_total"
# Probe series the store keeps whatever the rules read: the API's and web page's target
# view shows them (`ApiService.target_health`).
SHOWN_SERIES = ("sentinel_probe_success", "sentinel_probe_ttft_seconds")
GONE_MS = 10 * 60_000
_UNKNOWN: Any = object()  # a probe series not yet looked up in `ProbeJobs._refs`
# Probes start on the scrapes' grid of 250 ms slots (see `probe_offset_ms`): at 1,000
# targets, 250 ms cost ~1 % less CPU in all than 100 ms, and 500 ms no less than 250.
PROBE_SLOT_MS = SLOT_MS


def probe_offset_ms(name: str, interval_ms: int, evaluation_ms: int) -> int:
    """When in its interval a target's probe runs, ms after the interval's start.

    Hashed from the target's name, as scrapes are, then:
    - moved into the second half of an evaluation interval, when that divides
      the probe interval: rule groups start at each evaluation boundary, and
      probe I/O that runs while they evaluate slows both (they share one
      interpreter and its caches). At 1,000 idle targets this took ~3 points
      off what probes add to Sentinel's CPU (a one-off A/B bench);
    - rounded down to a 250 ms slot, so the fleet's probes go out in small
      batches that share the I/O loop's wake-ups (with each other and with
      the slot's scrapes, on the same grid): a probe round cost half the CPU
      alone on a loop, ~3 points of the daemon's figure.
    A target is still probed once an interval; only the phase changes.
    """
    off = offset_ms("probe:" + name, interval_ms)
    if evaluation_ms >= 2 * PROBE_SLOT_MS and interval_ms % evaluation_ms == 0:
        half = evaluation_ms // 2
        off = off // evaluation_ms * evaluation_ms + half + off % half
    return off - off % PROBE_SLOT_MS


def generation_total_reader(store: MemoryStore, lookback_ms: int = DEFAULT_LOOKBACK_MS,
                            ) -> ReadTotal:
    """Reads `sum(vllm:generation_tokens_total{target=...})` at a time, None when absent.

    One pass over the counter's series (`MemoryStore.newest_sums`, what
    `sum by (target) (...)` answers) serves every target's read within
    READING_MS, except a read that asks for a reading newer than one it had:
    `read(target, at_ms, newer_than_ms)` returns (total, when it was read).
    """
    readings: dict[int, dict[str, float]] = {}  # when read -> total per target

    def read(target: str, at_ms: int, newer_than_ms: int | None = None,
             ) -> tuple[float | None, int]:
        for when, totals in readings.items():
            if at_ms - READING_MS < when <= at_ms and (
                    newer_than_ms is None or when > newer_than_ms):
                return totals.get(target), when
        sums = store.newest_sums(HEARTBEAT_SERIES, "target", at_ms - lookback_ms, at_ms)
        if len(readings) >= 4:  # first probes also read one interval back
            readings.pop(min(readings))
        readings[at_ms] = totals = {t: v for t, v in sums.items() if not math.isnan(v)}
        return totals.get(target), at_ms
    return read


class ProbeJobs:
    """Owns the probe runner (on the I/O loop) and its scheduled jobs."""

    def __init__(self, config: Config, store: MemoryStore,
                 registry: CollectorRegistry, now_ms: Callable[[], int],
                 io: IOLoop | None = None) -> None:
        self.store = store
        self.now_ms = now_ms
        self.default_interval_ms = config.probe_interval_ms
        self.evaluation_ms = config.evaluation_interval_ms
        self.targets = build_probe_targets(config)
        self._concurrency, self._io = config.probe_canary_concurrency, io
        self.runner = self._new_runner() if probes_on(config) else None
        self._jobs: ScrapeJobs | None = None
        # Each target's probe series whose newest sample is a value (not a staleness
        # marker): a series is ended once, not at every probe that skips the canary
        # (a busy fleet's markers were most of its probes' store writes, and kept
        # every rule reading the canary on its slow path), and a removed target's are ended.
        self._live: dict[str, set[Labels]] = {}
        # Removed targets (name -> when): a probe still in flight when its pod went must
        # not write. Kept GONE_MS, far past any probe's timeout and canary-slot wait.
        self._gone: dict[str, int] = {}
        # Each target's probe series refs, on one clock per probe (its series are always
        # written together): one locked store call per round, not one per sample. None
        # for a series the store does not want (see `_record`); rebuilt when its filter
        # changes (a reload).
        self._refs: dict[str, dict[Labels, SeriesRef | None]] = {}
        self._filter_version = store.filter_version
        self._clocks: dict[str, dict[str, Clock]] = {}  # target -> probe -> clock
        self._counted: dict[tuple[str, str, bool], Any] = {}  # the probes counter's children
        self.probes = Counter("sentinel_probes", "Probes run, by target, probe and outcome.",
                              ["target", "probe", "outcome"], registry=registry)
        self.skipped = Counter(
            "sentinel_probe_canaries_skipped",
            "Canaries skipped because the target's own counters showed tokens flowing.",
            ["target"], registry=registry)
        self.capped = Counter(
            "sentinel_probe_canaries_capped",
            "Canaries not sent because probe_canary_concurrency canaries stayed in flight "
            "for longer than the probe could wait (its interval less its timeout).",
            ["target"], registry=registry)
        self._capped_logged = -1e9
        self.missed = Counter(
            "sentinel_probes_missed",
            "Probes that could not start on time (the previous one still running, or "
            "started later than the grace time).", ["target"], registry=registry)
        self._last_error: dict[tuple[str, str], str | None] = {}

    def count(self) -> int:
        """How many jobs `schedule` adds."""
        return len(self.targets)

    def _new_runner(self) -> ProbeRunner:
        return ProbeRunner(self._concurrency, generation_total_reader(self.store), self._io)

    def schedule(self, jobs: ScrapeJobs, now_ms: int) -> None:
        """One interval job per probed target on the I/O loop, offset by a hash of its name."""
        self._jobs = jobs
        for t in self.targets:
            self._add(t, now_ms)

    def add(self, target: TargetConfig, now_ms: int) -> None:
        """Probe a target discovered after start (or reschedule it), as the static ones;
        one whose probe a reload turned off stops being probed."""
        t = probe_target_of(target, self.default_interval_ms)
        if self._jobs is None:
            return
        if t is not None:
            self._add(t, now_ms)
        elif self._jobs.get(f"probe:{target.name}") is not None:
            self.remove(target.name, now_ms)

    def _add(self, t: ProbeTarget, now_ms: int) -> None:
        assert self._jobs is not None
        if self.runner is None:  # the first probed target, added by a reload
            self.runner = self._new_runner()
        self._gone.pop(t.name, None)
        self.missed.labels(t.name)
        self._jobs.add("probe", t.name, self.probe_async, t.interval_ms, now_ms, t,
                       on_missed=self.probes_missed,
                       offset=probe_offset_ms(t.name, t.interval_ms, self.evaluation_ms))

    def remove(self, name: str, now_ms: int) -> None:
        """Stop probing a target that went away; its probe series end with staleness markers."""
        if self._jobs is None:
            return
        self._gone = {n: at for n, at in self._gone.items() if now_ms - at < GONE_MS}
        self._gone[name] = now_ms
        self._jobs.remove("probe", name)
        self.end(name, now_ms)

    def end(self, name: str, now_ms: int) -> None:
        """Write staleness markers for a target's probe series that still hold a value."""
        for labels in self._live.pop(name, ()):
            self.store.add(labels, now_ms, STALE_NAN)
        self._refs.pop(name, None)
        self._clocks.pop(name, None)

    def probes_missed(self, target: str, n: int) -> None:
        """Count `n` probes of `target` that could not start on time."""
        self.missed.labels(target).inc(n)

    def probe(self, t: ProbeTarget) -> None:
        """Probe one target now and store its samples, blocking (tools and tests)."""
        assert self.runner is not None
        now = self.now_ms()
        self._record(t, now, *self.runner.probe(t, now))

    async def probe_async(self, t: ProbeTarget) -> None:
        """The scheduled job: probe one target on the loop and store its samples; never raises."""
        assert self.runner is not None
        now = self.now_ms()
        try:
            samples, results, skipped = await self.runner.probe_async(t, now)
            self._record(t, now, samples, results, skipped)
        except Exception:  # a bug, not the target: log it, the next run comes anyway
            log.exception("probe of %s failed unexpectedly", t.name)

    def _record(self, t: ProbeTarget, now: int, samples: list[Any], results: list[Any],
                skipped: str) -> None:
        if t.name in self._gone:
            return
        if self.store.filter_version != self._filter_version:  # rules reloaded
            self._filter_version = self.store.filter_version
            self._refs.clear()
        live = self._live.setdefault(t.name, set())
        refs = self._refs.setdefault(t.name, {})
        written: list[tuple[Labels, SeriesRef]] = []
        values: list[float] = []
        for labels, value in samples:
            ref = refs.get(labels, _UNKNOWN)
            if ref is _UNKNOWN:
                ref = self._ref(t.name, labels) if self.store.wants(labels) else None
                refs[labels] = ref
            if ref is None:  # no loaded rule reads it: not stored, as a scraped one is not
                if labels in live:  # a reload stopped reading it: end what was written
                    live.discard(labels)
                    self.store.add(labels, now, STALE_NAN)
                continue
            if is_stale(value):
                if labels not in live:
                    continue  # ended already (or never written): one marker is enough
                live.discard(labels)
            else:
                live.add(labels)
            written.append((labels, ref))
            values.append(value)
        for i in self.store.append_at(now, [ref for _, ref in written], values):
            # The store garbage-collected the series: a fresh ref for the same labels.
            refs[written[i][0]] = ref = self._ref(t.name, written[i][0])
            self.store.append(ref, now, values[i])
        if skipped == SKIP_BUSY:
            self.skipped.labels(t.name).inc()
        elif skipped == SKIP_CAP:
            self.capped.labels(t.name).inc()
            if now - self._capped_logged >= 60_000:  # fleet-wide, at most once a minute
                self._capped_logged = now
                log.warning("canary of %s not sent: probe_canary_concurrency (%d) canaries "
                            "were in flight the whole time it could wait; raise it for a "
                            "fleet this size", t.name, self.runner.max_canaries
                            if self.runner else 0)
        for r in results:
            counted = self._counted.get((t.name, r.probe, r.success))
            if counted is None:
                counted = self._counted[(t.name, r.probe, r.success)] = self.probes.labels(
                    t.name, r.probe, "success" if r.success else "failure")
            counted.inc()
            key = (t.name, r.probe)
            if r.error != self._last_error.get(key):
                if r.error:
                    log.warning("%s probe of %s failed: %s", r.probe, t.name, r.error)
                elif self._last_error.get(key):
                    log.info("%s probe of %s succeeds again", r.probe, t.name)
                self._last_error[key] = r.error

    def _ref(self, target: str, labels: Labels) -> SeriesRef:
        probe = label_value(labels, "probe") or CANARY  # the TTFT series is the canary's
        clocks = self._clocks.setdefault(target, {})
        clock = clocks.get(probe)
        if clock is None:
            clock = clocks[probe] = Clock()
        return self.store.ref(labels, clock)

    def close(self) -> None:
        """Close the runner's connections (and its loop, if it has its own)."""
        if self.runner is not None:
            self.runner.close()
