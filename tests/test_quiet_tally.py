"""Issue 49: repeated warnings over many targets are one line a minute per kind, with counts."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from sentinel.daemon.missed import MissedWork
from sentinel.quietlog import QuietTally


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_two_thousand_late_targets_are_a_line_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    missed = MissedWork(CollectorRegistry(), clock=clock)
    caplog.set_level(logging.WARNING, logger="sentinel.daemon.missed")
    for minute in range(3):
        for second in range(0, 60, 5):  # every 5 s, every target misses a run
            clock.t = 1000.0 + minute * 60 + second
            for i in range(2000):
                missed.scrape_missed(f"t{i}", 2 if i == 7 else 1)
            missed.iteration_missed("vllm")
    lines = [r.getMessage() for r in caplog.records]
    scrapes = [m for m in lines if m.startswith("scrape")]
    groups = [m for m in lines if m.startswith("rule group")]
    # The first occurrence at once, then one line per minute: not one per target.
    assert len(scrapes) == 3 and len(groups) == 3, lines
    assert scrapes[0].startswith("scrape t0: 1 run(s) could not start on time")
    assert scrapes[1] == ("scrape: 24012 run(s) of 2000 targets could not start on time "
                          "in the last 60s (most: t7 ×24, t0 ×12, t1 ×12)")
    assert missed.scrapes.labels("t7")._value.get() == 72  # counted per target all the same


def test_a_tally_of_one_item_names_it() -> None:
    clock, got = Clock(), []

    class Log:
        def warning(self, msg: str, *args: object) -> None:
            got.append(msg % args)

    tally = QuietTally(Log(), "rule group", "could not start on time",  # type: ignore[arg-type]
                       "group", clock=clock)
    tally.add("vllm")
    tally.add("vllm", 3)  # within the minute: counted, not written
    clock.t += 60
    tally.add("vllm")
    assert got == ["rule group vllm: 1 run(s) could not start on time (repeats are "
                   "summarised every 60s for all groups)",
                   "rule group: 4 run(s) of 1 group could not start on time in the last 60s "
                   "(most: vllm ×4)"]
