"""Issue 49: Sentinel's own lateness is not the target's failure.

A scrape whose deadline the I/O loop reaches late (the loop could not run:
Sentinel was starved) is `SentinelLate`: counted as late work, `up` is not
written, no target alert follows. A target that is really slow, on a loop
that runs on time, still times out and is down.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from sentinel.collect.deadlines import LATE_S, Deadlines, SentinelLate
from sentinel.collect.ioloop import IOLoop
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.daemon.pipeline import Pipeline
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.store.memory import Matcher, MemoryStore


class _Holder:
    exchange = 1

    def __init__(self) -> None:
        self.expired: list[bool] = []

    def in_flight(self) -> bool:
        return not self.expired

    def expire(self, late: bool = False) -> None:
        self.expired.append(late)


@pytest.mark.parametrize(("blocked_s", "late"), [(0.0, False), (LATE_S + 0.5, True)])
def test_a_deadline_reached_late_says_so(blocked_s: float, late: bool) -> None:
    loop = asyncio.new_event_loop()
    try:
        d, holder = Deadlines(loop), _Holder()
        d.add(loop.time() + 0.05, holder, 1)
        if blocked_s:
            loop.call_soon(time.sleep, blocked_s)  # the loop cannot run: Sentinel is behind

        async def until_expired() -> None:
            while not holder.expired:
                await asyncio.sleep(0.01)

        loop.run_until_complete(asyncio.wait_for(until_expired(), 30))
    finally:
        loop.close()
    assert holder.expired == [late]


@pytest.fixture
def silent() -> Iterator[str]:
    """A target that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _up(store: MemoryStore) -> list[float]:
    return [v for s in store.select([Matcher("__name__", "=", "up")], 0, 2**62) for v in s.vs]


def _pipeline(store: MemoryStore, scraper: Scraper, metrics: SelfMetrics) -> Pipeline:
    return Pipeline(store=store, scraper=scraper, rules=None,  # type: ignore[arg-type]
                    tracker=None, receivers=(), metrics=metrics)  # type: ignore[arg-type]


def test_a_slow_target_on_a_loop_on_time_is_down(silent: str) -> None:
    store, io, metrics = MemoryStore(retention_ms=60_000), IOLoop().start(), SelfMetrics()
    scraper = Scraper(store, io=io)
    try:
        target = ScrapeTarget(name="slow", url=silent, timeout_ms=300)
        result = _pipeline(store, scraper, metrics).scrape(target, 1_000)
    finally:
        scraper.close()
        io.stop()
    assert not result.up and not result.missed and "timed out" in (result.error or "")
    assert _up(store) == [0.0]
    assert metrics.registry.get_sample_value("sentinel_scrapes_late_total") == 0


def test_a_scrape_sentinel_was_too_late_to_finish_writes_no_up(silent: str) -> None:
    store, io, metrics = MemoryStore(retention_ms=60_000), IOLoop().start(), SelfMetrics()
    scraper = Scraper(store, io=io)
    pipeline = _pipeline(store, scraper, metrics)
    try:
        target = ScrapeTarget(name="fine", url=silent, timeout_ms=300)

        async def starved():  # noqa: ANN202
            task = asyncio.ensure_future(pipeline.scrape_async(target, 1_000))
            await asyncio.sleep(0)  # its first step: the request's deadline is set
            time.sleep(0.3 + LATE_S + 0.7)  # then the loop cannot run: Sentinel is behind
            return await task

        result = io.submit(starved()).result(60)
    finally:
        scraper.close()
        io.stop()
    assert result.missed and result.late and result.error is None
    assert _up(store) == []  # not a target that is down
    assert metrics.registry.get_sample_value("sentinel_scrapes_late_total") == 1
    assert metrics.registry.get_sample_value(
        "sentinel_scrapes_total", {"target": "fine", "outcome": "failure"}) is None


def test_late_is_a_timeout_to_code_that_knows_only_timeouts() -> None:
    assert issubclass(SentinelLate, TimeoutError)
