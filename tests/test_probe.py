"""The probe source over loopback: each simulator mode, API key, canary cap and heartbeat."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from sentinel.collect.probe import (
    CANARY,
    HEALTH,
    MODELS,
    ProbeClient,
    ProbeTarget,
    probe_target,
    tokens_flowing,
)
from sentinel.collect.probe_runner import ProbeRunner
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.config import parse_config
from sentinel.config.probe import effective_probe
from sentinel.daemon.probejobs import build_probe_targets, generation_total_reader
from sentinel.model import is_stale, label_value
from sentinel.sim.server import start_sim
from sentinel.store import MemoryStore


@pytest.fixture
def sim() -> Iterator:
    server = start_sim(auto_traffic=False)
    yield server
    server.stop()


def _probe(t: ProbeTarget, busy: bool = False):
    async def run():
        async with ProbeClient() as client:
            return await probe_target(client, t, 0, busy=busy)
    return asyncio.run(run())


def _by_probe(results) -> dict:
    return {r.probe: r for r in results}


@pytest.mark.parametrize(("state", "health", "models", "canary", "error"), [
    ({}, True, True, True, None),
    ({"healthy": False}, False, True, False, "HTTP 500"),
    ({"stalled": True}, True, True, False, "no answer within 2s (no token)"),
    ({"sleeping": True}, True, True, False, "HTTP 503"),
    ({"garbage_output": True}, True, True, False, "empty answer"),
    ({"down": True}, False, False, False, None),
])
def test_each_simulator_mode_reads_as_it_should(sim, state, health, models, canary, error):
    sim.update_state(state)
    t = ProbeTarget("gemma", sim.url, timeout_ms=2000)  # slack for a loaded CI machine
    samples, results = _probe(t)
    got = _by_probe(results)
    assert (got[HEALTH].success, got[MODELS].success, got[CANARY].success) == (
        health, models, canary), results
    if error:
        assert got[CANARY].error == error
    if state.get("down"):
        assert got[HEALTH].status == 0 and got[CANARY].status == 0
    names = {(label_value(lb, "__name__"), label_value(lb, "probe")) for lb, _ in samples}
    assert ("sentinel_probe_success", "canary") in names
    assert ("sentinel_probe_ttft_seconds", "") in names
    assert all(label_value(lb, "target") == "gemma" for lb, _ in samples)


def test_healthy_canary_measures_ttft_and_learns_the_model(sim):
    sim.set_state(ttft_s=0.3)
    _, results = _probe(ProbeTarget("gemma", sim.url, timeout_ms=3000, expect="Simulator"))
    got = _by_probe(results)
    assert got[MODELS].model == sim.model and got[MODELS].max_model_len == sim.max_model_len
    assert got[CANARY].success, got[CANARY].error
    assert 0.3 <= got[CANARY].ttft_s < got[CANARY].duration_s + 0.001
    body = sim.chat_requests[-1]
    assert body["stream"] is True and body["max_tokens"] == 8 and body["temperature"] == 0
    assert body["model"] == sim.model


def test_canary_without_an_expected_answer_asks_two_tokens(sim):
    _, results = _probe(ProbeTarget("gemma", sim.url, timeout_ms=3000))
    canary = _by_probe(results)[CANARY]
    assert canary.success, canary.error
    assert sim.chat_requests[-1]["max_tokens"] == 2 and canary.completion_tokens == 2


def test_expect_mismatch_fails_the_canary(sim):
    _, results = _probe(ProbeTarget("gemma", sim.url, expect="banana"))
    assert _by_probe(results)[CANARY].error == "answer does not contain 'banana'"


def test_busy_target_skips_the_canary_and_marks_its_series_stale(sim):
    samples, results = _probe(ProbeTarget("gemma", sim.url), busy=True)
    assert CANARY not in _by_probe(results)
    assert len(sim.chat_requests) == 0
    canary = [v for lb, v in samples if label_value(lb, "probe") == CANARY
              or label_value(lb, "__name__") == "sentinel_probe_ttft_seconds"]
    assert canary and all(is_stale(v) for v in canary)
    # A target that opted out of skipping is probed anyway.
    _probe(ProbeTarget("gemma", sim.url, skip_canary_when_busy=False), busy=True)
    assert len(sim.chat_requests) == 1


@pytest.mark.parametrize(("prev", "cur", "own", "flowing"), [
    (None, 100, 0, False),     # no earlier reading: nothing proven
    (100, None, 0, False),     # no current reading
    (100, 100, 0, False),      # frozen
    (100, 108, 8, False),      # only our own canary's 8 tokens
    (100, 140, 8, True),       # traffic beyond the canary
    (100, 50, 0, False),       # counter reset: nothing proven
])
def test_tokens_flowing(prev, cur, own, flowing):
    assert tokens_flowing(prev, cur, own) is flowing


class _KeyRecorder(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_api_key_from_file_or_env_is_sent_and_redacted(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeyRecorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    (tmp_path / "key").write_text("file-key-123\n")
    config = parse_config(yaml.safe_load(f"""
        probe_interval: 20s
        targets:
          - {{name: a, url: "{url}", probe: {{api_key_file: key, canary: false}}}}
          - {{name: b, url: "{url}", probe: {{api_key: "${{VLLM_KEY}}", interval: 0s}}}}
          - {{name: c, url: "{url}"}}
        """), config_dir=tmp_path, environ={"VLLM_KEY": "env-key-456"})
    try:
        assert config.targets[1].probe.api_key == "env-key-456"
        assert {"file-key-123", "env-key-456"} <= set(config.secrets())
        targets = build_probe_targets(config)
        assert [t.name for t in targets] == ["a", "c"]  # b: interval 0 turns its probe off
        assert (targets[0].interval_ms, targets[0].timeout_ms) == (20_000, 10_000)
        assert "file-key-123" not in repr(targets[0])
        _KeyRecorder.seen.clear()
        _probe(targets[0])
        assert _KeyRecorder.seen == ["Bearer file-key-123"] * 2
    finally:
        server.shutdown()
        server.server_close()


def test_effective_probe_interval_and_timeout():
    assert effective_probe(None, 15_000) == (15_000, 10_000)
    assert effective_probe(None, 5_000) == (5_000, 5_000)  # timeout capped at the interval
    assert effective_probe(None, 0)[0] == 0  # probe_interval: 0 turns probing off


def test_fifty_targets_never_exceed_the_canary_cap(sim):
    sim.set_state(ttft_s=0.2)  # slow enough that canaries overlap
    runner = ProbeRunner(max_canaries=4)
    targets = [ProbeTarget(f"t{i:02d}", sim.url, timeout_ms=10_000) for i in range(50)]
    done: list[bool] = []
    try:
        threads = [threading.Thread(target=lambda t=t: done.append(
            _by_probe(runner.probe(t, 0)[1])[CANARY].success)) for t in targets]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
    finally:
        runner.close()
    assert len(done) == 50 and all(done)
    assert len(sim.chat_requests) == 50
    assert sim.chat_max_in_flight == 4  # the cap was reached, never passed


# (scrape interval, probe interval) in ms: the defaults, and probes faster than the
# heartbeat's 5 s fleet-wide reading (each probe must still see its own fresh one).
@pytest.mark.parametrize("scrape_ms,probe_ms", [(5_000, 15_000), (250, 500)])
def test_canary_never_fires_while_the_counters_show_tokens_flowing(sim, scrape_ms, probe_ms):
    """Driven clock: 120 scrapes of traffic, probed every `probe_ms`."""
    store = MemoryStore()
    scraper = Scraper(store)
    runner = ProbeRunner(4, generation_total_reader(store))
    target = ProbeTarget("gemma", sim.url, interval_ms=probe_ms, timeout_ms=2_000)
    scrape = ScrapeTarget("gemma", sim.url)
    every = probe_ms // scrape_ms
    t0 = 1_700_000_000_000
    try:
        sim.set_state(load_rps=20, num_requests_running=3)
        for step in range(121):
            now = t0 + step * scrape_ms
            sim.traffic.advance(scrape_ms / 1000)
            scraper.scrape(scrape, now)
            # From the first probe that has a reading one interval back (the counters
            # can only "show" flow once they have been scraped twice).
            if step % every == 0 and step >= every:
                _, _, skipped = runner.probe(target, now)
                assert skipped, step
        assert len(sim.chat_requests) == 0, "a canary fired while tokens were flowing"
        # The traffic stops: the next probes send canaries again (and their own tokens
        # never count as traffic, so they keep coming).
        sim.set_state(load_rps=0, num_requests_running=0)
        for step in range(121, 121 + 13 * every):
            now = t0 + step * scrape_ms
            scraper.scrape(scrape, now)
            if step % every == 0:
                runner.probe(target, now)
        assert len(sim.chat_requests) >= 12
    finally:
        runner.close()
        scraper.close()


def test_runner_asks_v1_models_again_only_every_few_minutes_or_after_a_failure(sim):
    runner = ProbeRunner(4)
    t = ProbeTarget("gemma", sim.url, timeout_ms=5000)

    def probes(now_ms: int) -> list[str]:
        return [r.probe for r in runner.probe(t, now_ms)[1]]

    try:
        assert probes(0) == [HEALTH, MODELS, CANARY]
        assert probes(15_000) == [HEALTH, CANARY]  # the model is known
        assert sim.chat_requests[-1]["model"] == sim.model
        assert probes(4 * 60_000) == [HEALTH, MODELS, CANARY]  # refreshed under the lookback
        sim.set_state(healthy=False)
        assert probes(4 * 60_000 + 15_000) == [HEALTH, CANARY]
        sim.set_state(healthy=True)
        assert probes(4 * 60_000 + 30_000) == [HEALTH, MODELS, CANARY]  # after a failure
    finally:
        runner.close()


def test_health_and_canary_go_out_together_so_a_slow_server_costs_one_wait(sim):
    # Sent one after the other, a server that hangs every answer for the timeout held a
    # round for two timeouts (20 s at the defaults): longer than the 15 s interval, so
    # the next probe was missed. Together, a round takes the longer of the two.
    runner = ProbeRunner(4)
    t = ProbeTarget("gemma", sim.url, timeout_ms=60_000)  # generous: the machine is loaded
    try:
        runner.probe(t, 0)  # learns the model: the canary waits for /v1/models this once
        sim.set_state(latency_s=1.5)  # each answer waits 1.5 s before it goes out
        sim.chat_beside_health.clear()
        # /health is held until the canary reaches the simulator (up to 30 s): sent
        # together, it arrives while /health waits; one after the other it cannot (it is
        # sent after that answer), and the count stays 0 after the wait.
        sim.health_waits_for_chat_s = 30.0
        _, results, _ = runner.probe(t, 15_000)
    finally:
        sim.health_waits_for_chat_s = 0.0
        runner.close()
    got = _by_probe(results)
    assert [r.probe for r in results] == [HEALTH, CANARY]
    assert got[HEALTH].success and got[CANARY].success, results
    assert got[HEALTH].duration_s >= 1.5 and got[CANARY].ttft_s >= 1.5
    # Together: the canary was in flight while /health was answered (the simulator
    # counts it); one after the other it would be sent only after that answer. (A
    # round-time bound here raced a loaded machine; so did reading the count at the
    # end of a 1.5 s latency, before a starved canary had arrived.)
    assert list(sim.chat_beside_health) == [1]


@pytest.mark.parametrize(("lines", "error"), [
    (['data: {"choices":[{"delta":{"content":"ok"}}]}', "data: [DONE]"], None),
    (['data: {"choices":[{"delta":{"content":"ok"}}]}'], "stream ended without [DONE]"),
    (['data: {"choices":[{"delta":{"content":""}}]}', "data: [DONE]"], "empty answer"),
    (["data: {not json", "data: [DONE]"], "answer does not decode (not JSON)"),
    (['data: {"choices":[]} {"choices":[]}', "data: [DONE]"],
     "answer does not decode (not JSON)"),  # something after the event
    (["data: ", "data: [DONE]"], "answer does not decode (not JSON)"),
    (["data: [1, 2]", "data: [DONE]"], "answer does not decode (not JSON)"),
    (['data: {"choices":[{"delta":{"content":"o\\ufffdk"}}]}', "data: [DONE]"],
     "answer is corrupted (replacement or NUL characters)"),
])
def test_canary_answer_checks(lines, error):
    from sentinel.collect.probe import ProbeFailed, _Canary

    canary = _Canary(0.0, lambda: 0.25)
    try:
        for line in lines:
            canary.feed(line)
        canary.check("")
    except ProbeFailed as exc:
        assert str(exc) == error
    else:
        assert error is None
        assert canary.ttft_s == 0.25 and canary.text == "ok"


def test_a_full_canary_cap_skips_the_canary_instead_of_delaying_the_probe(sim):
    # One slot, canaries of 0.6 s, and probes that may wait 0.2 s for a slot (interval
    # 1 s less timeout 0.8 s): of three probes at once, one sends its canary and two
    # give up on it in time, with stale canary series and their health still recorded.
    from sentinel.collect.probe_runner import SKIP_CAP

    sim.set_state(ttft_s=0.6)
    runner = ProbeRunner(max_canaries=1)
    targets = [ProbeTarget(f"t{i}", sim.url, interval_ms=1000, timeout_ms=800) for i in range(3)]
    out: dict[str, tuple] = {}
    try:
        threads = [threading.Thread(target=lambda t=t: out.__setitem__(
            t.name, runner.probe(t, 0))) for t in targets]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    finally:
        runner.close()
    reasons = sorted(reason for _, _, reason in out.values())
    assert reasons == ["", SKIP_CAP, SKIP_CAP], out
    assert len(sim.chat_requests) == 1
    for samples, results, reason in out.values():
        assert _by_probe(results)[HEALTH].success
        if reason == SKIP_CAP:
            assert CANARY not in _by_probe(results)
            canary = [v for lb, v in samples if label_value(lb, "probe") == CANARY]
            assert canary and all(is_stale(v) for v in canary)
    # Nobody waited for the slot until it was free: a probe that had, would have sent its
    # canary then (one chat request, above). No round-time bound: it raced a loaded machine.


def test_a_series_is_ended_once_not_at_every_skipped_canary() -> None:
    from prometheus_client import CollectorRegistry

    from sentinel.collect.probe import ProbeResult, samples_of
    from sentinel.collect.probe_runner import SKIP_BUSY
    from sentinel.daemon.probejobs import ProbeJobs
    from sentinel.store.memory import Matcher

    config = parse_config(yaml.safe_load(
        "probe_interval: 0s\ntargets: [{name: gemma, url: 'http://127.0.0.1:1'}]"))
    store = MemoryStore()
    jobs = ProbeJobs(config, store, CollectorRegistry(), lambda: 0)
    t = ProbeTarget("gemma", "http://127.0.0.1:1")
    sent = [ProbeResult(HEALTH, True, 0.01, 200), ProbeResult(CANARY, True, 0.05, 200, ttft_s=0.02)]
    jobs._record(t, 1000, samples_of(t, sent), sent, "")
    busy = [ProbeResult(HEALTH, True, 0.01, 200)]
    for at in (16_000, 31_000, 46_000):  # tokens flow: three canaries skipped
        jobs._record(t, at, samples_of(t, busy, canary_skipped=True), busy, SKIP_BUSY)

    def samples(name: str, probe: str = "") -> list[tuple[int, bool]]:
        matchers = [Matcher("__name__", "=", name)]
        matchers += [Matcher("probe", "=", probe)] if probe else []
        (s,) = store.select(matchers, 0, 10**6)
        return [(ts, is_stale(v)) for ts, v in zip(s.ts, s.vs, strict=True)]

    assert samples("sentinel_probe_ttft_seconds") == [(1000, False), (16_000, True)]
    assert samples("sentinel_probe_success", CANARY) == [(1000, False), (16_000, True)]
    # The target goes (kubernetes_sd): its live series end; the ended ones get no more.
    jobs.end("gemma", 50_000)
    assert samples("sentinel_probe_success", HEALTH)[-1] == (50_000, True)
    assert samples("sentinel_probe_ttft_seconds") == [(1000, False), (16_000, True)]


def test_a_probes_series_share_its_clock_and_come_back_after_the_stores_gc() -> None:
    # A round's samples go in with one store call; each probe's series are always written
    # together, so they keep their times once (health, canary). A series the store
    # dropped (no sample for a whole retention) is written again under a fresh ref.
    from prometheus_client import CollectorRegistry

    from sentinel.collect.probe import ProbeResult, samples_of
    from sentinel.daemon.probejobs import ProbeJobs
    from sentinel.store.memory import Matcher

    config = parse_config(yaml.safe_load(
        "probe_interval: 0s\ntargets: [{name: gemma, url: 'http://127.0.0.1:1'}]"))
    store = MemoryStore(retention_ms=60_000)
    jobs = ProbeJobs(config, store, CollectorRegistry(), lambda: 0)
    t = ProbeTarget("gemma", "http://127.0.0.1:1")
    sent = [ProbeResult(HEALTH, True, 0.01, 200), ProbeResult(CANARY, True, 0.05, 200, ttft_s=0.02)]
    for at in (1000, 16_000):
        jobs._record(t, at, samples_of(t, sent), sent, "")
    clocks: dict[str, set[int]] = {}
    for labels, buf in store._refs.items():
        clocks.setdefault(label_value(labels, "probe") or CANARY, set()).add(id(buf.clock))
    assert {p: len(c) for p, c in clocks.items()} == {HEALTH: 1, CANARY: 1}
    assert len(store._refs) == 7

    assert store.gc(200_000) == 7  # nothing for longer than the retention: all dropped
    jobs._record(t, 201_000, samples_of(t, sent), sent, "")
    (s,) = store.select([Matcher("__name__", "=", "sentinel_probe_ttft_seconds")], 0, 10**6)
    assert list(zip(s.ts, s.vs, strict=True)) == [(201_000, pytest.approx(0.02))]
    (s,) = store.select([Matcher("__name__", "=", "sentinel_probe_success"),
                         Matcher("probe", "=", HEALTH)], 0, 10**6)
    assert list(zip(s.ts, s.vs, strict=True)) == [(201_000, 1.0)]
    assert jobs.probes.labels("gemma", HEALTH, "success")._value.get() == 3


def test_probe_series_no_rule_reads_are_not_stored_as_scraped_ones_are_not() -> None:
    # The store keeps what the loaded rules read (`needed_series`); the probes' series
    # follow the same filter. A reload that stops reading one ends it with one marker.
    from prometheus_client import CollectorRegistry

    from sentinel.collect.probe import ProbeResult, samples_of
    from sentinel.daemon.probejobs import ProbeJobs
    from sentinel.store.memory import Matcher, SeriesFilter

    config = parse_config(yaml.safe_load(
        "probe_interval: 0s\ntargets: [{name: gemma, url: 'http://127.0.0.1:1'}]"))
    store = MemoryStore()
    store.set_filter(SeriesFilter(frozenset({"sentinel_probe_success",
                                             "sentinel_probe_http_status"})))
    jobs = ProbeJobs(config, store, CollectorRegistry(), lambda: 0)
    t = ProbeTarget("gemma", "http://127.0.0.1:1")
    sent = [ProbeResult(HEALTH, True, 0.01, 200), ProbeResult(CANARY, True, 0.05, 200, ttft_s=0.02)]
    jobs._record(t, 1000, samples_of(t, sent), sent, "")

    def stored(name: str) -> list[list[tuple[int, bool]]]:
        return [[(ts, is_stale(v)) for ts, v in zip(s.ts, s.vs, strict=True)]
                for s in store.select([Matcher("__name__", "=", name)], 0, 10**6)]

    assert stored("sentinel_probe_success") == [[(1000, False)]] * 2
    assert stored("sentinel_probe_http_status") == [[(1000, False)]] * 2
    assert stored("sentinel_probe_duration_seconds") == stored("sentinel_probe_ttft_seconds") == []
    assert jobs.probes.labels("gemma", CANARY, "success")._value.get() == 1  # counted all the same

    store.set_filter(SeriesFilter(frozenset({"sentinel_probe_success"})))  # a reload
    jobs._record(t, 16_000, samples_of(t, sent), sent, "")
    assert stored("sentinel_probe_success") == [[(1000, False), (16_000, False)]] * 2
    assert stored("sentinel_probe_http_status") == [[(1000, False), (16_000, True)]] * 2
    jobs._record(t, 31_000, samples_of(t, sent), sent, "")
    assert stored("sentinel_probe_http_status") == [[(1000, False), (16_000, True)]] * 2

    store.set_filter(SeriesFilter(keep_all=True))  # keep_all_series: true
    jobs._record(t, 46_000, samples_of(t, sent), sent, "")
    assert stored("sentinel_probe_duration_seconds") == [[(46_000, False)]] * 2
    assert stored("sentinel_probe_ttft_seconds") == [[(46_000, False)]]


def test_probe_jobs_are_scheduled_at_their_slot_clear_of_the_evaluations():
    from prometheus_client import CollectorRegistry

    from sentinel.collect.ioloop import IOLoop
    from sentinel.daemon.missed import MissedWork
    from sentinel.daemon.probejobs import ProbeJobs, probe_offset_ms
    from sentinel.daemon.scrapejobs import ScrapeJobs

    config = parse_config(yaml.safe_load(
        "evaluation_interval: 5s\nprobe_interval: 15s\ntargets:\n"
        + "".join(f"  - {{name: t{i}, url: 'http://127.0.0.1:1'}}\n" for i in range(20))))
    io = IOLoop("test-probe-jobs").start()
    registry = CollectorRegistry()
    jobs = ScrapeJobs(io, None, MissedWork(registry))  # type: ignore[arg-type]
    probes = ProbeJobs(config, MemoryStore(), registry, lambda: 0, io)
    try:
        probes.schedule(jobs, 1_700_000_000_000)
        for i in range(20):
            interval, due = jobs.get(f"probe:t{i}")
            assert interval == 15_000
            assert due % 15_000 == probe_offset_ms(f"t{i}", 15_000, 5_000)
            assert due % 5_000 >= 2_500
    finally:
        jobs.stop()
        probes.close()
        io.stop()
