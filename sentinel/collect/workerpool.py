"""Scrapes through collect worker processes, so collection uses every core.

One interpreter lock caps a process at one core: at a 5 s interval, one
Sentinel parsing and storing its own scrapes tops out near 2,500 vLLM
targets. `ProcessScraper` keeps the scrape schedule, the store and
everything after it in the daemon, and hands the per-target work that needs
no shared state (HTTP, gzip, parsing, dropping the series no rule reads) to
`collect_workers` child processes (`sentinel.collect.collectworker`). Each
target stays on one worker (its kept-alive connection lives there); a
worker answers with the kept samples as packed (slot, value) arrays, and a
slot's labels cross the pipe once per worker, so the daemon's share of a
scrape is a table lookup and an `append_at` per page.

What stays as with the in-process `Scraper`: `up`, `scrape_duration_seconds`
(fetch and parse in the worker, plus storing here) and
`scrape_samples_scraped`; staleness markers for series that went, for a
failed scrape and for a forgotten or redefined target; limits; the filter
(re-sent when the rules change).

A worker that dies is restarted with a backoff; one with scrapes in flight
that has sent nothing for HANG_S is killed and restarted. Its scrapes in
flight and those due while it restarts did not happen: each is counted as
a missed scrape (`on_missed`), not as the target failing, and the restart
is counted (`on_restart`). Nothing waits on a dead worker. A request the
worker reads a whole interval late (it was starved of CPU) is answered
`expired` without a scrape, and counted missed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import DEFAULT_MAX_BODY_BYTES, ScrapeResult, ScrapeTarget
from sentinel.collect.scrapeseries import TargetSeries
from sentinel.collect.workerwire import Outcome, filter_message, frame, read_message
from sentinel.model import STALE_NAN, Labels
from sentinel.store.memory import MemoryStore, StoreFullError

log = logging.getLogger(__name__)

# A worker with work in flight that sent nothing for this long is hung: killed, restarted.
HANG_S = 60.0
WATCH_S = 1.0
READY_S = 60.0  # a worker's start-up (interpreter and imports), generous on a loaded host
# Restart backoff of a worker that dies soon after it started: doubling, bounded.
MIN_BACKOFF_S = 0.2
MAX_BACKOFF_S = 10.0
STABLE_S = 30.0
# `collect_workers: auto` turns workers on from this many scrapes a second (2,250 targets
# at 5 s). One process, rule evaluation included, saturates its core near 500 a second
# (issue 40); below that it does every scrape for less CPU and memory than a pool (no
# pipes, no extra interpreters at ~35 MB each): the 1,000 and 2,000 target rows of
# bench/fleet.py at 5 s stay in process.
AUTO_MIN_SCRAPES_PER_S = 450.0


def workers_for(setting: int | str, scrapes_per_s: float, cores: int | None = None) -> int:
    """How many collect workers `collect_workers` asks for at `scrapes_per_s` (static targets).

    1 means none: the daemon scrapes in its own process. `auto` is one per
    core (those this process may run on) from AUTO_MIN_SCRAPES_PER_S on.
    """
    if isinstance(setting, int):
        return setting
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    return cores if cores > 1 and scrapes_per_s >= AUTO_MIN_SCRAPES_PER_S else 1


@dataclass(eq=False)
class _Labels:
    """The daemon's copy of one worker's slot table (what `TargetSeries` reads as `shared`)."""

    store: MemoryStore
    generation: int = 0
    labels: list[Labels] = field(default_factory=list)
    nlabels: list[int] = field(default_factory=list)

    def add(self, generation: int, first: int, labels: list[Labels]) -> None:
        if generation != self.generation:
            self.generation, self.labels = generation, []
        if first != len(self.labels):  # slots arrive in order; anything else is a bug
            raise ValueError(f"slot {first} after {len(self.labels)}")
        self.labels.extend(labels)


@dataclass(eq=False)
class _Worker:
    """One worker process and what the daemon knows of it."""

    index: int
    proc: asyncio.subprocess.Process
    table: _Labels
    started: float
    # seq -> the waiting scrape, until its answer comes: what the worker owes.
    pending: dict[int, asyncio.Future[tuple[int, Outcome] | None]] = field(
        default_factory=dict)
    targets: dict[int, ScrapeTarget] = field(default_factory=dict)  # as last sent
    filter_version: int = -1
    alive: bool = True
    heard: float = 0.0  # the loop's time of its last message (or of its start)

    def send(self, message: tuple[object, ...]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(frame(message))


class _Target(TargetSeries):
    """A target's series in the daemon, with the worker that scrapes it."""

    def __init__(self, table: _Labels, target: ScrapeTarget, key: int, worker: int) -> None:
        base = {"target": target.name, "instance": target.instance, **dict(target.labels)}
        super().__init__(table, target, base, target.label_limit)  # type: ignore[arg-type]
        self.spec = target
        self.key = key
        self.worker = worker
        self.last_slots = b""  # the slots of the last stored page, to reuse `prev` as is


