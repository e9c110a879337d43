"""The shared backoff helper (sentinel.backoff): one table per function, one row per case."""

from __future__ import annotations

import random

import pytest

from sentinel.backoff import Backoff, ErrorKind, equal_jitter, exponential, retry_delay_ms


@pytest.mark.parametrize(("failures", "expected"), [
    (-1, 0), (0, 0), (1, 1_000), (2, 2_000), (3, 4_000), (6, 32_000), (7, 60_000),
    (10**6, 60_000),  # no overflow, no time spent on a huge power
])
def test_exponential_doubles_from_initial_up_to_the_cap(failures: int, expected: int) -> None:
    assert exponential(failures, 1_000, 60_000) == expected


def test_exponential_in_seconds() -> None:
    assert [exponential(n, 0.1, 2.0) for n in range(1, 8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_equal_jitter_stays_in_the_upper_half_and_spreads() -> None:
    rng = random.Random(7)
    draws = [equal_jitter(10_001, rng) for _ in range(2_000)]
    assert min(draws) >= 5_000 and max(draws) <= 10_001
    # both ends of the range are reached, and the values spread (clients that failed together
    # do not retry together)
    assert min(draws) < 5_100 and max(draws) > 9_900 and len(set(draws)) > 1_500
    assert equal_jitter(0, rng) == 0 and equal_jitter(1, rng) in (0, 1)


@pytest.mark.parametrize(("failures", "retry_after", "cap", "low", "high"), [
    (1, None, None, 500, 1_000),
    (4, None, None, 4_000, 8_000),
    (20, None, None, 30_000, 60_000),          # capped, then jittered
    (1, 5_000, None, 5_000, 5_000),           # Retry-After longer than the backoff wins
    (1, 600_000, None, 600_000, 600_000),     # even above the cap: the receiver said so
    (1, 600_000, 60_000, 60_000, 60_000),     # unless the caller caps it
    (4, 10, None, 4_000, 8_000),              # a shorter Retry-After changes nothing
])
def test_retry_delay(failures: int, retry_after: int | None, cap: int | None, low: int,
                     high: int) -> None:
    rng = random.Random(1)
    for _ in range(50):
        d = retry_delay_ms(failures, 1_000, 60_000, rng, retry_after, retry_after_cap_ms=cap)
        assert low <= d <= high


def test_backoff_state_follows_the_callers_clock() -> None:
    b = Backoff(base_ms=1_000, max_ms=8_000, rng=random.Random(3))
    assert b.ready(0)
    d1 = b.failed(100, ErrorKind(True, "503"))
    assert 500 <= d1 <= 1_000 and not b.ready(100 + d1 - 1) and b.ready(100 + d1)
    d2 = b.failed(5_000, ErrorKind(True, "503"))
    assert 1_000 <= d2 <= 2_000 and b.failures == 2
    # permanent errors wait the longest delay at once; Retry-After is capped at max
    assert b.failed(0, ErrorKind(False, "403")) == 8_000
    assert b.failed(0, ErrorKind(True, "429", retry_after_ms=3_600_000)) == 8_000
    b.succeeded()
    assert b.ready(0) and b.failures == 0


def test_every_retry_loop_uses_the_helper() -> None:
    """The copies this module replaced stay gone: their formulas are not written again."""
    from sentinel.collect import gcp
    from sentinel.respond.notify import sender

    assert gcp.Backoff is Backoff and gcp.ErrorKind is ErrorKind
    # the outbox's policy is the helper's arithmetic
    policy = sender.RetryPolicy(initial_ms=1_000, max_ms=60_000)
    a, b = random.Random(5), random.Random(5)
    assert [policy.delay_ms(n, None, a) for n in range(1, 10)] == [
        retry_delay_ms(n, 1_000, 60_000, b) for n in range(1, 10)]
