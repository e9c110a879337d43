"""The embedded series store: refs, appends, retention, selection by matchers."""

from __future__ import annotations

import pytest

from sentinel.model import STALE_NAN, is_stale, labels_of
from sentinel.store import Matcher, MemoryStore, StoreFullError


def _labels(name: str, **kv: str):
    return labels_of({"__name__": name, **kv})


def test_select_by_all_four_matchers():
    store = MemoryStore()
    for target in ("a", "b", "ab"):
        store.add(_labels("up", target=target), 1000, 1.0)
    def names(*ms):
        return sorted(dict(s.labels)["target"] for s in store.select(
            [Matcher("__name__", "=", "up"), *ms], 0, 2000))
    assert names(Matcher("target", "=", "a")) == ["a"]
    assert names(Matcher("target", "!=", "a")) == ["ab", "b"]
    assert names(Matcher("target", "=~", "a.*")) == ["a", "ab"]
    assert names(Matcher("target", "!~", "a|b")) == ["ab"]
    # Anchored on both ends, and "$" must not match before a trailing newline.
    assert names(Matcher("target", "=~", "b")) == ["b"]
    store.add(_labels("up", target="c\n"), 1000, 1.0)
    assert names(Matcher("target", "=~", "c")) == []


def test_range_is_inclusive_and_out_of_order_samples_are_dropped():
    store = MemoryStore()
    ref = store.ref(_labels("x"))
    for t in (1000, 2000, 3000):
        assert store.append(ref, t, t / 1000)
    store.append(ref, 1500, 99.0)  # older than the newest: dropped
    store.append(ref, 3000, 3.5)   # same timestamp: replaces
    (series,) = store.select([Matcher("__name__", "=", "x")], 2000, 3000)
    assert series.ts == [2000, 3000] and series.vs == [2.0, 3.5]


def test_retention_bounds_memory_and_gc_drops_empty_series():
    store = MemoryStore(retention_ms=10_000)
    ref = store.ref(_labels("x"))
    for t in range(0, 100_000, 1000):
        store.append(ref, t, 1.0)
    assert store.sample_count() <= 10 + 10 * 1.25 + 1
    assert store.gc(200_000) == 1
    assert store.series_count() == 0
    assert store.append(ref, 200_000, 1.0) is False  # the ref died with its series
    store.add(_labels("x"), 200_000, 1.0)
    assert store.series_count() == 1


def test_gc_lets_readers_in_between_chunks_of_series():
    # At fleet size gc walks ~500,000 series; while it held the series table's lock
    # for the whole walk every selector of every rule group waited for it.
    store = MemoryStore(retention_ms=10_000)
    for i in range(10_000):
        store.add(_labels("x", i=str(i)), 0 if i % 2 else 50_000, 1.0)
    inner, holds, seen, reading = store._lock, [], [], []

    class Counting:
        def __enter__(self):
            inner.acquire()
            if not reading:
                holds.append(1)

        def __exit__(self, *exc):
            inner.release()
            if not reading:  # a reader between two holds sees a consistent table
                reading.append(1)
                seen.append(len(store.select([Matcher("__name__", "=", "x")], 0, 10**6)))
                reading.clear()

    store._lock = Counting()
    assert store.gc(55_000) == 5_000
    assert len(holds) >= 3  # the list, more than one chunk, the label pairs
    assert seen[0] == 10_000 and seen[-1] == 5_000
    store._lock = inner
    assert store.series_count() == 5_000


def test_series_limit_and_stale_markers():
    store = MemoryStore(max_series=1)
    store.add(_labels("x"), 1, STALE_NAN)
    (s,) = store.select([Matcher("__name__", "=", "x")], 0, 10)
    assert is_stale(s.vs[0]) and not is_stale(float("nan"))
    with pytest.raises(StoreFullError):
        store.ref(_labels("y"))


def test_newest_sums_answers_as_the_sum_by_query_does():
    # The probes' heartbeat reads `sum by (target) (...)` through this shortcut:
    # it must agree with the engine on stale markers, old samples, NaNs and
    # several series per target.
    import math
    import random

    from sentinel.model import label_value
    from sentinel.promql import Engine

    rng = random.Random(7)
    store = MemoryStore()
    name = "vllm:generation_tokens_total"
    for target in range(40):
        for engine_id in range(rng.randint(1, 3)):
            labels = labels_of({"__name__": name, "target": f"t{target % 25}",
                                "engine": str(engine_id)})
            for t in range(0, 600_000, 15_000):
                if rng.random() < 0.7:
                    roll = rng.random()
                    value = (STALE_NAN if roll < 0.1 else math.nan if roll < 0.12
                             else float(rng.randint(0, 10_000)))
                    store.add(labels, t, value)
    store.add(labels_of({"__name__": name}), 500_000, 3.0)  # no target label: key ""
    store.add(labels_of({"__name__": "other", "target": "t1"}), 500_000, 1e9)
    engine = Engine(store)
    for at in (0, 14_999, 300_000, 450_000, 599_000, 900_000):
        want = {label_value(s.labels, "target"): s.value
                for s in engine.query(f"sum by (target) ({name})", at)}
        got = store.newest_sums(name, "target", at - 300_000, at)
        assert got.keys() == want.keys(), at
        for k, v in want.items():
            assert got[k] == v or (math.isnan(got[k]) and math.isnan(v)), (at, k)
    assert store.newest_sums("absent", "target", 0, 10**9) == {}
