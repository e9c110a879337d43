"""Whether a restored alert's absence may count, and whether a target serves (issue 48).

A target whose scrape takes 1 s of its 2 s interval: an evaluation timed after the
scrape began but run before its samples were stored saw the alert absent, and the
readiness check, made after the query, already said the target had answered: the
alert resolved 5 s after a restart, then paged again. Readiness now runs from when the
samples were stored, by the clock evaluations are timed with.
"""

from __future__ import annotations

from test_incidents_tracker import alert

from sentinel.daemon.readiness import DataReadiness


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def test_an_evaluation_timed_before_the_scrape_was_stored_is_not_ready() -> None:
    clock = Clock(10_000)
    readiness = DataReadiness(["gemma-26b"], clock)
    restored = alert()
    assert not readiness.ready(restored, 10_500)  # nothing scraped yet
    clock.ms = 11_000  # the scrape timed 10_000 is stored 1 s later
    readiness.scraped("gemma-26b", True, 10_000)
    assert not readiness.ready(restored, 10_500)  # its query ran before the samples landed
    assert readiness.ready(restored, 11_000)


def test_serving_follows_the_last_scrape_of_a_scraped_target_only() -> None:
    readiness = DataReadiness(["gemma-26b"], Clock(0))
    assert readiness.serving("gemma-26b") is False  # not scraped since start
    assert readiness.serving("tpu-node-7") is None  # not a scrape target: no evidence
    readiness.scraped("gemma-26b", True, 0)
    assert readiness.serving("gemma-26b") is True
    readiness.scraped("gemma-26b", False, 2_000)
    assert readiness.serving("gemma-26b") is False
