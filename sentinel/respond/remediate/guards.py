"""Whether an action may run now: pure decisions that return a reason.

`decide(request, target, fleet, episode, now_ms)` reads only what it is
given (state loaded from the database, the policy, the time) and returns a
`Decision`; the engine stores the reason on the incident timeline and counts
it as a metric label. The checks, in order:

    done         this alert episode was already remediated (verified)
    correlated   the target was verified healthy by an action (for another incident)
                 after this incident began: the same crash, acted on once already
    in_progress  an action on the target is running
    gave_up      every step of the policy's ladder used its attempts
    silenced     a silence matches the alert's labels
    breaker_open M failed attempts in a row: a human decides now
    backoff      after a failure, wait 10 s doubling to a cap (CrashLoopBackOff)
    cooldown     a verified success on the target is too recent
    rate_limited the target's budget of actions per hour is spent
    concurrency  K targets (or P % of the fleet) are already being remediated
    dry_run      everything passed, but nothing is to be done for real
    allowed

`after_outcome` is the matching pure update of a target's state.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sentinel.backoff import exponential
from sentinel.config.remediation import BackoffConfig, SilenceConfig
from sentinel.timeintervals import TimeInterval, any_active

HOUR_MS = 3_600_000


class Reason(enum.StrEnum):
    """Why a decision came out as it did; stored and used as a metric label."""

    ALLOWED = "allowed"
    DONE = "done"
    CORRELATED = "correlated"
    IN_PROGRESS = "in_progress"
    GAVE_UP = "gave_up"
    SILENCED = "silenced"
    BREAKER_OPEN = "breaker_open"
    BACKOFF = "backoff"
    COOLDOWN = "cooldown"
    RATE_LIMITED = "rate_limited"
    CONCURRENCY = "concurrency"
    DRY_RUN = "dry_run"
    # Found by the action's own read-only check, not here: the cache is cold.
    COLD_CACHE = "cold_cache"
    # The action's precondition failed otherwise (bad label value, no such container).
    PRECONDITION = "precondition"
    # Kubernetes: the pod is the only ready one of its workload (allow_last_ready: false).
    LAST_READY = "last_ready"
    # docker_restart: the container was started after the failure began, not by Sentinel (a
    # person, Docker's restart policy): restarting over that start would kill it. Pages
    # nothing itself; the incident's hold or its page tells the rest.
    STARTED_ELSEWHERE = "started_elsewhere"
    # Decided before any guard here (incidents/fleet.py): the target is a member of an open
    # fleet incident, and a fleet-wide failure is not acted on target by target. Pages
    # nothing: the fleet incident's one page says so.
    FLEET_WIDE = "fleet_wide"


# Refusals a human must hear about; the others resolve themselves with time.
PAGE_REASONS = frozenset({Reason.GAVE_UP, Reason.BREAKER_OPEN, Reason.RATE_LIMITED,
                          Reason.COLD_CACHE, Reason.PRECONDITION, Reason.LAST_READY})


@dataclass(frozen=True, slots=True)
class TargetState:
    """A target's guard state as persisted, plus what is derived from the attempts table."""

    consecutive_failures: int = 0
    last_attempt_ms: int | None = None
    last_failure_ms: int | None = None
    last_success_ms: int | None = None
    breaker_opened_ms: int | None = None
    attempts_last_hour: int = 0
    in_flight: bool = False


@dataclass(frozen=True, slots=True)
class FleetState:
    """How many targets are being remediated now, and how many there are."""

    in_flight: int
    size: int


