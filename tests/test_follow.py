"""Evaluations follow the scrapes (sentinel/daemon/follow.py): detection does not wait for a
boundary that the target's hashed scrape offset put up to a whole interval away."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fixtures_e2e import wait_for, write_config
from prometheus_client import CollectorRegistry
from test_e2e_daemon import FOR_S, KV_RULE

from sentinel.collect.ioloop import IOLoop
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.daemon.follow import (
    FOLLOW_MAX_S,
    FOLLOW_MAX_TARGETS,
    ScrapeFollower,
    may_follow,
    reads_scrapes,
    slot_end,
)
from sentinel.daemon.missed import MissedWork
from sentinel.daemon.scrapejobs import SLOT_MS, ScrapeJobs, slot_offset_ms
from sentinel.paths import bundled_dir
from sentinel.rules.loader import load_rule_files
from sentinel.store.memory import Matcher

INTERVAL_MS = 1000


def test_slot_end_is_the_last_millisecond_of_the_slot():
    assert slot_end(10_000) == 10_249
    assert slot_end(10_249) == 10_249
    assert slot_end(10_250) == 10_499


def test_only_eligible_groups_that_were_cheap_follow_and_at_the_slot_end():
    ran: list[tuple[str, int]] = []
    told: list[bool] = []
    f = ScrapeFollower(lambda g, at: ran.append((g, at)), lambda: 0, told.append)
    f.eligible(["fast", "slow", "unmeasured"])
    assert f.run_once(5_010) == [] and not f.wanted  # nothing measured yet: none follows
    f.cost("fast", FOLLOW_MAX_S / 2)
    f.cost("slow", FOLLOW_MAX_S * 10)
    f.cost("other", 0.0)  # not eligible (a remote or slower group)
    assert f.run_once(5_010) == ["fast"]
    assert ran == [("fast", 5_249)]
    f.cost("fast", FOLLOW_MAX_S * 2)  # grew past the bound: the scrapes need not say a thing
    assert f.run_once(6_010) == [] and told == [True, False]


def test_scrape_jobs_say_once_when_a_batch_of_scrapes_is_all_in():
    io = IOLoop("test-follow").start()
    release = threading.Event()
    idle = threading.Event()
    calls: list[int] = []
    started: list[str] = []

    async def scrape(target: object) -> None:
        started.append(str(target))
        await asyncio.get_running_loop().run_in_executor(None, release.wait)

    def on_idle() -> None:
        calls.append(len(started))
        idle.set()

    jobs = ScrapeJobs(io, scrape, MissedWork(CollectorRegistry()))  # type: ignore[arg-type]
    jobs.on_idle = on_idle
    try:
        now_ms = jobs._wall_ms()
        for name in ("a", "b"):  # both due at once: one batch
            jobs.add("scrape", name, scrape, 60_000, now_ms, name, offset=now_ms % 60_000)
        wait_for(lambda: len(started) == 2, 30, "both scrapes to start")
        assert calls == []  # in flight: nothing to evaluate yet
        release.set()
        assert idle.wait(30)
        assert calls == [2]
    finally:
        release.set()
        jobs.stop()
        io.stop(2)


def _name_at(offset_ms: int) -> str:
    """A target name whose scrape runs `offset_ms` into a 1 s interval."""
    return next(n for n in (f"t{i}" for i in range(10_000))
                if slot_offset_ms(n, INTERVAL_MS) == offset_ms)


@pytest.mark.integration
def test_the_scrape_that_saw_the_change_is_evaluated_in_its_own_slot(tmp_path, sim):
    # Scraped half-way through the interval: the boundary's evaluation comes 500 ms later.
    name = _name_at(500)
    cfg = write_config(tmp_path, [(name, sim.url)], None, KV_RULE, scrape_interval="1s")
    app = App(load_config(cfg))
    app.start()
    try:
        assert app.pipeline is not None
        rules = app.pipeline.rules
        wait_for(lambda: app.follower.wanted, 30, "the group to follow the scrapes")
        sim.set_state(kv_cache_usage=0.93)
        alert = wait_for(lambda: next((a for a in rules.active_alerts()
                                       if a.fired_at_ms is not None), None), FOR_S + 30,
                         "the alert to fire")
        seen = [t for s in app.pipeline.store.select(
                    [Matcher("__name__", "=", "vllm:kv_cache_usage_perc")], 0, alert.fired_at_ms)
                for t, v in zip(s.ts, s.vs, strict=True) if v > 0.85]
        # The evaluation that first saw it ran at the end of that scrape's slot, not at the
        # boundary (which would be 500 ms after the scrape); `for` counted from there, and
        # the alert fired at the same slot's evaluation `for` later.
        assert alert.active_at_ms % INTERVAL_MS == slot_end(500) % INTERVAL_MS
        assert 0 <= alert.active_at_ms - min(seen) < SLOT_MS
        assert alert.fired_at_ms - alert.active_at_ms == FOR_S * 1000
    finally:
        app.stop(2)


def test_self_monitoring_groups_never_follow_the_scrapes():
    # At fleet size these are the groups cheap enough to follow; scrapes bring them nothing.
    groups = {g.name: g for g in load_rule_files([str(bundled_dir("rules") / "sentinel.yaml"),
                                                  str(bundled_dir("rules") / "vllm.yaml")])}
    assert not reads_scrapes(groups["sentinel-self"])
    assert not reads_scrapes(groups["sentinel-health"])
    assert reads_scrapes(groups["vllm"])  # up == 0, vllm:* series


def test_which_groups_may_follow():
    groups = load_rule_files([str(bundled_dir("rules") / "sentinel.yaml"),
                              str(bundled_dir("rules") / "vllm.yaml")])
    followers = may_follow(groups, [1000, 5000], 1000)
    assert "vllm" in followers and "sentinel-health" not in followers
    assert may_follow(groups, [500], 1000) == []  # evaluated less often than scraped
    assert may_follow(groups, [], 1000) == []  # nothing scraped (a remote backend's fleet)
    assert may_follow(groups, [1000] * (FOLLOW_MAX_TARGETS + 1), 1000) == []  # a fleet
