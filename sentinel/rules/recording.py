"""Recording rules, as Prometheus 2.42's rules/recording.go.

A recording rule evaluates its expression at the group's evaluation time
and returns the result renamed to `record`, with the rule's `labels` set
(an empty value removes the label). The rule manager writes the samples
back to the store (see `writeback`), so the rules after it in the group,
and other groups, read them. Like an alerting rule, an evaluation error is
data (health "err", last error), never a crash of the loop.
"""

from __future__ import annotations

from typing import Any

from sentinel.model import METRIC_NAME, Labels
from sentinel.rules.alerting import QueryFunc, RuleHealth, TemplateContext
from sentinel.rules.loader import RecordingRule


class RecordingRuleState:
    """A recording rule between evaluations: health and the samples of the last one."""

    def __init__(self, rule: RecordingRule, group: str) -> None:
        self.rule = rule
        self.group = group
        self.health = RuleHealth.UNKNOWN
        self.last_error = ""
        self.last_eval_ms: int | None = None
        self.active: dict[Labels, Any] = {}  # a recording rule has no alerts
        self.samples: list[tuple[Labels, float]] = []

    def eval(self, query: QueryFunc, now_ms: int, ctx: TemplateContext, limit: int = 0
             ) -> list[Any]:
        """Evaluate at `now_ms`; the result is left in `samples` (no alerts are returned)."""
        del ctx  # recording rules expand no templates
        try:
            self.samples = self._results(query, now_ms, limit)
        except Exception as e:  # any failure is the rule's health, never a crash of the loop
            self.samples = []
            self.health = RuleHealth.ERR
            self.last_error = str(e) or type(e).__name__
            return []
        self.health = RuleHealth.OK
        self.last_error = ""
        self.last_eval_ms = now_ms
        return []

    def _results(self, query: QueryFunc, now_ms: int, limit: int) -> list[tuple[Labels, float]]:
        rule = self.rule
        res = query(rule.query if rule.query is not None else rule.expr, now_ms)
        pairs = [((), float(res))] if isinstance(res, int | float) else [
            (s.labels, s.value) for s in res]
        out: dict[Labels, float] = {}
        for labels, value in pairs:
            d = dict(labels)
            d[METRIC_NAME] = rule.name
            for k, v in rule.labels:
                if v:
                    d[k] = v
                else:
                    d.pop(k, None)
            key: Labels = tuple(sorted(d.items()))
            if key in out:
                raise ValueError("vector contains metrics with the same labelset "
                                 "after applying rule labels")
            out[key] = value
        if limit and len(out) > limit:
            raise ValueError(f"exceeded limit of {limit} with {len(out)} series")
        return list(out.items())

    def active_alerts(self) -> list[Any]:
        """None: a recording rule raises no alerts."""
        return []

    def restore(self, alert: Any) -> bool:
        """Nothing to restore for a recording rule."""
        del alert
        return False

    def adopt(self, old: Any) -> None:
        """Take over the health of the same rule before a reload."""
        self.health, self.last_error, self.last_eval_ms = (
            old.health, old.last_error, old.last_eval_ms)
