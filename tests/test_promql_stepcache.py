"""Subquery steps kept across queries over sealed data (sentinel/promql/stepcache.py).

`sentinel rules test` evaluates every rule every evaluation_interval, and a
subquery's steps are aligned to absolute time, so successive evaluations ask
for the same steps again (the opencost pack's `[7d:30m]` subqueries: 337 steps
each, every minute for 15 hours). Kept steps must give exactly the values
evaluated ones would, and only steps over final data may be kept.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sentinel.model import labels_of
from sentinel.promql import Engine
from sentinel.promql.compile import compile_expr
from sentinel.promql.stepcache import StepCache, reads_only_up_to_its_time
from sentinel.rules import ruletest
from sentinel.store.memory import Matcher, MemoryStore

M = 60_000
EXPR = "avg_over_time(sum by (job) (x)[1h:5m]) + max_over_time(rate(x[10m])[30m:])"


class CountingStore:
    """A MemoryStore that counts the reads the engine makes."""

    def __init__(self, store: MemoryStore) -> None:
        self.store, self.reads = store, 0

    def select(self, matchers: Sequence[Matcher], start_ms: int, end_ms: int) -> Any:
        self.reads += 1
        return self.store.select(matchers, start_ms, end_ms)

    def select_newest(self, matchers: Sequence[Matcher], start_ms: int, end_ms: int) -> Any:
        self.reads += 1
        return self.store.select_newest(matchers, start_ms, end_ms)


def _store(minutes: int) -> MemoryStore:
    store = MemoryStore(retention_ms=10**12)
    for i in range(minutes + 1):
        for job, scale in (("a", 1.0), ("b", 2.5)):
            store.add(labels_of({"__name__": "x", "job": job}), i * M, i * i * scale)
    return store


def _values(result: Any) -> list[tuple[Any, float]]:
    return sorted((s.labels, s.value) for s in result)


def test_kept_steps_give_exactly_the_evaluated_values_and_spare_the_reads() -> None:
    plain = Engine(_store(180))
    counted = CountingStore(_store(180))
    cache = StepCache()
    cached = Engine(counted, step_cache=cache)  # type: ignore[arg-type]
    reads = []
    for minute in range(60, 181):
        cache.seal(minute * M)  # as `sentinel rules test`: older data is final
        before = counted.reads
        got, want = cached.query(EXPR, minute * M), plain.query(EXPR, minute * M)
        assert _values(got) == _values(want), minute  # floats compared exactly
        reads.append(counted.reads - before)
    # Evaluated, the two subqueries read the store 12 + 30 times a query (left-open
    # windows); kept, only the steps not yet sealed (one or two each).
    assert reads[0] == 12 + 30
    assert max(reads[1:]) <= 4, reads


def test_a_step_at_or_after_the_seal_is_evaluated_again() -> None:
    store = _store(30)
    cache = StepCache()
    engine = Engine(store, step_cache=cache)
    cache.seal(30 * M)
    expr = "max_over_time(sum(x)[10m:1m])"
    first = engine.query(expr, 31 * M)
    assert isinstance(first, list) and first[0].value == 30 * 30 * 3.5
    # The step at 31m is at the seal or after it: a sample may still land there.
    for job in ("a", "b"):
        store.add(labels_of({"__name__": "x", "job": job}), 31 * M, 10_000.0)
    again = engine.query(expr, 31 * M)
    assert isinstance(again, list) and again[0].value == 20_000.0


def test_no_cache_without_a_seal_and_none_for_what_reads_past_its_step() -> None:
    assert StepCache().steps_of(compile_expr("sum(x)")) is None  # nothing final yet
    cache = StepCache()
    cache.seal(M)
    assert cache.steps_of(compile_expr("sum(x)")) == {}
    assert not cache.final(M) and cache.final(M - 1)
    for text in ("x @ 100", "x offset -1m", "rate(x[5m] @ end())",
                 "sum_over_time(x[5m:1m] @ start())", "max_over_time(x[5m:1m] offset -1m)",
                 "x + on() (y offset -5m)"):
        node = compile_expr(text)
        assert not reads_only_up_to_its_time(node), text
        assert cache.steps_of(node) is None, text
    for text in ("x offset 5m", "rate(x[5m])", "sum_over_time(x[5m:1m] offset 1m)", "time() - x"):
        assert reads_only_up_to_its_time(compile_expr(text)), text


QUERY_OFFSET_RULES = """\
groups:
  - name: rec
    query_offset: 2m
    rules:
      - record: rec
        expr: x
  - name: alerts
    rules:
      - alert: Sum
        expr: sum_over_time(rec[10m:1m]) > 0
"""

QUERY_OFFSET_TEST = """\
rule_files: [rules.yaml]
tests:
  - interval: 1m
    input_series:
      - {series: x, values: '1+1x20'}
    promql_expr_test:
      - expr: sum_over_time(rec[10m:1m])
        eval_time: 15m
        exp_samples: [{labels: '{}', value: 112}]
"""


@pytest.mark.parametrize("kept", [True, False], ids=["steps-kept", "steps-evaluated"])
def test_rules_test_keeps_only_steps_older_than_a_query_offsets_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool) -> None:
    """A group with query_offset 2m records at the evaluation time - 2m: a step the alert's
    subquery read a minute ago may get its sample only now. By hand: rec at t = x(t - 0)
    written 2 m late, so rec holds 0m..13m (1..14) at 15m; steps 6m..15m (the window is
    left-open) read 7..14, 14, 14 = 112."""
    if not kept:  # the reference: every step evaluated
        monkeypatch.setattr(ruletest, "StepCache", _NeverSealed)
    (tmp_path / "rules.yaml").write_text(QUERY_OFFSET_RULES)
    (tmp_path / "test.yaml").write_text(QUERY_OFFSET_TEST)
    out = io.StringIO()
    assert ruletest.run_rule_tests([str(tmp_path / "test.yaml")], out) == 0, out.getvalue()


class _NeverSealed(StepCache):
    def seal(self, before_ms: int) -> None:
        pass


def test_the_budget_is_charged_for_kept_steps_as_for_evaluated_ones() -> None:
    cache = StepCache()
    cache.seal(10**12)
    expr = "count_over_time(vector(1)[2h:1m])"  # 120 steps of one sample: 240 points
    assert Engine(MemoryStore(), max_points=240, step_cache=cache).query(expr, 7_200_000)
    kept = Engine(MemoryStore(), max_points=239, step_cache=cache)
    with pytest.raises(Exception, match="max_points"):
        kept.query(expr, 7_200_000)
    assert len(cache.steps_of(compile_expr("vector(1)")) or {}) == 120
