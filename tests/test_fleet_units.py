"""Units of the fleet design: rule-read series, scrape offsets, the self-alert rule file."""

from __future__ import annotations

from dataclasses import dataclass

from test_rules_promtool import REPO, promtool, sentinel_test

from sentinel.daemon.scrapejobs import (
    SLOT_MS,
    due,
    first_run_ms,
    miss_policy,
    offset_ms,
    slot_offset_ms,
)
from sentinel.rules.loader import RuleGroup, make_rule
from sentinel.rules.needs import needed_series


def _group(*exprs: str) -> RuleGroup:
    return RuleGroup("g", tuple(make_rule(f"R{i}", e) for i, e in enumerate(exprs)))


def test_needed_series_reads_names_from_every_selector():
    f = needed_series([_group(
        "sum by (target) (rate(vllm:prompt_tokens_total[5m])) > 0",
        "histogram_quantile(0.9, rate(vllm:e2e_request_latency_seconds_bucket[1m])) > 2",
        "vllm:num_requests_waiting > on(target) group_left up",
    )], extra_names=["vllm:num_preemptions_total"])
    assert f.names == {"vllm:prompt_tokens_total", "vllm:e2e_request_latency_seconds_bucket",
                       "vllm:num_requests_waiting", "up", "ALERTS", "ALERTS_FOR_STATE",
                       "vllm:num_preemptions_total"}
    assert not f.keep_all
    assert f.wants_name("up") and not f.wants_name("vllm:gpu_cache_usage_perc")


def test_needed_series_regex_names_and_nameless_selectors():
    f = needed_series([_group('{__name__=~"vllm:num_.*"} > 0')])
    assert f.wants_name("vllm:num_requests_running") and not f.wants_name("other")
    assert needed_series([_group('{target="a"} > 0')]).keep_all
    assert needed_series([_group("up == 0")], keep_all=True).wants_name("anything")


def test_needed_series_keeps_what_recording_rules_write():
    @dataclass(frozen=True)
    class Recording:  # what a recording rule object looks like to needed_series
        record: str
        expr: str
        query: object = None

    @dataclass(frozen=True)
    class Group:
        rules: tuple[Recording, ...]

    f = needed_series([Group((Recording("target:waiting:sum", "sum(vllm:waiting)"),))])
    assert {"target:waiting:sum", "vllm:waiting"} <= f.names


def test_needed_series_keeps_the_loaders_recording_rule_outputs(tmp_path):
    from sentinel.rules.loader import load_rule_files

    path = tmp_path / "r.yaml"
    path.write_text("groups:\n  - name: g\n    rules:\n"
                    "      - record: job:waiting:sum\n"
                    "        expr: sum(vllm:num_requests_waiting)\n"
                    "      - alert: A\n        expr: job:waiting:sum > 5\n")
    f = needed_series(load_rule_files([str(path)]))
    assert {"job:waiting:sum", "vllm:num_requests_waiting"} <= f.names


def test_scrape_offsets_spread_targets_over_the_interval():
    offsets = {offset_ms(f"vllm-{i}", 5_000) for i in range(1_000)}
    assert len(offsets) > 800 and min(offsets) < 100 and max(offsets) > 4_900
    for now in (0, 1_234, 999_999):
        first = first_run_ms("vllm-7", 5_000, now)
        assert now <= first < now + 5_000
        assert first % 5_000 == offset_ms("vllm-7", 5_000)


def test_scrapes_start_in_slots_spread_over_the_interval():
    from collections import Counter

    offsets = [slot_offset_ms(f"vllm-{i}", 5_000) for i in range(1_000)]
    assert all(o % SLOT_MS == 0 for o in offsets)
    per_slot = Counter(offsets)  # 20 slots of 250 ms: ~50 scrapes in each, none crowded
    assert sorted(per_slot) == list(range(0, 5_000, SLOT_MS)) and max(per_slot.values()) < 80
    for i in range(50):  # the slot holding the target's hashed offset
        assert 0 <= offset_ms(f"vllm-{i}", 5_000) - slot_offset_ms(f"vllm-{i}", 5_000) < SLOT_MS
    # An interval shorter than a slot: every scrape at its start, still once an interval.
    assert {slot_offset_ms(f"vllm-{i}", 200) for i in range(20)} == {0}


