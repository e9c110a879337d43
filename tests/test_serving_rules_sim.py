"""The shipped serving rules against the simulator, on a driven clock (no sleeps).

Ten simulated minutes take a few seconds: every 5 s of simulated time the
traffic generator advances, the target is scraped, the probe runs every 15 s
(default interval) and every rule group of rules/vllm.yaml is evaluated.
The scrape and the probe speak real HTTP to the simulator on loopback; only
the clock is ours. An idle and a busy server raise none of the serving
alerts; a stalled one raises VLLMEngineStalled, so the harness can fail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sentinel.collect.probe import ProbeTarget
from sentinel.collect.probe_runner import ProbeRunner
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.daemon.metriccheckjob import MetricCheckJob
from sentinel.daemon.probejobs import generation_total_reader
from sentinel.model import AlertState
from sentinel.promql import Engine
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.sim.server import start_sim
from sentinel.store import MemoryStore

RULES = Path(__file__).resolve().parent.parent / "rules" / "vllm.yaml"
SERVING = {"VLLMEngineStalled", "VLLMHealthCheckFailing", "VLLMTimeToFirstTokenHigh",
           "VLLMInterTokenLatencyHigh", "VLLMQueueTimeHigh", "VLLMPreemptionStorm",
           "VLLMRequestErrorsHigh", "VLLMEngineSleeping", "SentinelRuleMetricMissing",
           "VLLMTargetDown"}
T0 = 1_700_000_000_000
STEP_MS = 5_000


class Harness:
    """Scrape, probe, check and evaluate one simulated target at times we choose."""

    def __init__(self, sim, probe_timeout_ms: int = 3_000) -> None:
        self.sim = sim
        self.store = MemoryStore(retention_ms=20 * 60_000)
        self.engine = Engine(self.store)
        groups = load_rule_files([str(RULES)])
        self.rules = RuleManager(groups, self.engine, default_interval_ms=15_000)
        self.scraper = Scraper(self.store)
        self.runner = ProbeRunner(4, generation_total_reader(self.store))
        self.check = MetricCheckJob(lambda: groups, self.store, self.engine,
                                    CollectorRegistry(), 15_000, lambda: 0)
        self.scrape_target = ScrapeTarget("gemma", sim.url, interval_ms=STEP_MS)
        self.probe_target = ProbeTarget("gemma", sim.url, interval_ms=15_000,
                                        timeout_ms=probe_timeout_ms)
        self.seen: dict[str, set[str]] = {}  # alert name -> states it reached
        self.fired_at: dict[str, int] = {}

    def run(self, start_step: int, steps: int) -> None:
        for step in range(start_step, start_step + steps):
            now = T0 + step * STEP_MS
            self.sim.traffic.advance(STEP_MS / 1000)
            self.scraper.scrape(self.scrape_target, now)
            if step % 3 == 0:
                for labels, value in self.runner.probe(self.probe_target, now)[0]:
                    self.store.add(labels, now, value)
                self.check.check(now)
                for group in self.rules.groups:
                    for alert in self.rules.evaluate_group(group, now):
                        if alert.state in (AlertState.PENDING, AlertState.FIRING):
                            self.seen.setdefault(alert.name, set()).add(alert.state.value)
                        if alert.state is AlertState.FIRING:
                            self.fired_at.setdefault(alert.name, now)

    def close(self) -> None:
        self.runner.close()
        self.scraper.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    sim = start_sim(auto_traffic=False)
    h = Harness(sim)
    yield h
    h.close()
    sim.stop()


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_no_false_alarms_over_ten_simulated_minutes(harness, busy):
    if busy:
        harness.sim.set_state(load_rps=5, num_requests_running=4, num_requests_waiting=1,
                              kv_cache_usage=0.5)
    harness.run(0, 10 * 60 * 1000 // STEP_MS + 1)
    noisy = {name: states for name, states in harness.seen.items() if name in SERVING}
    assert noisy == {}, noisy
    # The probes really ran: canaries on the idle server, skipped on the busy one
    # (but for the very first probe, before the counters have any history).
    canaries = len(harness.sim.chat_requests)
    assert (canaries <= 1) if busy else (canaries >= 35), canaries
    assert harness.check.missing == []  # the shipped rules see every metric they need
    assert harness.sim.traffic.finished >= (2900 if busy else 0)


@pytest.mark.parametrize("queued", [True, False], ids=["with-queue", "empty-queue"])
def test_the_same_harness_catches_a_stall(harness, queued):
    # A hung canary waits out its timeout in real time: keep it short here (20 hung
    # canaries: 10 s at 500 ms; /health still answers at once, well inside it).
    harness.probe_target = dataclasses.replace(harness.probe_target, timeout_ms=500)
    harness.sim.set_state(load_rps=5, num_requests_running=2)
    harness.run(0, 24)  # two busy minutes
    harness.sim.set_state(stalled=True, load_rps=0,
                          num_requests_running=1 if queued else 0,
                          num_requests_waiting=5 if queued else 0)
    stalled_at = T0 + 24 * STEP_MS
    harness.run(24, 60)  # five more minutes
    fired = harness.fired_at.get("VLLMEngineStalled")
    assert fired is not None, harness.seen
    # The canary fails at the first probe after the stall, then `for: 2m`
    # (plus at most one 15 s probe/evaluation interval).
    assert 2 * 60_000 <= fired - stalled_at <= 2 * 60_000 + 15_000, fired - stalled_at
    assert "VLLMHealthCheckFailing" not in harness.seen
