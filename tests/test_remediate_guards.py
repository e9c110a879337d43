"""Remediation guards: one row per reason, backoff arithmetic, the breaker, concurrency limits."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from sentinel.config.remediation import BackoffConfig, SilenceConfig
from sentinel.respond.remediate.guards import (
    Decision,
    Episode,
    FleetState,
    Limits,
    Reason,
    Request,
    TargetState,
    after_outcome,
    backoff_ms,
    concurrency_limit,
    decide,
)

NOW = 1_800_000_000_000
BACKOFF = BackoffConfig.model_validate({"initial": "10s", "max": "5m", "reset_after": "10m"})
SILENCE = SilenceConfig.model_validate({
    "matchers": {"target": "tpu-a"}, "comment": "kernel upgrade",
    "starts": datetime.fromtimestamp(NOW / 1000 - 60, UTC),
    "ends": datetime.fromtimestamp(NOW / 1000 + 60, UTC)})
LIMITS = Limits(dry_run=False, max_concurrent=2, max_concurrent_percent=100.0,
                breaker_failures=3, backoff=BACKOFF)
REQ = Request(labels={"target": "tpu-a", "alertname": "X"}, step_attempts=(2, 1),
              cooldown_ms=300_000, max_per_hour=3, policy_dry_run=False, limits=LIMITS,
              after_failure=(False, True))
FLEET = FleetState(in_flight=0, size=20)


@pytest.mark.parametrize(("req", "target", "fleet", "episode", "reason", "step"), [
    (REQ, TargetState(), FLEET, Episode(), Reason.ALLOWED, 0),
    (REQ, TargetState(), FLEET, Episode(succeeded=True), Reason.DONE, 0),
    (replace(REQ, manual=True), TargetState(), FLEET, Episode(succeeded=True), Reason.ALLOWED, 0),
    (REQ, TargetState(in_flight=True), FLEET, Episode(), Reason.IN_PROGRESS, 0),
    (REQ, TargetState(), FLEET, Episode((2, 1)), Reason.GAVE_UP, 0),
    (replace(REQ, limits=replace(LIMITS, silences=(SILENCE,))), TargetState(), FLEET, Episode(),
     Reason.SILENCED, 0),
    (REQ, TargetState(consecutive_failures=3, last_failure_ms=NOW - 1000,
                      breaker_opened_ms=NOW - 1000), FLEET, Episode(), Reason.BREAKER_OPEN, 0),
    (REQ, TargetState(consecutive_failures=1, last_failure_ms=NOW - 5_000), FLEET, Episode((1,)),
     Reason.BACKOFF, 0),
    (REQ, TargetState(last_success_ms=NOW - 60_000), FLEET, Episode(), Reason.COOLDOWN, 0),
    (REQ, TargetState(attempts_last_hour=3), FLEET, Episode(), Reason.RATE_LIMITED, 0),
    (REQ, TargetState(), FleetState(in_flight=2, size=20), Episode(), Reason.CONCURRENCY, 0),
    (replace(REQ, policy_dry_run=True), TargetState(), FLEET, Episode(), Reason.DRY_RUN, 0),
    (replace(REQ, limits=replace(LIMITS, dry_run=True)), TargetState(), FLEET, Episode(),
     Reason.DRY_RUN, 0),
    (replace(REQ, force_dry_run=True), TargetState(), FLEET, Episode(), Reason.DRY_RUN, 0),
    # The second step (a cold node restart) once the first used its attempts.
    (REQ, TargetState(consecutive_failures=2, last_failure_ms=NOW - 60_000), FLEET,
     Episode((2,)), Reason.ALLOWED, 1),
    # Pinned to the cold step (a manual run) without a failed warm attempt: refused.
    (replace(REQ, step_attempts=(0, 9)), TargetState(), FLEET, Episode(), Reason.PRECONDITION, 1),
])
def test_decide_one_row_per_reason(req: Request, target: TargetState, fleet: FleetState,
                                   episode: Episode, reason: Reason, step: int) -> None:
    d = decide(req, target, fleet, episode, NOW)
    assert (d.reason, d.step, d.allowed) == (reason, step, reason is Reason.ALLOWED)
    assert d.allowed or d.detail


def test_silence_matches_labels_and_time_only() -> None:
    req = replace(REQ, limits=replace(LIMITS, silences=(SILENCE,)))
    other = replace(req, labels={"target": "tpu-b"})
    assert decide(other, TargetState(), FLEET, Episode(), NOW).reason is Reason.ALLOWED
    later = NOW + 61_000
    assert decide(req, TargetState(), FLEET, Episode(), later).reason is Reason.ALLOWED


@pytest.mark.parametrize(("failures", "wait_s"), [
    (0, 0), (1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (50, 300), (500, 300)])
def test_backoff_doubles_to_the_cap(failures: int, wait_s: int) -> None:
    assert backoff_ms(failures, BACKOFF) == wait_s * 1000


def test_backoff_ends_and_failures_reset_after_a_clean_period() -> None:
    t = TargetState(consecutive_failures=2, last_failure_ms=NOW)
    episode = Episode((1,))
    assert decide(REQ, t, FLEET, episode, NOW + 19_999).reason is Reason.BACKOFF
    assert decide(REQ, t, FLEET, episode, NOW + 20_000).reason is Reason.ALLOWED
    # Ten clean minutes later the count starts again from one.
    after = after_outcome(t, False, NOW + 600_000, LIMITS)
    assert after.consecutive_failures == 1


def test_breaker_opens_at_m_failures_and_success_clears_failures() -> None:
    t = TargetState()
    for i in range(3):
        assert t.breaker_opened_ms is None
        t = after_outcome(t, False, NOW + i * 1000, LIMITS)
    assert t.breaker_opened_ms == NOW + 2000 and t.consecutive_failures == 3
    assert decide(REQ, t, FLEET, Episode(), NOW + 10**9).reason is Reason.BREAKER_OPEN
    ok = after_outcome(TargetState(consecutive_failures=2, last_failure_ms=NOW), True, NOW, LIMITS)
    assert (ok.consecutive_failures, ok.last_success_ms) == (0, NOW)


@pytest.mark.parametrize(("k", "percent", "fleet", "limit"), [
    (2, 100, 20, 2), (5, 10, 20, 2), (5, 10, 5, 1), (2, 100, 0, 2), (10, 50, 4, 2)])
def test_concurrency_limit_is_the_smaller_of_k_and_p_percent(k: int, percent: float, fleet: int,
                                                              limit: int) -> None:
    limits = replace(LIMITS, max_concurrent=k, max_concurrent_percent=percent)
    assert concurrency_limit(limits, fleet) == limit


def test_pages_only_for_reasons_a_human_must_hear() -> None:
    assert Decision(False, Reason.BREAKER_OPEN).pages
    assert Decision(False, Reason.COLD_CACHE).pages
    assert not Decision(False, Reason.COOLDOWN).pages
    assert not Decision(True, Reason.ALLOWED).pages
