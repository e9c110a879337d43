"""Recording rules and write-back: bounds, staleness, query_offset, group labels, loader checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.model import STALE_NAN, AlertState
from sentinel.promql import Engine
from sentinel.rules.loader import RuleFileError, load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.rules.writeback import written_metric_names
from sentinel.store.memory import MemoryStore

RULES = """\
groups:
  - name: g
    query_offset: 1m
    labels: {team: sre, tier: x}
    rules:
      - record: job:up:sum
        expr: sum by (job) (up)
        labels: {tier: recorded}
      - alert: JobDown
        expr: job:up:sum == 0
        labels: {severity: page}
"""


def _setup(tmp_path: Path, text: str = RULES, max_series: int = 1000
           ) -> tuple[MemoryStore, Engine, RuleManager]:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    store = MemoryStore(retention_ms=3_600_000, max_series=max_series)
    engine = Engine(store)
    return store, engine, RuleManager(load_rule_files([str(path)]), engine, store=store)


def test_group_labels_query_offset_and_staleness(tmp_path: Path) -> None:
    store, engine, manager = _setup(tmp_path)
    for t in range(0, 600_001, 15_000):
        store.add((("__name__", "up"), ("job", "a")), t, 0.0 if t >= 300_000 else 1.0)
    manager.evaluate_group("g", 360_000)
    (s,) = engine.query("job:up:sum", 360_000)
    # The rule's own label wins over the group's; the sample sits at the offset query time.
    assert dict(s.labels) == {"__name__": "job:up:sum", "job": "a", "team": "sre",
                              "tier": "recorded"}
    assert s.value == 0.0 and engine.query("timestamp(job:up:sum)", 360_000)[0].value == 300
    [alert] = manager.active_alerts()
    assert alert.state == AlertState.FIRING
    assert dict(alert.labels)["team"] == "sre" and dict(alert.labels)["tier"] == "x"
    # The job's series goes away: the recorded series is marked stale at the next evaluation.
    store.add((("__name__", "up"), ("job", "a")), 615_000, STALE_NAN)
    for t in range(615_000, 1_000_000, 15_000):
        store.add((("__name__", "up"), ("job", "b")), t, 1.0)
    for t in (600_000, 660_000):
        manager.evaluate_group("g", t)
    assert [dict(x.labels)["job"] for x in engine.query("job:up:sum", 660_000)] == ["a"]
    manager.evaluate_group("g", 720_000)  # queries at 660s: job a is gone
    # Without the marker, a's sample written at 600s would still be within the lookback.
    assert [dict(x.labels)["job"] for x in engine.query("job:up:sum", 720_000)] == ["b"]
    assert len(engine.query('ALERTS{alertname="JobDown"}', 720_000)) == 1  # still, at 660s
    manager.evaluate_group("g", 780_000)  # queries at 720s: the recorded series is stale
    assert engine.query('ALERTS{alertname="JobDown"}', 780_000) == []


def test_recorded_series_count_toward_the_store_limit(tmp_path: Path) -> None:
    store, engine, manager = _setup(tmp_path, max_series=3)
    for job in ("a", "b", "c"):
        store.add((("__name__", "up"), ("job", job)), 0, 1.0)
    manager.evaluate_group("g", 60_000)
    [status] = [r for r in manager.rule_health() if r.rule == "job:up:sum"]
    assert status.health == "err" and "series limit" in status.last_error
    assert store.series_count() == 3


def test_written_names_for_a_store_that_keeps_only_read_series(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    names = written_metric_names(load_rule_files([str(path)]))
    assert names == {"job:up:sum", "ALERTS", "ALERTS_FOR_STATE"}


@pytest.mark.parametrize(("rule", "message"), [
    ("{record: 'a:b', expr: up, for: 1m}", "invalid field 'for' in recording rule"),
    ("{record: 'a:b', expr: up, annotations: {a: b}}", "invalid field 'annotations'"),
    ("{record: 'a-b', expr: up}", "invalid recording rule name: a-b"),
    ("{record: 'a:b', alert: X, expr: up}", "only one of 'record' and 'alert'"),
    ("{record: 'a:b', expr: 'limitk(1, up)'}", "limitk() is experimental"),
])
def test_bad_recording_rules_are_reported_with_position(tmp_path: Path, rule: str,
                                                        message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"groups:\n  - name: g\n    rules:\n      - {rule}\n")
    with pytest.raises(RuleFileError) as err:
        load_rule_files([str(path)])
    assert f"{path}:4:" in str(err.value) and message in str(err.value)


def test_reload_keeps_what_kept_rules_wrote_and_marks_removed_rules_stale(
        tmp_path: Path) -> None:
    before = ("groups:\n  - name: g\n    rules:\n"
              "      - {record: 'job:up:count', expr: count(up)}\n"
              "      - {record: 'job:up:sum', expr: sum by (job) (up)}\n")
    store, engine, manager = _setup(tmp_path, before)
    for t in range(0, 260_001, 15_000):
        store.add((("__name__", "up"), ("job", "a")), t, 1.0)
    manager.evaluate_group("g", 240_000)
    after = tmp_path / "after.yaml"
    after.write_text("groups:\n  - name: g\n    rules:\n"
                     "      - {record: 'job:up:sum', expr: sum by (job) (up)}\n")
    manager.reload(load_rule_files([str(after)]))
    manager.evaluate_group("g", 255_000)
    # The removed rule's series is marked stale (its 240s sample is within the lookback).
    assert engine.query("job:up:count", 255_000) == []
    assert len(engine.query("job:up:sum", 255_000)) == 1
    store.add((("__name__", "up"), ("job", "a")), 270_000, STALE_NAN)
    manager.evaluate_group("g", 285_000)
    # The kept rule moved from index 1 to 0 and still marks what it wrote before.
    assert engine.query("job:up:sum", 285_000) == []
