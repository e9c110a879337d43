"""Probes on the I/O loop: the fleet-wide canary cap, the models cache and the heartbeat.

`ProbeRunner` holds one `ProbeClient` (kept-alive `http1` connections per
target), the asyncio semaphore that caps canaries in flight across the
fleet, and which model each target serves. In the daemon it runs on the
one I/O loop the scrapes use (`App.io`), and each target's probe job (a
timer on that loop) awaits `probe_async` there, so probing 1,000 targets costs no
thread. `Heartbeat` decides, from the target's own token counter, whether
the canary may be skipped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sentinel.collect.ioloop import IOLoop
from sentinel.collect.probe import (
    CANARY,
    MODELS,
    ProbeClient,
    ProbeResult,
    ProbeTarget,
    Sample,
    probe_target,
    tokens_flowing,
)

log = logging.getLogger(__name__)
# Reads a target's generation-token counter (summed over engines) at a time, from a
# reading taken after the given time when one is given: (total or None, when read).
ReadTotal = Callable[[str, int, "int | None"], "tuple[float | None, int]"]
# Slack beyond the probe timeout before a job stops waiting for its coroutine.
WAIT_SLACK_S = 5.0
# How often /v1/models is asked again once the model is known: under the 5 m lookback,
# so its series never goes stale; sooner after any failed probe (a restart may have
# changed the model). It costs as much CPU as /health: every probe would double that.
MODELS_REFRESH_MS = 4 * 60_000
# Why a canary was not sent: the target's counters showed tokens flowing, or the
# fleet-wide cap stayed full for longer than the probe could wait.
SKIP_BUSY, SKIP_CAP = "busy", "cap"


@dataclass
class _Beat:
    total: float | None
    own: float  # canary tokens added since `total` was read, not yet seen in the counter
    read_at: int | None  # when the fleet-wide reading that gave `total` was taken


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
        with self._lock:
            beat = self._beats.get(t.name)
            if beat is None:  # the first probe: compare with the counter one interval back
                total, at = self.read_total(t.name, now_ms - t.interval_ms, None)
                beat = _Beat(total, 0.0, at)
            current, read_at = self.read_total(t.name, now_ms, beat.read_at)
            flowing = tokens_flowing(beat.total, current, beat.own)
            carry = 0.0
            if beat.total is not None and current is not None and current >= beat.total:
                # Canary tokens the counter does not show yet are subtracted next time.
                carry = max(0.0, beat.own - (current - beat.total))
            self._beats[t.name] = _Beat(current, carry, read_at)
        return flowing

    def record(self, t: ProbeTarget, results: list[ProbeResult]) -> None:
        """Count the tokens our canary generated, so they are not taken for traffic."""
        own = sum(r.completion_tokens for r in results if r.probe == CANARY)
        if own:
            with self._lock:
                beat = self._beats.setdefault(t.name, _Beat(None, 0.0, None))
                beat.own += own


class ProbeRunner:
    """Runs probes on an I/O loop: the client, the fleet-wide canary cap, the models cache.

    In the daemon the loop is the one the scrapes run on (`App.io`) and the
    probe jobs await `probe_async` there; tools and tests without a loop get
    a private one and call the blocking `probe`.
    """

    def __init__(self, max_canaries: int, read_total: ReadTotal | None = None,
                 io: IOLoop | None = None) -> None:
        self.max_canaries = max_canaries
        self.heartbeat = Heartbeat(read_total)
        self._own_io = io is None
        self.io = io if io is not None else IOLoop("sentinel-probe").start()
        self.client = ProbeClient()
        # Not bound to a loop until first contended (Python >= 3.10): the loop that awaits it.
        self._slots = asyncio.Semaphore(max_canaries)
        self._models: dict[str, tuple[str, int]] = {}  # target -> (model, learnt at)

    async def probe_async(self, t: ProbeTarget, now_ms: int,
                          ) -> tuple[list[Sample], list[ProbeResult], str]:
        """Probe one target now, on the loop: (samples, results, why the canary was not
        sent: SKIP_BUSY, SKIP_CAP, or "" when it was sent or is off)."""
        busy = self.heartbeat.busy(t, now_ms)
        known = self._models.get(t.name)
        model = known[0] if known and now_ms - known[1] < MODELS_REFRESH_MS else None
        samples, results = await probe_target(self.client, t, now_ms, busy=busy,
                                              canary_slots=self._slots, model=model)
        self.heartbeat.record(t, results)
        learnt = next((r.model for r in results if r.probe == MODELS and r.model), None)
        if learnt:
            self._models[t.name] = (learnt, now_ms)
        if not all(r.success for r in results):
            self._models.pop(t.name, None)  # ask /v1/models again next time
        if not t.canary or any(r.probe == CANARY for r in results):
            return samples, results, ""
        if busy and t.skip_canary_when_busy:
            return samples, results, SKIP_BUSY
        internal = any((r.error or "").startswith("internal error") for r in results)
        return samples, results, "" if internal else SKIP_CAP

    def probe(self, t: ProbeTarget, now_ms: int) -> tuple[list[Sample], list[ProbeResult], str]:
        """`probe_async`, blocking until done (never call it on the loop's own thread)."""
        return self.io.run(self.probe_async(t, now_ms), t.timeout_ms / 1000 * 3 + WAIT_SLACK_S)

    def close(self) -> None:
        """Close the idle connections; stop the loop if the runner started it."""
        if self.io.running and not self.io.in_loop():
            self.io.call_soon(self.client.close)
        else:
            self.client.close()
        if self._own_io:
            self.io.stop(2.0)
