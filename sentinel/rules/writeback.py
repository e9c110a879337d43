"""Rule results written back to the store, as Prometheus's rules/manager.go Group.Eval does.

After each rule of a group is evaluated, its output goes to the store at the
evaluation time, before the next rule runs, so a later rule in the same
group reads it at once and another group at its next evaluation:

- a recording rule writes its result series;
- an alerting rule writes `ALERTS{alertname, alertstate="pending"|"firing", ...} 1`
  and `ALERTS_FOR_STATE{alertname, ...} <active_at in unix seconds>` for each
  pending or firing alert (Prometheus writes these once the rule's `for`
  state is restored; promtool marks every rule restored, and so does Sentinel);
- a series the rule wrote at its previous evaluation but not at this one
  gets a staleness marker, so it leaves instant queries at once instead of
  lingering for the 5m lookback.

A rule whose evaluation failed writes nothing and marks nothing stale, as
in Prometheus. Writes go through the store's public `add`, so recorded
series count toward its series limit; a write the store refuses becomes the
rule's error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Protocol

from sentinel.model import METRIC_NAME, STALE_NAN, AlertState, Labels
from sentinel.rules.alerting import AlertingRuleState, RuleHealth

ALERTS = "ALERTS"
ALERTS_FOR_STATE = "ALERTS_FOR_STATE"
# Metric names rules write: a store that keeps only the series rules read must keep these.
WRITTEN_META_NAMES = frozenset({ALERTS, ALERTS_FOR_STATE})


class Appender(Protocol):
    """What write-back needs from a store (MemoryStore implements it)."""

    def add(self, labels: Labels, t_ms: int, value: float) -> None:
        """Append one sample by label set."""
        ...


def alert_series(state: AlertingRuleState, now_ms: int) -> list[tuple[Labels, int, float]]:
    """ALERTS and ALERTS_FOR_STATE samples for the rule's pending and firing alerts."""
    rule = state.rule
    out: list[tuple[Labels, int, float]] = []
    # Prometheus starts from the rule's label templates as written, then sets the
    # alert's labels over them (so a label whose template expanded to "" keeps its text).
    raw = {k: v for k, v in rule.labels if v}
    for a in state.active_alerts():
        if a.state not in (AlertState.PENDING, AlertState.FIRING):
            continue
        base = {**raw, **dict(a.labels), "alertname": rule.name}
        alerts = {**base, METRIC_NAME: ALERTS, "alertstate": a.state.value.lower()}
        for_state = {**base, METRIC_NAME: ALERTS_FOR_STATE}
        out.append((tuple(sorted(alerts.items())), now_ms, 1.0))
        # Go's ActiveAt.Unix(): whole seconds, rounded down.
        out.append((tuple(sorted(for_state.items())), now_ms, float(a.active_at_ms // 1000)))
    return out


def rule_output(state: Any, now_ms: int, query_offset_ms: int = 0
                ) -> list[tuple[Labels, int, float]] | None:
    """The samples a rule writes after an evaluation at `now_ms`; None when it failed."""
    if state.health == RuleHealth.ERR:
        return None
    if isinstance(state, AlertingRuleState):
        return alert_series(state, now_ms)
    t = now_ms - query_offset_ms  # a recorded sample carries its query's timestamp
    return [(labels, t, value) for labels, value in state.samples]


class SeriesWriter:
    """Writes each rule's output and marks stale what a rule stopped writing."""

    def __init__(self, store: Appender) -> None:
        self.store = store
        self._previous: dict[int, set[Labels]] = {}  # rule index → series last written
        self._stale: set[Labels] = set()  # written by rules a reload removed

    def write(self, index: int, samples: Iterable[tuple[Labels, int, float]], now_ms: int
              ) -> str | None:
        """Append one rule's samples; an error message when the store refused one."""
        written: set[Labels] = set()
        error = None
        for labels, t, value in samples:
            try:
                self.store.add(labels, t, value)
            except Exception as e:  # e.g. the store's series limit: the rule's error
                error = str(e) or type(e).__name__
                continue
            written.add(labels)
        for labels in self._previous.get(index, set()) - written:
            # As Prometheus, a failed stale marker is not the rule's error.
            with contextlib.suppress(Exception):
                self.store.add(labels, now_ms, STALE_NAN)
        self._previous[index] = written
        return error

    def adopt(self, old: SeriesWriter, moved: dict[int, int], old_count: int) -> None:
        """Take over what the rules of a group wrote before a reload (Prometheus's CopyState).

        `moved` maps an old rule index to its new index; what rules that are gone
        wrote is marked stale at the group's next evaluation.
        """
        for fi in range(old_count):
            written = old._previous.get(fi, set())
            if fi in moved:
                self._previous[moved[fi]] = written
            else:
                self._stale |= written
        self._stale |= old._stale

    def flush_stale(self, now_ms: int) -> None:
        """Mark stale what rules removed by a reload had written."""
        for labels in self._stale:
            with contextlib.suppress(Exception):
                self.store.add(labels, now_ms, STALE_NAN)
        self._stale = set()


def written_metric_names(groups: Iterable[Any]) -> set[str]:
    """Metric names the rules write: recorded names, and ALERTS/ALERTS_FOR_STATE if any
    alerting rule exists. A store that keeps only the series rules read must keep these."""
    names: set[str] = set()
    for g in groups:
        for r in g.rules:
            if hasattr(r, "annotations"):
                names |= WRITTEN_META_NAMES
            else:
                names.add(r.name)
    return names
