"""Backoff with jitter: the one helper behind every retry in Sentinel.

Whatever retries (a webhook in the outbox, a Cloud Logging or TPU poll, a
Kubernetes list or watch, a log command that exited, a diagnosis the model
did not answer, a remediation after a failure, a TPU start while the chip is
still held) waits the same way:

    exponential(failures, initial, cap)   initial, 2×, 4×, … capped; 0 for no failure
    equal_jitter(ceiling, rng)            half the ceiling plus a random share of the rest
    retry_delay_ms(...)                   both, and at least the peer's Retry-After
    Backoff                               the same, as state driven by the caller's clock

"Equal jitter" keeps every delay at least half its ceiling, so retries never
bunch up near zero, while clients that failed together spread apart. Delays
that a person reads as policy (remediation's CrashLoopBackOff-style wait, the
TPU lock's start retries) use `exponential` alone: they must be predictable.
Time is passed in (milliseconds), never read here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TypeVar

N = TypeVar("N", int, float)

# 2**62 already exceeds every cap in milliseconds; larger exponents only cost time.
_MAX_DOUBLINGS = 62


def exponential(failures: int, initial: N, cap: N) -> N:
    """The wait after `failures` failures in a row: initial doubling up to cap (0 for none)."""
    if failures <= 0:
        return initial * 0
    return min(cap, initial * 2 ** min(failures - 1, _MAX_DOUBLINGS))


def equal_jitter(ceiling_ms: int, rng: random.Random) -> int:
    """A delay between half of `ceiling_ms` and all of it, uniformly."""
    half = ceiling_ms // 2
    return half + rng.randint(0, ceiling_ms - half)


def retry_delay_ms(failures: int, initial_ms: int, max_ms: int, rng: random.Random,
                   retry_after_ms: int | None = None, *,
                   retry_after_cap_ms: int | None = None) -> int:
    """The jittered exponential wait after `failures` failures, at least Retry-After.

    Retry-After wins even above `max_ms` (the receiver said so) unless
    `retry_after_cap_ms` bounds it (a poll that must not stop for an hour).
    """
    delay = equal_jitter(exponential(failures, initial_ms, max_ms), rng)
    if retry_after_ms is not None:
        if retry_after_cap_ms is not None:
            retry_after_ms = min(retry_after_ms, retry_after_cap_ms)
        delay = max(delay, retry_after_ms)
    return delay


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """How to treat an error: retry with growing backoff, or wait the longest delay."""

    retryable: bool
    detail: str
    retry_after_ms: int | None = None


class Backoff:
    """Exponential backoff with equal jitter, driven by the caller's clock.

    A retryable failure waits `retry_delay_ms` (Retry-After capped at max_ms);
    a permanent one waits max_ms at once: retrying sooner cannot help, and an
    operator fixes it.
    """

    def __init__(self, base_ms: int = 2_000, max_ms: int = 300_000,
                 rng: random.Random | None = None) -> None:
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.failures = 0
        self.next_at_ms = 0
        self._rng = rng or random.Random()

    def ready(self, now_ms: int) -> bool:
        """Whether a call may be made now."""
        return now_ms >= self.next_at_ms

    def failed(self, now_ms: int, kind: ErrorKind) -> int:
        """Record a failure; the delay (ms) before the next call may be made."""
        self.failures += 1
        if kind.retryable:
            delay = retry_delay_ms(self.failures, self.base_ms, self.max_ms, self._rng,
                                   kind.retry_after_ms, retry_after_cap_ms=self.max_ms)
        else:
            delay = self.max_ms
        self.next_at_ms = now_ms + delay
        return delay

    def succeeded(self) -> None:
        """Reset after a successful call."""
        self.failures = 0
        self.next_at_ms = 0
