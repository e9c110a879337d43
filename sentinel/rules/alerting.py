"""One alerting rule's state machine, as Prometheus 2.42's rules/alerting.go.

Each evaluation at `now_ms` runs the query; every result sample is an alert
keyed by its labels (the sample's labels without `__name__`, the rule's
templated labels, `alertname`):

    absent ──► PENDING (active_at) ──for elapsed──► FIRING (fired_at)
       ▲          │ gone: dropped silently               │ gone
       └──────────┴───────────── INACTIVE (resolved_at) ◄┘ (after keep_firing_for)

`now - active_at >= for` fires; with `for: 0` an alert fires in the
evaluation that creates it. Values and annotations refresh every
evaluation; labels are the identity.

A resolved alert is reported by every evaluation until the incident stage
acknowledges it (`acknowledge`, after its transaction committed): a
resolution that meets a database outage is retried, never forgotten
(Prometheus keeps resolved alerts 15m to re-send them to Alertmanager; here
the incident stage's commit is the delivery). A firing alert needs no such
queue: it is reported every evaluation while it fires.

After a restart, a restored alert is not evaluated as absent until its data
source has answered (`ready(alert, now_ms)`, e.g. its target was scraped
once since start): an evaluation that runs before the first scrape, or while
the target stays unreachable, must not resolve it (issue 10).

An evaluation error is data: health "err" and the message, the alerts left
as they were.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sentinel.model import METRIC_NAME, Alert, AlertState, InstantSample, Labels, Vector
from sentinel.rules.loader import AlertingRule
from sentinel.rules.template import TemplateData, expand_alert_template

QueryFunc = Callable[[Any, int], "Vector | float"]
# Whether absence of a restored alert from the results may count yet (its data answered).
ReadyFunc = Callable[[Alert, int], bool]


class RuleHealth(enum.StrEnum):
    """Health of a rule after its last evaluation, as Prometheus reports it."""

    UNKNOWN = "unknown"
    OK = "ok"
    ERR = "err"


@dataclass(frozen=True, slots=True)
class TemplateContext:
    """What templates see besides the sample: the manager's external labels and URL."""

    external_labels: Mapping[str, str]
    external_url: str = ""


class RuleEvalError(Exception):
    """An evaluation failed; recorded as the rule's last error, never raised to the loop."""


