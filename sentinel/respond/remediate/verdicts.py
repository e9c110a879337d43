"""Did the fix work? Each remediation's verdict, and when a policy step has earned demotion.
Pure: the facts and the time are passed in (verdict_job.py reads and writes them).

    failed      the action or its verification failed (known at once), or the target's
                token throughput was still below `throughput_ratio` of its pre-incident
                level when the window ended
    recurred    the same failure (alert name or crash category) opened a new incident on
                the target within the window (known as soon as it does)
    overridden  a person acted on the target within the window (a manual action)
    fixed       the window (`verdicts.after`, 24 h) passed with none of the above

A step is demoted to `approval: required` when, of its last `demote_runs`
verdicts since it was last promoted, at least `demote_not_fixed` are not `fixed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sentinel.config.remediation import VerdictConfig
from sentinel.incidents.models_remediation import Verdict
from sentinel.respond.remediate.restart_cost import fmt


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known of one finished attempt and what followed it on its target."""

    ok: bool  # the attempt succeeded (acted, and verified where it verifies)
    finished_ms: int
    failure: str  # the failure it was for (the incident's alert name), for the words
    recurred_ms: int | None = None  # the first same-failure incident after it, if any
    recurred_incident: int | None = None
    overridden_ms: int | None = None  # the first manual action on the target after it
    throughput_before: float | None = None  # tokens/s before the incident (None: unknown)
    throughput_now: float | None = None


def decide(f: Facts, now_ms: int, cfg: VerdictConfig) -> tuple[Verdict, str] | None:
    """The verdict and why, or None while it is not due yet."""
    if not f.ok:
        return Verdict.FAILED, "the action or its verification failed"
    end = f.finished_ms + cfg.after_ms
    window = fmt(cfg.after_ms)
    # The first that happened decides; at the same moment, the failure's return does.
    seen = sorted(((t, v) for t, v in ((f.recurred_ms, Verdict.RECURRED),
                                       (f.overridden_ms, Verdict.OVERRIDDEN))
                   if t is not None and f.finished_ms <= t <= end),
                  key=lambda tv: (tv[0], tv[1] is not Verdict.RECURRED))
    if seen:
        t, verdict = seen[0]
        after = fmt(t - f.finished_ms)
        if verdict is Verdict.RECURRED:
            return verdict, (f"{f.failure} came back {after} after the fix (incident "
                             f"#{f.recurred_incident}), within {window}")
        return verdict, f"a person acted on the target {after} after the fix"
    if now_ms < end:
        return None
    if f.throughput_before and f.throughput_now is not None \
            and f.throughput_now < cfg.throughput_ratio * f.throughput_before:
        share = f.throughput_now / f.throughput_before
        return Verdict.FAILED, (f"{f.failure} did not come back in {window}, but throughput "
                                f"is {share:.0%} of its pre-incident level "
                                f"({f.throughput_now:.1f} vs {f.throughput_before:.1f} tokens/s)")
    level = "" if not f.throughput_before or f.throughput_now is None else \
        f"; throughput {f.throughput_now / f.throughput_before:.0%} of its pre-incident level"
    return Verdict.FIXED, f"{f.failure} did not come back in {window}{level}"


def demotion(recent: Sequence[str], cfg: VerdictConfig) -> str | None:
    """Why a step should be demoted, given its verdicts newest first; None: it stays."""
    runs = list(recent[:cfg.demote_runs])
    bad = [v for v in runs if v != Verdict.FIXED]
    if len(bad) < cfg.demote_not_fixed:
        return None
    counts = ", ".join(f"{bad.count(v)} {v}" for v in dict.fromkeys(bad))
    return (f"{len(bad)} of its last {len(runs)} runs were not fixed ({counts}): demoted to "
            "approval: required until a person promotes it")