@dataclass(frozen=True, slots=True)
class Episode:
    """This incident's history under this policy: failed attempts per step, and success."""

    failed_per_step: tuple[int, ...] = ()
    succeeded: bool = False
    # A verified success on the target, for another incident, that covers this one (its id).
    covered_by: int | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """The global guard settings (from `remediation:`)."""

    dry_run: bool
    max_concurrent: int
    max_concurrent_percent: float
    breaker_failures: int
    backoff: BackoffConfig
    silences: Sequence[SilenceConfig] = ()
    # The config's named `time_intervals`, for silences that recur (weekly maintenance).
    intervals: Mapping[str, tuple[TimeInterval, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    """What is asked for: the alert's labels under one policy's settings."""

    labels: Mapping[str, str]
    step_attempts: tuple[int, ...]  # attempts allowed per step of the ladder
    cooldown_ms: int
    max_per_hour: int
    policy_dry_run: bool
    limits: Limits
    force_dry_run: bool = False  # `sentinel remediate --dry-run`
    # Per step: only after an earlier step failed in this episode (a cold node restart).
    after_failure: tuple[bool, ...] = ()
    manual: bool = False  # a person asked: an episode already remediated may be acted on again


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome: allowed or not, why, which step of the ladder, and a human detail."""

    allowed: bool
    reason: Reason
    step: int = 0
    detail: str = ""

    @property
    def pages(self) -> bool:
        """Whether on-call must hear of this refusal."""
        return not self.allowed and self.reason in PAGE_REASONS


def next_step(episode: Episode, step_attempts: Sequence[int]) -> int | None:
    """The first step whose attempts are not used up, or None when all are."""
    for i, allowed in enumerate(step_attempts):
        used = episode.failed_per_step[i] if i < len(episode.failed_per_step) else 0
        if used < allowed:
            return i
    return None


def backoff_ms(failures: int, cfg: BackoffConfig) -> int:
    """The wait after `failures` failures in a row: initial doubling up to max (0 for none)."""
    return exponential(failures, cfg.initial_ms, cfg.max_ms)


def effective_failures(t: TargetState, now_ms: int, cfg: BackoffConfig) -> int:
    """Failures in a row, forgotten once the target stayed clean for `reset_after`."""
    if t.last_failure_ms is not None and now_ms - t.last_failure_ms >= cfg.reset_after_ms:
        return 0
    return t.consecutive_failures


def concurrency_limit(limits: Limits, fleet_size: int) -> int:
    """K, or P % of the fleet when that is smaller; never below 1."""
    by_share = math.floor(fleet_size * limits.max_concurrent_percent / 100)
    return max(1, min(limits.max_concurrent, by_share if fleet_size else limits.max_concurrent))


def silenced_by(labels: Mapping[str, str], silences: Sequence[SilenceConfig],
                now_ms: int, intervals: Mapping[str, tuple[TimeInterval, ...]] | None = None
                ) -> SilenceConfig | None:
    """The first active silence whose matchers all equal the alert's labels.

    A silence is active between its `starts` and `ends`, or, when it names
    `time_intervals`, while one of them is (a recurring window).
    """
    for s in silences:
        if not all(labels.get(k) == v for k, v in s.matchers.items()):
            continue
        if s.time_intervals:
            if any_active(s.time_intervals, intervals or {}, now_ms) is not None:
                return s
        elif s.starts is not None and s.ends is not None and \
                s.starts.timestamp() * 1000 <= now_ms < s.ends.timestamp() * 1000:
            return s
    return None


def decide(req: Request, target: TargetState, fleet: FleetState, episode: Episode,
           now_ms: int) -> Decision:
    """Whether the request may act now, and why (see the module docstring for the order)."""
    limits = req.limits
    if episode.succeeded and not req.manual:
        return Decision(False, Reason.DONE, detail="already remediated and verified")
    if episode.covered_by is not None and not req.manual:
        return Decision(False, Reason.CORRELATED, detail=(
            f"attempt #{episode.covered_by} verified the target healthy after this incident "
            "began: the same crash was acted on once"))
    if target.in_flight:
        return Decision(False, Reason.IN_PROGRESS, detail="an action on the target is running")
    step = next_step(episode, req.step_attempts)
    if step is None:
        return Decision(False, Reason.GAVE_UP,
                        detail=f"every step failed ({sum(episode.failed_per_step)} attempts)")
    if step < len(req.after_failure) and req.after_failure[step] \
            and not any(episode.failed_per_step[:step]):
        return Decision(False, Reason.PRECONDITION, step,
                        "a cold restart comes only after a warm restart failed")
    silence = silenced_by(req.labels, limits.silences, now_ms, limits.intervals)
    if silence is not None:
        return Decision(False, Reason.SILENCED, step, silence.comment or "silenced")
    if target.breaker_opened_ms is not None:
        return Decision(False, Reason.BREAKER_OPEN, step,
                        f"{target.consecutive_failures} failed attempts in a row")
    failures = effective_failures(target, now_ms, limits.backoff)
    if failures and target.last_failure_ms is not None:
        wait = backoff_ms(failures, limits.backoff)
        if now_ms < target.last_failure_ms + wait:
            return Decision(False, Reason.BACKOFF, step,
                            f"{failures} failure(s): waiting {wait / 1000:g}s after the last")
    if target.last_success_ms is not None and now_ms < target.last_success_ms + req.cooldown_ms:
        return Decision(False, Reason.COOLDOWN, step,
                        f"last success {(now_ms - target.last_success_ms) / 1000:g}s ago")
    if target.attempts_last_hour >= req.max_per_hour:
        return Decision(False, Reason.RATE_LIMITED, step,
                        f"{target.attempts_last_hour} actions in the last hour "
                        f"(budget {req.max_per_hour})")
    limit = concurrency_limit(limits, fleet.size)
    if fleet.in_flight >= limit:
        return Decision(False, Reason.CONCURRENCY, step,
                        f"{fleet.in_flight} targets being remediated (limit {limit})")
    if limits.dry_run or req.policy_dry_run or req.force_dry_run:
        return Decision(False, Reason.DRY_RUN, step, "dry run: nothing done")
    return Decision(True, Reason.ALLOWED, step)


def after_outcome(t: TargetState, ok: bool, now_ms: int, limits: Limits) -> TargetState:
    """The target's state once an attempt finished: success clears failures; M failures trip."""
    if ok:
        return replace(t, consecutive_failures=0, last_success_ms=now_ms, in_flight=False)
    failures = effective_failures(t, now_ms, limits.backoff) + 1
    opened = t.breaker_opened_ms
    if opened is None and failures >= limits.breaker_failures:
        opened = now_ms
    return replace(t, consecutive_failures=failures, last_failure_ms=now_ms,
                   breaker_opened_ms=opened, in_flight=False)
