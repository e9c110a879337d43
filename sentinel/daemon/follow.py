"""Evaluations that follow the scrapes: a cheap rule group runs again once a slot's scrapes are in.

Rule groups evaluate on their interval's boundary (app.py), and scrapes run
at an offset in their interval hashed from the target's name (scrapejobs.py).
A change on a target therefore waited first for its scrape, then, from the
scrape to the next boundary, for up to a whole evaluation interval more:
with 1 s intervals 250 ms to 1 s depending on the target's name (one
scraped at offset 0 raced the boundary's evaluation and mostly lost it),
and that wait counted again from `for`'s end to the evaluation that fires.

So when the scrapes in flight are all done (ScrapeJobs' `on_idle`, on the
I/O loop; one call per batch of scrapes, not per scrape), this worker
evaluates, on its own thread, every group that may follow: a group of the
embedded store that reads scraped series (`reads_scrapes`), whose interval
is no longer than the shortest scrape interval, in a fleet of at most
FOLLOW_MAX_TARGETS configured targets, and whose rules took at
most FOLLOW_MAX_S at its last evaluation (the rules alone: the incident
side of an evaluation that opened an incident took tens of milliseconds
more, and is no reason to stop).
The boundary evaluations stay as they are; these are extra ones, at most
one per group per scrape slot. At fleet size nothing follows, and
ScrapeJobs' `on_idle` is unset (`on_wanted`): the scrape path does no more
than before.

A follow-up evaluation is timestamped at the end of the scrape slot it
runs in (`slot_end`), not at the wall clock: every sample of the slot's
scrapes is at or before it, and the same slot's evaluations are exactly one
interval apart, so `for: 2s` fires at the follow-up two intervals after the
one that first saw the change, not at a later boundary because a scrape
took a millisecond longer. The App skips any evaluation not later than the
group's last one, so evaluation times of a group never go backwards.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sentinel.daemon.scrapejobs import SLOT_MS
from sentinel.promql.compile import compile_expr
from sentinel.rules.needs import _name_matchers, _selectors

log = logging.getLogger(__name__)

# A group follows the scrapes while its rules took no longer than this at its last
# evaluation. At most one follow-up per group per 250 ms slot: 2 % of a core a group
# at most. A rule over a few targets takes ~0.1-1 ms; the shipped groups over 1,000
# targets take tens to hundreds (bench/ruleeval.py).
FOLLOW_MAX_S = 0.005
# Beyond this many configured targets nothing follows: the groups that stay cheap there
# read series the fleet does not have (tpu on GPUs), and a follow-up after every batch of
# scrapes would be work the fleet figures (bench/fleet.py, 1,000+ targets) did not have.
FOLLOW_MAX_TARGETS = 200


# Series no scrape writes: Sentinel's own (self-metrics, probes) and the rules' alerts.
NOT_SCRAPED = ("sentinel_", "ALERTS")


def reads_scrapes(group: Any) -> bool:  # noqa: ANN401 (rules.loader.RuleGroup)
    """Whether any rule of `group` reads a series a scrape may write.

    Sentinel's self-monitoring groups read only `sentinel_*` series, written
    by its own jobs: a scrape brings them nothing new, so they never follow
    (at fleet size they are the cheap groups that would).
    """
    for rule in group.rules:
        query = getattr(rule, "query", None)
        if query is None or isinstance(query, str):
            query = compile_expr(query or rule.expr)
        for selector in _selectors(query):
            exact, _regex = _name_matchers(selector)
            if exact is None or not exact.startswith(NOT_SCRAPED):
                return True
    return False


def may_follow(groups: Iterable[Any], scrape_intervals_ms: Sequence[int],
               default_interval_ms: int) -> list[str]:
    """The groups that may follow the scrapes of targets with these intervals (configured
    targets; discovered ones are not counted): groups that read scraped series, evaluated
    at least as often as the most often scraped target, none beyond FOLLOW_MAX_TARGETS."""
    if not scrape_intervals_ms or len(scrape_intervals_ms) > FOLLOW_MAX_TARGETS:
        return []
    shortest = min(scrape_intervals_ms)
    return [g.name for g in groups if reads_scrapes(g)
            and (g.interval_ms or default_interval_ms) <= shortest]


def slot_end(now_ms: int, slot_ms: int = SLOT_MS) -> int:
    """The last millisecond of the scrape slot `now_ms` falls in."""
    return (now_ms // slot_ms + 1) * slot_ms - 1


class ScrapeFollower:
    """Evaluates the groups that may follow the scrapes when told the scrapes are in.

    `evaluate(group, now_ms)` runs one evaluation (the App's, which skips one
    that is not later than the group's last); `cost(group, cpu_s)` is told
    how long the rules of every evaluation took, whoever ran it.
    """

    def __init__(self, evaluate: Callable[[str, int], object],
                 clock_ms: Callable[[], int],
                 on_wanted: Callable[[bool], None] = lambda wanted: None) -> None:
        self._evaluate = evaluate
        self._clock_ms = clock_ms
        self._on_wanted = on_wanted
        self._eligible: frozenset[str] = frozenset()
        self._cost: dict[str, float] = {}
        self.wanted = False  # whether any group follows now
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def eligible(self, groups: Iterable[str]) -> None:
        """The groups that may follow (at start and at each reload); their costs start unknown."""
        self._eligible = frozenset(groups)
        self._cost = {}
        self._update()

    def cost(self, group: str, seconds: float) -> None:
        """How long the rules of `group`'s last evaluation took."""
        self._cost[group] = seconds
        self._update()

    def _update(self) -> None:
        wanted = bool(self.following())
        if wanted != self.wanted:
            self.wanted = wanted
            self._on_wanted(wanted)  # ScrapeJobs' on_idle set or cleared

    def following(self) -> list[str]:
        """The groups that follow now: eligible, and cheap at their last evaluation."""
        return sorted(g for g in self._eligible
                      if self._cost.get(g, float("inf")) <= FOLLOW_MAX_S)

    def scraped(self) -> None:
        """The scrapes in flight are all done (called on the I/O loop: only sets a flag)."""
        self._wake.set()

    def run_once(self, now_ms: int) -> list[str]:
        """Evaluate every following group at the end of `now_ms`'s slot; returns them."""
        groups = self.following()
        at = slot_end(now_ms)
        for group in groups:
            self._evaluate(group, at)
        return groups

    def start(self) -> None:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._loop, name="sentinel-follow",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the worker (an evaluation in progress finishes)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.run_once(self._clock_ms())
            except Exception:  # the App's evaluation never raises; this is a bug
                log.exception("follow-up evaluation failed")
