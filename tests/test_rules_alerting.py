"""The alert state machine and RuleManager, driven by a hand-written fake engine."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sentinel.model import Alert, AlertState, InstantSample, Vector, labels_of
from sentinel.rules.alerting import RuleHealth
from sentinel.rules.loader import RuleGroup, make_rule
from sentinel.rules.manager import RuleManager

S = 1000


class FakeEngine:
    """Answers every query with the canned result for its time (or raises)."""

    def __init__(self) -> None:
        self.results: dict[int, Vector | float | Exception] = {}
        self.default: Vector | float | Exception = []

    def query(self, expr: Any, at_ms: int) -> Vector | float:
        res = self.results.get(at_ms, self.default)
        if isinstance(res, Exception):
            raise res
        return res


def sample(value: float, **labels: str) -> InstantSample:
    return InstantSample(labels_of({"__name__": "m", **labels}), value)


def manager(engine: FakeEngine, for_ms: int = 0, keep_ms: int = 0, limit: int = 0,
            labels: dict[str, str] | None = None, name: str = "A") -> RuleManager:
    rule = make_rule(name, "m > 0", for_ms=for_ms, keep_firing_for_ms=keep_ms,
                     labels=labels if labels is not None else {"severity": "page"},
                     annotations={"summary": "{{ $labels.target }} at {{ $value }}"})
    return RuleManager([RuleGroup("g", (rule,), 15 * S, limit)], engine)


def states(alerts: list[Alert]) -> list[tuple[str, AlertState]]:
    return [(dict(a.labels).get("target", ""), a.state) for a in alerts]


def test_pending_then_firing_when_for_elapsed_exactly() -> None:
    eng = FakeEngine()
    eng.default = [sample(0.9, target="a")]
    mgr = manager(eng, for_ms=60 * S)
    first = mgr.evaluate_group("g", 0)
    assert states(first) == [("a", AlertState.PENDING)]
    assert first[0].active_at_ms == 0 and first[0].fired_at_ms is None
    assert states(mgr.evaluate_group("g", 59 * S)) == [("a", AlertState.PENDING)]
    fired = mgr.evaluate_group("g", 60 * S)  # now - active_at >= for
    assert states(fired) == [("a", AlertState.FIRING)]
    assert fired[0].fired_at_ms == 60 * S and fired[0].active_at_ms == 0


def test_for_zero_fires_in_the_first_evaluation() -> None:
    eng = FakeEngine()
    eng.default = [sample(1, target="a")]
    assert states(manager(eng).evaluate_group("g", 0)) == [("a", AlertState.FIRING)]


def test_alert_labels_annotations_and_value_refresh() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(0.5, target="a")], 15 * S: [sample(0.75, target="a")]}
    mgr = manager(eng, for_ms=60 * S)
    a0 = mgr.evaluate_group("g", 0)[0]
    assert a0.labels == (("alertname", "A"), ("severity", "page"), ("target", "a"))
    assert dict(a0.annotations) == {"summary": "a at 0.5"}
    assert a0.group == "g" and a0.rule == "A" and a0.last_eval_ms == 0
    a1 = mgr.evaluate_group("g", 15 * S)[0]
    assert a1.value == 0.75 and dict(a1.annotations) == {"summary": "a at 0.75"}
    assert a1.active_at_ms == 0 and a1.last_eval_ms == 15 * S


def test_resolved_alert_is_reported_until_acknowledged_then_forgotten() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(1, target="a")]}
    mgr = manager(eng)
    mgr.evaluate_group("g", 0)
    resolved = mgr.evaluate_group("g", 15 * S)
    assert states(resolved) == [("a", AlertState.INACTIVE)]
    assert resolved[0].resolved_at_ms == 15 * S and resolved[0].fired_at_ms == 0
    # The incident stage did not commit it (database down): reported again, unchanged.
    assert mgr.evaluate_group("g", 30 * S) == resolved
    assert mgr.active_alerts() == []
    mgr.acknowledge(resolved)
    assert mgr.evaluate_group("g", 45 * S) == []


def test_unacknowledged_resolution_and_a_new_occurrence_are_both_reported() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(1, target="a")], 30 * S: [sample(2, target="a")]}
    mgr = manager(eng)
    mgr.evaluate_group("g", 0)
    mgr.evaluate_group("g", 15 * S)  # resolved, never acknowledged
    both = mgr.evaluate_group("g", 30 * S)
    assert states(both) == [("a", AlertState.FIRING), ("a", AlertState.INACTIVE)]
    assert both[1].resolved_at_ms == 15 * S and both[0].fired_at_ms == 30 * S
    mgr.acknowledge(both)
    assert states(mgr.evaluate_group("g", 45 * S)) == [("a", AlertState.INACTIVE)]


def test_pending_alert_that_disappears_is_dropped_silently() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(1, target="a")]}
    mgr = manager(eng, for_ms=60 * S)
    mgr.evaluate_group("g", 0)
    assert mgr.evaluate_group("g", 15 * S) == []


def test_returning_condition_starts_a_new_pending_period() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(1, target="a")], 30 * S: [sample(1, target="a")]}
    mgr = manager(eng, for_ms=60 * S)
    mgr.evaluate_group("g", 0)
    mgr.evaluate_group("g", 15 * S)
    again = mgr.evaluate_group("g", 30 * S)
    assert again[0].state == AlertState.PENDING and again[0].active_at_ms == 30 * S


def test_keep_firing_for_holds_a_firing_alert() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(1, target="a")], 45 * S: [sample(2, target="a")]}
    mgr = manager(eng, keep_ms=30 * S)
    mgr.evaluate_group("g", 0)
    held = mgr.evaluate_group("g", 15 * S)
    assert states(held) == [("a", AlertState.FIRING)]
    assert held[0].keep_firing_since_ms == 15 * S
    back = mgr.evaluate_group("g", 45 * S)  # condition true again: the hold resets
    assert back[0].keep_firing_since_ms is None and back[0].value == 2
    assert states(mgr.evaluate_group("g", 60 * S)) == [("a", AlertState.FIRING)]
    assert states(mgr.evaluate_group("g", 75 * S)) == [("a", AlertState.FIRING)]
    gone = mgr.evaluate_group("g", 90 * S)  # 30s since 60s: resolves
    assert states(gone) == [("a", AlertState.INACTIVE)]


def test_query_error_is_health_not_an_exception_and_alerts_stay() -> None:
    eng = FakeEngine()
    eng.results = {0: [sample(1, target="a")], 15 * S: RuntimeError("boom")}
    mgr = manager(eng)
    mgr.evaluate_group("g", 0)
    assert mgr.rule_health()[0].health == RuleHealth.OK
    kept = mgr.evaluate_group("g", 15 * S)
    assert states(kept) == [("a", AlertState.FIRING)]
    status = mgr.rule_health()[0]
    assert status.health == RuleHealth.ERR and status.last_error == "boom"
    assert status.firing == 1 and status.last_eval_ms == 0


def test_unknown_health_before_first_evaluation() -> None:
    status = manager(FakeEngine()).rule_health()[0]
    assert (status.group, status.rule, status.health) == ("g", "A", RuleHealth.UNKNOWN)


def test_duplicate_labelset_after_templating_is_an_error() -> None:
    eng = FakeEngine()
    eng.default = [sample(1, target="a", pod="1"), sample(2, target="a", pod="2")]
    mgr = manager(eng, labels={"pod": ""})  # templating the label away merges the two
    assert mgr.evaluate_group("g", 0) == []
    assert "same labelset" in mgr.rule_health()[0].last_error


def test_label_templates_use_the_sample() -> None:
    eng = FakeEngine()
    eng.default = [sample(0.95, target="a")]
    mgr = manager(eng, labels={"severity": "{{ if gt $value 0.9 }}page{{ else }}ticket{{ end }}"})
    assert dict(mgr.evaluate_group("g", 0)[0].labels)["severity"] == "page"


def test_scalar_result_is_one_unlabelled_alert() -> None:
    eng = FakeEngine()
    eng.default = 3.0
    alerts = manager(eng).evaluate_group("g", 0)
    assert alerts[0].labels == (("alertname", "A"), ("severity", "page"))
    assert alerts[0].value == 3.0


def test_limit_exceeded_drops_alerts_and_errs() -> None:
    eng = FakeEngine()
    eng.default = [sample(1, target="a"), sample(1, target="b")]
    mgr = manager(eng, limit=1)
    alerts = mgr.evaluate_group("g", 0)
    assert mgr.active_alerts() == []
    assert all(a.state == AlertState.INACTIVE for a in alerts)
    assert mgr.rule_health()[0].last_error == "exceeded limit of 1 with 2 alerts"


def test_restore_continues_for_and_keeps_firing_without_new_transition() -> None:
    eng = FakeEngine()
    eng.default = [sample(1, target="a"), sample(1, target="b")]
    before = manager(eng, for_ms=60 * S)
    before.evaluate_group("g", 0)
    before.evaluate_group("g", 60 * S)
    eng.default = [sample(1, target="a"), sample(1, target="b"), sample(1, target="c")]
    before.evaluate_group("g", 70 * S)
    saved = before.active_alerts()  # a, b firing since 60s; c pending since 70s
    after = manager(eng, for_ms=60 * S)
    assert after.restore(saved) == 3
    assert after.restore([replace(saved[0], group="other")]) == 0
    alerts = {dict(a.labels)["target"]: a for a in after.evaluate_group("g", 100 * S)}
    assert alerts["a"].state == AlertState.FIRING and alerts["a"].fired_at_ms == 60 * S
    assert alerts["c"].state == AlertState.PENDING and alerts["c"].active_at_ms == 70 * S
    assert after.evaluate_group("g", 130 * S)[2].state == AlertState.FIRING


def _group(expr: str = "m > 0", labels: dict[str, str] | None = None, name: str = "g",
           interval_ms: int | None = 15 * S) -> RuleGroup:
    rule = make_rule("A", expr, labels=labels or {"severity": "page"},
                     annotations={"summary": "changed"})
    return RuleGroup(name, (rule,), interval_ms)


def test_reload_keeps_state_of_unchanged_rules_only() -> None:
    eng = FakeEngine()
    eng.default = [sample(1, target="a")]
    mgr = RuleManager([_group()], eng, default_interval_ms=30 * S)
    mgr.evaluate_group("g", 0)
    mgr.reload([_group(), _group("m > 1", name="h", interval_ms=None)])
    assert mgr.groups == {"g": 15 * S, "h": 30 * S}
    kept = mgr.active_alerts()
    assert len(kept) == 1 and kept[0].fired_at_ms == 0
    mgr.reload([_group("m > 2")])  # expression changed: state starts over
    assert mgr.active_alerts() == []
    with pytest.raises(ValueError, match="duplicate"):
        mgr.reload([_group(), _group()])


def test_unknown_group_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        manager(FakeEngine()).evaluate_group("nope", 0)


def test_one_bad_rule_does_not_stop_the_group() -> None:
    class PickyEngine(FakeEngine):
        def query(self, expr: Any, at_ms: int) -> Vector | float:
            if "bad" in str(expr):
                raise ValueError("bad rule")
            return [sample(1, target="a")]

    good = make_rule("Good", "m > 0")
    bad = make_rule("Bad", 'm{x="bad"} > 0')
    mgr = RuleManager([RuleGroup("g", (bad, good))], PickyEngine())
    alerts = mgr.evaluate_group("g", 0)
    assert [a.rule for a in alerts] == ["Good"]
    health = {s.rule: s.health for s in mgr.rule_health()}
    assert health == {"Bad": RuleHealth.ERR, "Good": RuleHealth.OK}
    assert mgr.groups == {"g": 60 * S}
