"""Collect workers (sentinel/collect/workerpool.py): a hung worker, rule changes, `auto`.

The scrape semantics themselves (staleness, limits, failures) run against both
the in-process scraper and two workers in tests/test_scrape.py.
"""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import time
from collections.abc import Iterator

import pytest
from fixtures_e2e import wait_for
from test_scrape import Target, _series, _target, _values

from sentinel.collect.collectworker import EXPIRED, Worker
from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import ScrapeTarget
from sentinel.collect.workerpool import AUTO_MIN_SCRAPES_PER_S, ProcessScraper, workers_for
from sentinel.store.memory import MemoryStore, SeriesFilter

pytestmark = pytest.mark.integration


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


@pytest.fixture
def io() -> Iterator[IOLoop]:
    loop = IOLoop("test-pool").start()
    yield loop
    loop.stop()


def test_a_hung_worker_is_killed_restarted_and_its_scrape_counted_missed(target, io):
    store = MemoryStore()
    missed: list[tuple[str, int]] = []
    pool = ProcessScraper(store, io, 1, on_missed=lambda name, n: missed.append((name, n)),
                          hang_s=1.0).start()
    times = itertools.count(1_000, 1_000)
    try:
        target.serve(b"a 1\n")
        t = _target(target, timeout_ms=1_000)
        # Retried: on a loaded machine a worker's first answer may come after its deadline.
        wait_for(lambda: pool.scrape(t, next(times)).up, 60, "a first answer")
        [pid] = pool.pids()
        missed.clear()
        os.kill(pid, signal.SIGSTOP)  # alive, but it answers nothing
        lost_at = next(times)
        result = pool.scrape(t, lost_at)
        assert result.missed and not result.up and missed == [("vllm-0", 1)]
        wait_for(lambda: pool.restarts == 1 and pool.pids() not in ([], [pid]), 30,
                 "the hung worker killed and a new one started")
        target.serve(b"a 2\n")
        wait_for(lambda: pool.scrape(t, next(times)).up, 60, "an answer from the new worker")
        # The missed scrape wrote nothing: neither a value nor up 0.
        assert _values(store, "a")[-1][1] == 2.0
        assert lost_at not in {ts for ts, _ in _values(store, "a") + _values(store, "up")}
        assert {v for _, v in _values(store, "up")} == {1.0}
    finally:
        pool.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_rules_change_reaches_the_workers(target, io):
    store = MemoryStore()
    store.set_filter(SeriesFilter(frozenset({"a"})))
    pool = ProcessScraper(store, io, 2).start()
    try:
        target.serve(b'a 1\nb{x="1"} 2\n')
        t = _target(target)
        result = pool.scrape(t, 1_000)
        assert result.up and result.samples == 2 and result.dropped == 1
        assert _series(store, "b") == []
        store.set_filter(SeriesFilter(frozenset({"a", "b"})))  # a reload added a rule
        assert pool.scrape(t, 2_000).dropped == 0
        assert _values(store, "b", x="1") == [(2_000, 2.0)]
    finally:
        pool.close()


def test_a_request_read_after_its_deadline_is_answered_without_a_scrape():
    class Pipe:
        frames: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.frames.append(data)

    out = Pipe()
    worker = Worker(out, 1_000_000)  # type: ignore[arg-type]
    worker.handle(("target", 0, ScrapeTarget("t", "http://127.0.0.1:1")))
    worker.handle(("scrape", 0, 7, 1_000, int(time.time() * 1000) - 1))
    assert not worker.tasks  # nothing scheduled
    [answer] = out.frames
    assert pickle.loads(answer[4:]) == ("result", 7, 0, EXPIRED)


@pytest.mark.parametrize(("setting", "rate", "cores", "expected"), [
    (1, 2_000.0, 8, 1),  # as configured
    (3, 2.0, 1, 3),
    ("auto", 400.0, 8, 1),  # 2,000 targets at 5 s: one process does it for less
    ("auto", AUTO_MIN_SCRAPES_PER_S, 8, 8),  # one per core
    ("auto", 1_000.0, 1, 1),  # one core: nothing to gain
])
def test_workers_for(setting, rate, cores, expected):
    assert workers_for(setting, rate, cores) == expected