def test_scrape_jobs_are_armed_at_their_slot_and_added_ones_too():
    from prometheus_client import CollectorRegistry

    from sentinel.collect.ioloop import IOLoop
    from sentinel.collect.scrape import ScrapeTarget
    from sentinel.daemon.missed import MissedWork
    from sentinel.daemon.scrapejobs import ScrapeJobs

    async def scrape(_t: ScrapeTarget) -> None:
        return None

    io = IOLoop("test-scrape-slots").start()
    now = 1_700_000_000_123
    # The jobs' clock a minute behind `now`: no timer fires (and moves its run time) here.
    jobs = ScrapeJobs(io, scrape, MissedWork(CollectorRegistry()), wall_ms=lambda: now - 60_000)
    try:
        targets = [ScrapeTarget(f"t{i}", "http://127.0.0.1:1", interval_ms=5_000,
                                 timeout_ms=4_000)
                   for i in range(20)]
        assert jobs.start(targets, now) == 20
        jobs.add("scrape", "late", scrape, 5_000, now, targets[0])  # as discovery adds a pod
        for name in [t.name for t in targets] + ["late"]:
            interval, due_ms = jobs.get(f"scrape:{name}")
            assert interval == 5_000 and now <= due_ms < now + 5_000
            assert due_ms % 5_000 == slot_offset_ms(name, 5_000)
    finally:
        jobs.stop()
        io.stop()


def test_probes_start_in_slots_in_the_second_half_of_each_evaluation_interval():
    from collections import Counter

    from sentinel.daemon.probejobs import PROBE_SLOT_MS, probe_offset_ms

    offsets = [probe_offset_ms(f"vllm-{i}", 15_000, 5_000) for i in range(1_000)]
    assert all(0 <= o < 15_000 and o % PROBE_SLOT_MS == 0 for o in offsets)
    assert all(o % 5_000 >= 2_500 for o in offsets)  # never as the rule groups start
    per_slot = Counter(offsets)  # 30 slots of 250 ms: ~33 probes in each, none crowded
    assert len(per_slot) == 30 and max(per_slot.values()) < 60
    # The evaluation interval does not divide the probe interval: slots only.
    for i in range(50):
        hashed = offset_ms(f"probe:vllm-{i}", 15_000)
        assert probe_offset_ms(f"vllm-{i}", 15_000, 60_000) == hashed - hashed % PROBE_SLOT_MS
    for now in (0, 1_234, 999_999):
        first = first_run_ms("x", 15_000, now, offsets[7])
        assert now <= first < now + 15_000 and first % 15_000 == offsets[7]


def test_miss_policy_reports_each_missed_run_once():
    assert miss_policy(5_000) == {"coalesce": False, "misfire_grace_time": 2}
    assert miss_policy(60_000) == {"coalesce": False, "misfire_grace_time": 30}
    assert miss_policy(1_000)["coalesce"] is True  # APScheduler grace is whole seconds


def test_a_loop_job_runs_on_time_and_counts_every_run_time_it_could_not_take():
    # On time, or a little late: it runs, nothing missed, the next run time follows.
    d = due(10_000, 5_000, 10_000, running=False)
    assert (d.run, d.missed, d.next_ms) == (True, 0, 15_000)
    d = due(10_000, 5_000, 12_500, running=False)
    assert (d.run, d.missed, d.next_ms) == (True, 0, 15_000)
    # More than half an interval late: that run time is missed, the next one kept.
    d = due(10_000, 5_000, 12_501, running=False)
    assert (d.run, d.missed, d.next_ms) == (False, 1, 15_000)
    # The previous run still going: missed, whatever the time.
    d = due(10_000, 5_000, 10_000, running=True)
    assert (d.run, d.missed, d.next_ms) == (False, 1, 15_000)
    # A loop blocked for 3 run times: the two passed ones are missed, the newest runs.
    d = due(10_000, 5_000, 21_000, running=False)
    assert (d.run, d.missed, d.next_ms) == (True, 2, 25_000)
    # ... unless it too is over half an interval late.
    d = due(10_000, 5_000, 23_000, running=False)
    assert (d.run, d.missed, d.next_ms) == (False, 3, 25_000)
    # A timer that fires early (clock granularity) runs at its own run time.
    d = due(10_000, 5_000, 9_999, running=False)
    assert (d.run, d.missed, d.next_ms) == (True, 0, 15_000)


