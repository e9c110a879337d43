"""Restoring an alert's `for` state after a restart, as Prometheus's RestoreForState does.

Prometheus (rules/group.go, `Group.RestoreForState`) reads each active
alert's last `ALERTS_FOR_STATE` sample: its value is the alert's `ActiveAt`
and its timestamp the moment Prometheus went down (`downAt`). Sentinel keeps
the same two facts in the database (`active_at`, `last_eval` of the alert
state rows), so the same rules apply, at `now` (the restart):

- no sample within `for_outage_tolerance` (default 1h) before now: the alert
  is not restored (it starts afresh, as a new alert would);
- it had fired (time pending ≥ `for`): it comes back firing, with its
  `ActiveAt` (Prometheus sets it firing again at the next evaluation, also
  for rules whose `for` is shorter than the grace period since
  prometheus/prometheus#19882, "restore firing alerts with short for
  durations"); Sentinel's incident stage finds it already notified: no page;
- it was pending, and the rule's `for` is shorter than
  `for_grace_period` (default 10m): not restored; it waits its `for` again
  (the same pull request's rule for pending alerts);
- it was pending with less than the grace period left: `ActiveAt` moves so
  that it fires one grace period after the restart (`now + grace - for`);
- otherwise `ActiveAt` moves later by the downtime (`now - downAt`): the
  outage does not count as time spent pending.

The flags' defaults are Prometheus's `--rules.alert.for-grace-period` and
`--rules.alert.for-outage-tolerance`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sentinel.model import Alert, AlertState

DEFAULT_FOR_GRACE_PERIOD_MS = 10 * 60_000
DEFAULT_FOR_OUTAGE_TOLERANCE_MS = 60 * 60_000


@dataclass(frozen=True, slots=True)
class RestoreSettings:
    """Prometheus's --rules.alert.for-grace-period and --rules.alert.for-outage-tolerance."""

    for_grace_period_ms: int = DEFAULT_FOR_GRACE_PERIOD_MS
    for_outage_tolerance_ms: int = DEFAULT_FOR_OUTAGE_TOLERANCE_MS


def restore_for_state(alert: Alert, hold_ms: int, now_ms: int, settings: RestoreSettings
                      ) -> Alert | None:
    """The alert as it is to be restored at `now_ms`, or None when it starts afresh."""
    down_at = alert.last_eval_ms
    if down_at < now_ms - settings.for_outage_tolerance_ms:
        return None  # outside the outage tolerance: as if the series had no sample
    if alert.state is AlertState.FIRING:
        return alert
    if alert.state is not AlertState.PENDING:
        return None
    if hold_ms < settings.for_grace_period_ms:
        return None  # Prometheus skips restoration: the alert waits its whole `for` again
    remaining = hold_ms - (down_at - alert.active_at_ms)
    if remaining <= 0:
        # It would have fired during the outage: fire at the next evaluation.
        return alert
    if remaining < settings.for_grace_period_ms:
        active_at = now_ms + settings.for_grace_period_ms - hold_ms
    else:
        active_at = alert.active_at_ms + (now_ms - down_at)
    return replace(alert, active_at_ms=active_at)
