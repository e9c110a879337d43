"""Run `probe_target` from today's thread-per-job daemon, on one event loop for all targets.

`ProbeRunner` owns a background thread with an asyncio loop, one
`httpx.AsyncClient` (kept-alive connections, shared by every target) and the
fleet-wide canary semaphore. A scheduler job calls `probe(target, now_ms)`;
the coroutine runs on the runner's loop and the job waits for its samples.
When collection moves onto a single event loop, that loop awaits
`probe_target` directly and this runner goes away; the heartbeat logic
(`Heartbeat`) stays.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from sentinel.collect.probe import (
    CANARY,
    MODELS,
    ProbeResult,
    ProbeTarget,
    Sample,
    probe_target,
    tokens_flowing,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Reads a target's generation-token counter (summed over engines) at a time; None: no data.
ReadTotal = Callable[[str, int], "float | None"]
# Slack beyond the probe timeout before a job stops waiting for its coroutine.
WAIT_SLACK_S = 5.0
# How often /v1/models is asked again once the model is known: under the 5 m lookback,
# so its series never goes stale; sooner after any failed probe (a restart may have
# changed the model). It costs as much CPU as /health: every probe would double that.
MODELS_REFRESH_MS = 4 * 60_000


@dataclass
class _Beat:
    total: float | None
    own: float  # canary tokens added since `total` was read, not yet seen in the counter


class Heartbeat:
    """Decides, per target, whether its own counters prove tokens are flowing.

    Compares the generation-token counter now with its value at the previous
    probe (or one interval ago, for the first), minus the tokens our own
    canaries added meanwhile, so a canary never counts as traffic.
    """

    def __init__(self, read_total: ReadTotal | None) -> None:
        self.read_total = read_total
        self._beats: dict[str, _Beat] = {}
        self._lock = threading.Lock()

    def busy(self, t: ProbeTarget, now_ms: int) -> bool:
        """Whether tokens are flowing on `t` now (and remember this reading)."""
        if self.read_total is None:
            return False
        current = self.read_total(t.name, now_ms)
        with self._lock:
            beat = self._beats.get(t.name)
            if beat is None:
                beat = _Beat(self.read_total(t.name, now_ms - t.interval_ms), 0.0)
            flowing = tokens_flowing(beat.total, current, beat.own)
            carry = 0.0
            if beat.total is not None and current is not None and current >= beat.total:
                # Canary tokens the counter does not show yet are subtracted next time.
                carry = max(0.0, beat.own - (current - beat.total))
            self._beats[t.name] = _Beat(current, carry)
        return flowing

    def record(self, t: ProbeTarget, results: list[ProbeResult]) -> None:
        """Count the tokens our canary generated, so they are not taken for traffic."""
        own = sum(r.completion_tokens for r in results if r.probe == CANARY)
        if own:
            with self._lock:
                beat = self._beats.setdefault(t.name, _Beat(None, 0.0))
                beat.own += own


class ProbeRunner:
    """An event loop thread that runs probes for synchronous callers."""

    def __init__(self, max_canaries: int, read_total: ReadTotal | None = None,
                 client: httpx.AsyncClient | None = None) -> None:
        self.max_canaries = max_canaries
        self.heartbeat = Heartbeat(read_total)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sentinel-probe",
                                        daemon=True)
        self._thread.start()
        self._client = client
        self._models: dict[str, tuple[str, int]] = {}  # target -> (model, learnt at)
        self._models_lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None
        self._call(self._setup())

    async def _setup(self) -> None:
        # Created on the loop that uses them.
        self._slots = asyncio.Semaphore(self.max_canaries)
        if self._client is None:
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def probe(self, t: ProbeTarget, now_ms: int) -> tuple[list[Sample], list[ProbeResult], bool]:
        """Probe one target now: (samples, results, whether the canary was skipped as busy)."""
        busy = self.heartbeat.busy(t, now_ms)
        assert self._client is not None
        with self._models_lock:
            known = self._models.get(t.name)
        model = known[0] if known and now_ms - known[1] < MODELS_REFRESH_MS else None
        samples, results = self._call(
            probe_target(self._client, t, now_ms, busy=busy, canary_slots=self._slots,
                         model=model),
            t.timeout_ms / 1000 * 2 + WAIT_SLACK_S)
        self.heartbeat.record(t, results)
        with self._models_lock:
            learnt = next((r.model for r in results if r.probe == MODELS and r.model), None)
            if learnt:
                self._models[t.name] = (learnt, now_ms)
            if not all(r.success for r in results):
                self._models.pop(t.name, None)  # ask /v1/models again next time
        return samples, results, busy and t.canary and t.skip_canary_when_busy

    def close(self) -> None:
        """Cancel what is in flight, close the client, stop the loop."""
        try:
            self._call(self._shutdown(), 5)
        except Exception:  # closing must never hold up shutdown
            log.debug("closing the probe runner failed", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _shutdown(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
        await self._loop.shutdown_asyncgens()