def test_self_alert_rules_pass_promtool_and_sentinel():
    rules = REPO / "rules" / "sentinel.yaml"
    res = promtool("check", "rules", str(rules))
    count = rules.read_text().count("- alert:")  # counted, not hard-coded: the file grows
    assert count >= 7
    assert res.returncode == 0 and f"SUCCESS: {count} rules found" in res.stdout, \
        res.stdout + res.stderr
    path = REPO / "rules" / "sentinel_test.yaml"
    res = promtool("test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    rc, out = sentinel_test(path)
    assert rc == 0, out


def test_jobs_cancelled_at_shutdown_log_no_traceback(caplog):
    import asyncio
    import logging

    from sentinel.daemon.missed import quiet_apscheduler

    quiet_apscheduler()
    log = logging.getLogger("apscheduler.executors.default")
    for exc in (asyncio.CancelledError(), ValueError("a real failure")):
        try:
            raise exc
        except BaseException:
            log.error("Error running job scrape:t1", exc_info=True)
    assert [r.exc_info[1].args for r in caplog.records if r.exc_info] == [("a real failure",)]


def test_select_newest_hands_out_only_the_newest_sample_in_range():
    from sentinel.model import STALE_NAN, labels_of
    from sentinel.store import Matcher, MemoryStore

    store = MemoryStore(retention_ms=10**9)
    for t in range(0, 100_000, 5_000):
        store.add(labels_of({"__name__": "m", "i": "1"}), t, t / 1000)
    store.add(labels_of({"__name__": "m", "i": "2"}), 1_000, 1.0)  # too old for the window
    [(labels, t, v)] = store.select_newest([Matcher("__name__", "=", "m")], 60_000, 72_000)
    assert (dict(labels)["i"], t, v) == ("1", 70_000, 70.0)
    full = store.select([Matcher("__name__", "=", "m"), Matcher("i", "=", "1")], 60_000, 72_000)
    assert full[0].ts[-1] == t and full[0].vs[-1] == v
    # The query time after the newest sample: that one, read without a search.
    [(_, t, v)] = store.select_newest([Matcher("__name__", "=", "m")], 90_000, 120_000)
    assert (t, v) == (95_000, 95.0)
    # A staleness marker as the newest sample in the range: the series is absent.
    store.add(labels_of({"__name__": "m", "i": "1"}), 100_000, STALE_NAN)
    assert store.select_newest([Matcher("__name__", "=", "m")], 90_000, 120_000) == []
    [(_, t, _)] = store.select_newest([Matcher("__name__", "=", "m")], 90_000, 99_000)
    assert t == 95_000


def test_a_targets_series_share_its_clock_and_collected_ones_come_back() -> None:
    from sentinel.collect.scrapeseries import SharedSeries, TargetSeries
    from sentinel.store.memory import Matcher, MemoryStore

    store = MemoryStore(retention_ms=10_000)
    t = TargetSeries(SharedSeries(store), "a", {"target": "a"})
    t.store_page(t.parse("m 1\nn 2\n", False), 1000)
    assert {id(ref.clock) for ref in t.prev} == {id(t.clock)}  # one clock, the target's
    t.store_page(t.parse("m 1\n", False), 2000)  # n vanishes: a staleness marker
    assert store.gc(50_000) == 2 and store.series_count() == 0
    t.store_page(t.parse("m 5\nn 6\n", False), 60_000)  # the old refs are dead
    got = {dict(s.labels)["__name__"]: (s.ts, s.vs)
           for s in store.select([Matcher("__name__", "=~", "m|n")], 0, 10**6)}
    assert got == {"m": ([60_000], [5.0]), "n": ([60_000], [6.0])}