class ProcessScraper:
    """Scrapes targets into a `MemoryStore` through `workers` collect worker processes.

    The same surface as `Scraper` (`scrape_async`, `scrape`, `forget`,
    `close`). `start()` spawns the workers; `io` is the daemon's I/O loop,
    where everything but `forget` and `close` runs.
    """

    def __init__(
        self, store: MemoryStore, io: IOLoop, workers: int,
        on_missed: Callable[[str, int], None] = lambda name, n: None,
        on_restart: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        hang_s: float = HANG_S,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.store = store
        self.io = io
        self.size = workers
        self.max_body_bytes = max_body_bytes
        self.hang_s = hang_s
        self._watch_s = min(WATCH_S, hang_s / 2)
        self._on_missed = on_missed
        self._on_restart = on_restart
        self._clock = clock
        self._workers: list[_Worker | None] = [None] * workers
        self._load = [0] * workers  # targets per worker
        self._states: dict[str, _Target] = {}
        self._keys = itertools.count()
        self._seqs = itertools.count()
        self._backoff = [MIN_BACKOFF_S] * workers
        self._lock = threading.Lock()
        self._closing = False
        self.restarts = 0

    # -- life cycle ---------------------------------------------------------

    def start(self) -> ProcessScraper:
        """Spawn every worker; returns self."""
        self.io.run(self._spawn_all(), timeout=60)
        return self

    async def _spawn_all(self) -> None:
        await asyncio.gather(*(self._spawn(i) for i in range(self.size)))
        loop = asyncio.get_running_loop()
        loop.call_later(self._watch_s, self._watch, loop.time() + self._watch_s)

    def _watch(self, due: float) -> None:
        """Kill a worker that holds scrapes and has been silent for HANG_S (it is hung).

        Skipped when this check itself ran late: then the loop, not the
        worker, was stuck, and the worker's answers may be unread in the pipe.
        """
        if self._closing:
            return
        loop = self.io.loop
        now = loop.time()
        if now - due < 1.0:
            for w in self._workers:
                if w is not None and w.alive and w.pending and now - w.heard > self.hang_s:
                    log.warning("collect worker %d sent nothing for %.0fs with %d scrapes in "
                                "flight: killing it", w.index, now - w.heard, len(w.pending))
                    with contextlib.suppress(ProcessLookupError):
                        w.proc.kill()
        else:  # the loop was late: give every worker the benefit of the doubt
            for w in self._workers:
                if w is not None:
                    w.heard = max(w.heard, now - self._watch_s)
        loop.call_later(self._watch_s, self._watch, now + self._watch_s)

    async def _spawn(self, index: int) -> None:
        env = dict(os.environ)
        env.setdefault("SENTINEL_WORKER_LOG_LEVEL",
                       logging.getLevelName(logging.getLogger().getEffectiveLevel()))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sentinel.collect.collectworker", str(self.max_body_bytes),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
            limit=2**24)
        loop = asyncio.get_running_loop()
        worker = _Worker(index, proc, _Labels(self.store), self._clock(), heard=loop.time())
        assert proc.stdout is not None
        try:  # its imports done and its pipes open: scrapes sent now are read at once
            ready = await asyncio.wait_for(read_message(proc.stdout), READY_S)
        except (TimeoutError, asyncio.IncompleteReadError, ValueError):
            ready = ()
        if ready != ("ready",):
            log.warning("collect worker %d did not start (pid %d)", index, proc.pid)
        self._workers[index] = worker
        loop.create_task(self._read(worker))
        log.debug("collect worker %d started (pid %d)", index, proc.pid)

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in self._workers if w is not None and w.alive]

    def holds(self, name: str, pid: int) -> bool:
        """Whether worker `pid` has a scrape of target `name` in flight (for tests)."""
        state = self._states.get(name)
        w = self._workers[state.worker] if state is not None else None
        return w is not None and w.proc.pid == pid and bool(w.pending)

    def close(self) -> None:
        """Close the workers' pipes (they exit), kill any that linger; idempotent."""
        self._closing = True
        if self.io.running and not self.io.in_loop():
            try:
                self.io.run(self._close(), timeout=10)
                return
            except Exception:  # noqa: BLE001 (the loop is going away: kill below)
                log.debug("closing the collect workers on the loop failed", exc_info=True)
        for w in self._workers:
            if w is not None and w.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.kill()

    async def _close(self) -> None:
        self._closing = True
        live = [w for w in self._workers if w is not None and w.proc.returncode is None]
        for w in live:
            assert w.proc.stdin is not None
            w.proc.stdin.close()
        if live:  # all at once: a stopping daemon waits 5 s at most, not 5 s a worker
            _, late = await asyncio.wait([asyncio.ensure_future(w.proc.wait()) for w in live],
                                         timeout=5)
            for w in live:
                if w.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        w.proc.kill()
            if late:
                await asyncio.wait(late, timeout=5)

    # -- the pipe from a worker ---------------------------------------------

    async def _read(self, w: _Worker) -> None:
        assert w.proc.stdout is not None
        try:
            while True:
                message = await read_message(w.proc.stdout)
                w.heard = self.io.loop.time()
                kind = message[0]
                if kind == "result":
                    _, seq, generation, outcome = message
                    fut = w.pending.pop(seq, None)  # type: ignore[call-overload]
                    if fut is not None and not fut.done():
                        fut.set_result((generation, outcome))
                elif kind == "labels":
                    _, generation, first, labels = message
                    w.table.add(generation, first, labels)  # type: ignore[arg-type]
        except asyncio.IncompleteReadError:
            pass  # the worker exited
        except asyncio.CancelledError:
            raise
        except Exception:  # a garbled pipe: treat the worker as lost
            log.exception("collect worker %d sent something unreadable", w.index)
        await self._lost(w)

    async def _lost(self, w: _Worker) -> None:
        """A worker is gone: release its waiters, reap it, restart it unless stopping."""
        if not w.alive:
            return
        w.alive = False
        for fut in w.pending.values():
            if not fut.done():
                fut.set_result(None)
        w.pending.clear()
        if w.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                w.proc.kill()
        code = await w.proc.wait()
        if self._closing:
            return
        self.restarts += 1
        self._on_restart()
        i = w.index
        if self._clock() - w.started > STABLE_S:
            self._backoff[i] = MIN_BACKOFF_S
        delay, self._backoff[i] = self._backoff[i], min(MAX_BACKOFF_S, 2 * self._backoff[i])
        log.warning("collect worker %d (pid %d) exited with %s; restarting in %.1fs",
                    i, w.proc.pid, code, delay)
        await asyncio.sleep(delay)
        if not self._closing:
            try:
                await self._spawn(i)
            except OSError:
                log.exception("restarting collect worker %d failed", i)
                self._workers[i] = None

    # -- scrapes ------------------------------------------------------------

    def scrape(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target at `now_ms`, blocking until done; never raises."""
        return self.io.run(self.scrape_async(target, now_ms))

    async def scrape_async(self, target: ScrapeTarget, now_ms: int) -> ScrapeResult:
        """Scrape one target through its worker and store the page; never raises.

        A scrape its worker could not do (dead, restarting, hung) is counted
        missed and returns a result with `missed` set.
        """
        state = self._state(target, now_ms)
        start = self._clock()
        w = self._workers[state.worker]
        if w is None or not w.alive:
            return self._missed(target, start)
        self._sync(w, state)
        seq = next(self._seqs)
        loop = asyncio.get_running_loop()
        if not w.pending:  # an idle worker's silence so far says nothing about a hang
            w.heard = loop.time()
        # No deadline here, as for a scrape in process: the worker's fetch has its timeout,
        # the schedule counts the runs due while this one lasts as missed, and the watch
        # (`_watch`) ends the wait if the worker is lost or hangs. An answer that waited
        # in the pipe (a starved daemon) is still a good sample at `now_ms`.
        fut: asyncio.Future[tuple[int, Outcome] | None] = loop.create_future()
        w.pending[seq] = fut
        # A worker that reads this a whole interval late (starved) answers without
        # scraping: the next run is due, and working through the backlog would only grow it.
        give_up_ms = int(time.time() * 1000) + target.interval_ms
        w.send(("scrape", state.key, seq, now_ms, give_up_ms))
        answer = await fut
        if answer is None or answer[1].expired:  # the worker died or was late
            return self._missed(target, start, answer is not None and answer[1].late)
        with state.lock:
            # Checked under the lock `forget` marks the series stale under: a target gone
            # (or redefined) meanwhile must not get a page stored after its markers.
            if self._states.get(target.name) is not state:
                return self._missed(target, start)
            return self._finish(state, w, answer[0], answer[1], now_ms)

    def _missed(self, target: ScrapeTarget, start: float, late: bool = False) -> ScrapeResult:
        self._on_missed(target.name, 1)
        return ScrapeResult(target, False, self._clock() - start, 0, 0, None, missed=True,
                            late=late)

    def _sync(self, w: _Worker, state: _Target) -> None:
        """Send the worker the filter and the target's definition if it has not got them."""
        version = self.store.filter_version
        if w.filter_version != version:
            w.filter_version = version
            w.send(filter_message(self.store.series_filter))
        if w.targets.get(state.key) != state.spec:
            w.targets[state.key] = state.spec
            w.send(("target", state.key, state.spec))

    def _finish(self, state: _Target, w: _Worker, generation: int, o: Outcome,
                now_ms: int) -> ScrapeResult:
        start = self._clock()
        error, stale, samples = o.error, 0, o.samples
        if error is None:
            if state.shared is not w.table or state.generation != generation:
                state.shared = w.table  # type: ignore[assignment]
                state.generation, state.refs = generation, {}
                state.last_slots = b""
            try:
                stale = self._store(state, o, now_ms)
            except StoreFullError as e:
                error = f"store full: {e}"
        if error is not None:
            samples = 0
            stale = state.mark_all_stale(now_ms)
            state.last_slots = b""
        duration = o.duration_s + self._clock() - start
        state.report(now_ms, error is None, duration, samples)
        if error is None and o.duplicates and o.duplicates != state.last_duplicates:
            log.warning("%s exposes %d duplicate samples; kept the first of each",
                        state.spec.name, o.duplicates)
        state.last_duplicates = o.duplicates
        if error != state.last_error:
            if error is not None:
                log.warning("scrape of %s failed: %s", state.spec.name, error)
            state.last_error = error
        return ScrapeResult(state.spec, error is None, duration, samples, stale, error,
                            o.dropped, o.limit)

    def _store(self, state: _Target, o: Outcome, now_ms: int) -> int:
        """Append a worker's kept samples at `now_ms`; returns the stale markers written."""
        values = array("d")
        values.frombytes(o.values)
        slots: array[int] | None = None
        if o.slots == state.last_slots:  # the page kept its shape: the same refs, in order
            current = state.prev
        else:
            slots = array("I")
            slots.frombytes(o.slots)
            get = state.refs.get
            current = [get(s) or state._ref(s) for s in slots]  # noqa: SLF001
        lost = self.store.append_at(now_ms, current, values)
        if lost:  # series garbage-collected by the store: fresh refs for the same labels
            if slots is None:
                slots = array("I")
                slots.frombytes(o.slots)
            current = list(current)
            for i in lost:
                current[i] = state._ref(slots[i])  # noqa: SLF001
                self.store.append(current[i], now_ms, values[i])
        for slot, t_ms, value in o.stamped:  # own timestamps: own clocks, no staleness
            ref = state.refs.get(slot)
            if ref is None or not self.store.append(ref, t_ms, value):
                self.store.append(state._ref(slot, True), t_ms, value)  # noqa: SLF001
        gone = set(state.prev).difference(current) if current is not state.prev \
            and current != state.prev else ()
        for ref in gone:
            self.store.append(ref, now_ms, STALE_NAN)
        state.prev = current
        state.last_slots = o.slots if not lost else b""
        if len(state.refs) > 2 * len(current) + 1000:  # label churn: forget slots not kept now
            keep = set(current)
            state.refs = {s: r for s, r in state.refs.items() if r in keep}
        return len(gone)

    # -- targets ------------------------------------------------------------

    def forget(self, name: str, now_ms: int) -> int:
        """Stop tracking a target: mark its series and report series stale, tell its worker."""
        with self._lock:
            state = self._states.pop(name, None)
            if state is not None:
                self._load[state.worker] -= 1
        if state is None:
            return 0
        if self.io.running:
            self.io.call_soon(self._drop, state)
        with state.lock:
            return state.mark_all_stale(now_ms) + state.mark_reports_stale(now_ms)

    def _drop(self, state: _Target) -> None:
        w = self._workers[state.worker]
        if w is not None and w.alive and w.targets.pop(state.key, None) is not None:
            w.send(("forget", state.key))

    def _state(self, target: ScrapeTarget, now_ms: int) -> _Target:
        with self._lock:
            state = self._states.get(target.name)
            if state is not None and state.spec == target:
                return state
            if state is None:
                index = min(range(self.size), key=self._load.__getitem__)
                self._load[index] += 1
            else:
                index = state.worker
            w = self._workers[index]
            table = w.table if w is not None else _Labels(self.store)
            self._states[target.name] = new = _Target(table, target, next(self._keys), index)
        if state is not None:  # the definition changed: its old series end
            self._drop(state)
            with state.lock:
                state.mark_all_stale(now_ms)
        return new
