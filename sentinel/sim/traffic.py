"""The simulator's traffic generator: synthetic finished requests counted into /metrics.

`POST /sim/state {"load_rps": 5}` makes the counters of a simulated server
move as a busy server's do (tokens, requests, the latency histograms),
without any client. `advance(seconds)` counts what that many seconds of
traffic would have finished; the server calls it from a background thread
in real time, and a test that drives its own clock calls it by hand.

A stalled, sleeping, unhealthy or down engine finishes nothing, so its
counters stay frozen, which is exactly what the heartbeat rules look for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sentinel.sim.metrics import ServedRequest, VllmMetrics
from sentinel.sim.state import SimState

TICK_S = 0.25
# The shape of one synthetic request: a short chat turn.
PROMPT_TOKENS = 64
GENERATION_TOKENS = 32
BASE_TTFT_S = 0.05
TOKEN_GAP_S = 0.02


class Traffic:
    """Counts `load_rps` synthetic requests per simulated second into `metrics`."""

    def __init__(self, metrics: VllmMetrics, state: Callable[[], SimState],
                 engines: int = 1) -> None:
        self.metrics = metrics
        self.state = state
        self.engines = engines
        self._carry = 0.0
        self._next_engine = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.finished = 0

    def advance(self, seconds: float) -> int:
        """Count the requests `seconds` of traffic finish now; returns how many."""
        state = self.state()
        with self._lock:
            if not serving(state) or state.load_rps <= 0:
                self._carry = 0.0
                return 0
            self._carry += state.load_rps * seconds
            n = int(self._carry)
            self._carry -= n
            for _ in range(n):
                self.metrics.observe(self._request(state))
                self._next_engine = (self._next_engine + 1) % self.engines
            self.finished += n
            return n

    def _request(self, state: SimState) -> ServedRequest:
        ttft = BASE_TTFT_S + state.ttft_s + state.latency_s
        gaps = (TOKEN_GAP_S,) * (GENERATION_TOKENS - 1)
        return ServedRequest(
            engine=self._next_engine, prompt_tokens=PROMPT_TOKENS,
            generation_tokens=GENERATION_TOKENS,
            cached_tokens=int(PROMPT_TOKENS * state.prefix_cache_hit_rate),
            max_tokens=GENERATION_TOKENS, n=1, finished_reason="length",
            queue_s=state.latency_s, prefill_s=ttft - state.latency_s, token_gaps_s=gaps,
            e2e_s=ttft + sum(gaps))

    def start(self) -> Traffic:
        """Advance in real time from a background thread until `stop()`."""
        self._thread = threading.Thread(target=self._run, name="sentinel-sim-traffic",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            self.advance(TICK_S)

    def stop(self) -> None:
        """Stop the background thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def serving(state: SimState) -> bool:
    """Whether the engine finishes requests at all in this state."""
    return state.healthy and not (state.down or state.stalled or state.sleeping)