class AlertingRuleState:
    """The alerts of one rule between evaluations."""

    def __init__(self, rule: AlertingRule, group: str) -> None:
        self.rule = rule
        self.group = group
        self.health = RuleHealth.UNKNOWN
        self.last_error = ""
        self.last_eval_ms: int | None = None
        self.active: dict[Labels, Alert] = {}
        # Resolved alerts the incident stage has not acknowledged: (labels, resolved_at) → alert.
        self.unacked: dict[tuple[Labels, int], Alert] = {}
        # Restored alerts whose absence does not count until `ready` says their data answered.
        self.held: set[Labels] = set()

    # -- evaluation -----------------------------------------------------------
    def eval(self, query: QueryFunc, now_ms: int, ctx: TemplateContext, limit: int = 0,
             ready: ReadyFunc | None = None) -> list[Alert]:
        """Evaluate at `now_ms`: active alerts plus the unacknowledged resolved (INACTIVE)."""
        try:
            samples = self._results(query, now_ms, ctx)
        except Exception as e:  # any failure is the rule's health, never a crash of the loop
            self.health = RuleHealth.ERR
            self.last_error = str(e) or type(e).__name__
            return [*self.active_alerts(), *self.unacked.values()]
        resolved = self._merge(samples, now_ms, ready)
        if limit and len(self.active) > limit:
            # As Prometheus: over the limit, the rule drops all its alerts and errs.
            n = len(self.active)
            resolved += [self._resolve(a, now_ms) for a in self.active.values()
                         if a.state == AlertState.FIRING]
            self.active = {}
            self.health = RuleHealth.ERR
            self.last_error = f"exceeded limit of {limit} with {n} alerts"
        else:
            self.health = RuleHealth.OK
            self.last_error = ""
        self.last_eval_ms = now_ms
        for a in resolved:
            self.unacked[(a.labels, a.resolved_at_ms or now_ms)] = a
        return sorted([*self.active.values(), *self.unacked.values()],
                      key=lambda a: (a.labels, a.resolved_at_ms or 0))

    def acknowledge(self, resolved: list[Alert]) -> None:
        """The incident stage committed these resolutions: stop reporting them."""
        for a in resolved:
            if a.resolved_at_ms is not None:
                self.unacked.pop((a.labels, a.resolved_at_ms), None)

    def _results(self, query: QueryFunc, now_ms: int, ctx: TemplateContext
                 ) -> dict[Labels, tuple[Labels, float]]:
        """Alert labels → (annotations, value) for each result sample."""
        res = query(self.rule.query if self.rule.query is not None else self.rule.expr, now_ms)
        if isinstance(res, int | float):
            res = [InstantSample((), float(res))]  # a scalar result is one unlabelled sample
        out: dict[Labels, tuple[Labels, float]] = {}
        for sample in res:
            data = TemplateData(dict(sample.labels), sample.value, ctx.external_labels,
                                ctx.external_url, lambda q: query(q, now_ms))
            labels = {k: v for k, v in sample.labels if k != METRIC_NAME}
            for name, tmpl in self.rule.label_templates:
                labels[name] = expand_alert_template(tmpl, data)
            labels["alertname"] = self.rule.name
            key: Labels = tuple(sorted((k, v) for k, v in labels.items() if v != ""))
            if key in out:
                raise RuleEvalError(
                    "vector contains metrics with the same labelset after applying alert labels"
                )
            annotations = tuple(
                (name, expand_alert_template(tmpl, data))
                for name, tmpl in self.rule.annotation_templates
            )
            out[key] = (annotations, sample.value)
        return out

    def _merge(self, samples: dict[Labels, tuple[Labels, float]], now_ms: int,
               ready: ReadyFunc | None = None) -> list[Alert]:
        """Apply one evaluation's results; returns the alerts that resolved."""
        rule = self.rule
        for key, (anns, value) in samples.items():
            self.held.discard(key)
            old = self.active.get(key)
            if old is not None:
                self.active[key] = replace(old, value=value, annotations=anns,
                                           last_eval_ms=now_ms, keep_firing_since_ms=None)
            else:
                self.active[key] = Alert(self.group, rule.name, key, anns,
                                         AlertState.PENDING, value, now_ms, now_ms)
        resolved: list[Alert] = []
        for key, a in list(self.active.items()):
            if key not in samples:
                if key in self.held:
                    if ready is not None and not ready(a, now_ms):
                        continue  # its data has not answered since the restart
                    self.held.discard(key)
                if a.state == AlertState.PENDING:
                    del self.active[key]
                    continue
                since = a.keep_firing_since_ms if a.keep_firing_since_ms is not None else now_ms
                if now_ms - since < rule.keep_firing_for_ms:
                    self.active[key] = replace(a, keep_firing_since_ms=since, last_eval_ms=now_ms)
                    continue
                del self.active[key]
                resolved.append(self._resolve(a, now_ms))
                continue
            if a.state == AlertState.PENDING and now_ms - a.active_at_ms >= rule.for_ms:
                self.active[key] = replace(a, state=AlertState.FIRING, fired_at_ms=now_ms)
        return resolved

    @staticmethod
    def _resolve(a: Alert, now_ms: int) -> Alert:
        return replace(a, state=AlertState.INACTIVE, resolved_at_ms=now_ms, last_eval_ms=now_ms)

    # -- state --------------------------------------------------------------------
    def active_alerts(self) -> list[Alert]:
        """Pending and firing alerts, by labels."""
        return sorted(self.active.values(), key=lambda a: a.labels)

    def restore(self, alert: Alert) -> bool:
        """Put a persisted PENDING/FIRING alert back; `for` continues from its active_at."""
        if alert.state not in (AlertState.PENDING, AlertState.FIRING):
            return False
        self.active[alert.labels] = replace(alert, group=self.group, rule=self.rule.name,
                                            resolved_at_ms=None)
        self.held.add(alert.labels)
        return True

    def adopt(self, old: AlertingRuleState) -> None:
        """Take over the alerts and health of the same rule before a reload."""
        self.active = {k: replace(a, group=self.group) for k, a in old.active.items()}
        self.unacked = {k: replace(a, group=self.group) for k, a in old.unacked.items()}
        self.held = set(old.held)
        self.health, self.last_error, self.last_eval_ms = (
            old.health, old.last_error, old.last_eval_ms)
