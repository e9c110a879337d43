"""The one-pass aggregations (sentinel/promql/fused.py) answer as the general path does.

Random stores (counters that reset, staleness markers, gaps, odd `le`
values, two histograms per target, series that start late), each query
evaluated both ways; the answers must be equal bit for bit, in the same order.
"""

from __future__ import annotations

import random
import struct

import pytest

from sentinel.model import STALE_NAN, labels_of
from sentinel.promql import fused
from sentinel.promql.engine import Engine
from sentinel.promql.errors import PromQLError
from sentinel.store.memory import MemoryStore

QUERIES = [
    "histogram_quantile(0.95, sum by (target, le) (rate(lat_bucket[5m])))",
    "histogram_quantile(0.5, sum by (le) (rate(lat_bucket[1m])))",
    "histogram_quantile(0.9, sum by (target, le, model) (increase(lat_bucket[2m] offset 30s)))",
    "histogram_quantile(0.99, sum by (target, le) ("
    "rate(lat_bucket[5m]) or rate(old_bucket[5m])))",
    "histogram_quantile(0.99, sum by (target, le) ("
    "rate(old_bucket[5m]) or rate(lat_bucket[5m]) or rate(lat_bucket[1m])))",
    "histogram_quantile(2, sum by (target, le) (rate(lat_bucket[5m])))",
    "histogram_quantile(NaN, sum by (target, le) (rate(lat_bucket[5m])))",
    "sum by (target) (increase(reqs_total[1m]))",
    "sum by (target, code) (rate(reqs_total[5m]))",
    "max by (target) (rate(reqs_total[1m]))",
    "min by (target) (delta(lat_bucket[5m]))",
    "count by (target) (count_over_time(reqs_total[1m]))",
    "group by (model) (last_over_time(reqs_total[2m]))",
    "sum(rate(reqs_total[5m]) or rate(lat_bucket[5m]))",
    "sum by (target) (present_over_time(lat_bucket[30s]))",
    "max_over_time(sum by (target) (rate(reqs_total[1m]))[3m:30s])",
    "sum by (target) (rate(reqs_total[2m] @ 1700000300))",
]
# Not of the fused form: these must be left to the general path (and still agree).
GENERAL_ONLY = [
    "histogram_quantile(0.9, sum without (code) (rate(lat_bucket[5m])))",
    "sum by (__name__) (rate(reqs_total[5m]))",
    'sum by (target) (rate({__name__=~"lat_bucket|old_bucket"}[5m]))',
    "sum by (target) (rate(reqs_total[5m]) or on (target) rate(lat_bucket[5m]))",
    "sum by (target) (irate(reqs_total[5m]))",
]


def _store(seed: int) -> tuple[MemoryStore, int]:
    rng = random.Random(seed)
    store = MemoryStore(retention_ms=3_600_000)
    les = ["0.1", "0.5", "1", "1.0", "2.5", "+Inf", "bogus", "1_0"]
    series = []
    for t in range(rng.randint(1, 6)):
        for model in ("a", "b")[: rng.randint(1, 2)]:
            base = {"target": f"t{t}", "model": model}
            for name in ("lat_bucket", "old_bucket"):
                for le in rng.sample(les, rng.randint(1, len(les))):
                    series.append(labels_of({"__name__": name, **base, "le": le}))
            for code in ("200", "500"):
                series.append(labels_of({"__name__": "reqs_total", **base, "code": code}))
    rng.shuffle(series)  # creation order is what the fold order follows
    now = 1_700_000_000_000
    values = {s: rng.uniform(0, 50) for s in series}
    start = {s: rng.randint(0, 50) for s in series}
    for step in range(72):  # 6 minutes at 5 s
        t = now + step * 5000
        for s in series:
            if step < start[s] or rng.random() < 0.05:
                continue
            roll = rng.random()
            if roll < 0.03:
                store.add(s, t, STALE_NAN)
                continue
            values[s] = rng.uniform(0, 3) if roll < 0.08 else values[s] + rng.uniform(0, 9)
            store.add(s, t + rng.randint(0, 900), values[s])
    return store, now + 72 * 5000


def _bits(vec: object) -> object:
    if isinstance(vec, str):
        return vec
    if isinstance(vec, float):
        return struct.pack("<d", vec)
    return [(s.labels, struct.pack("<d", s.value)) for s in vec]  # type: ignore[attr-defined]


def _answer(engine: Engine, query: str, at: int) -> object:
    try:
        return engine.query(query, at)
    except PromQLError as e:  # an error must be the same error both ways
        return f"error: {e}"


def _both(engine: Engine, query: str, at: int) -> tuple[object, object]:
    fused.ENABLED = False
    try:
        general = _answer(engine, query, at)
    finally:
        fused.ENABLED = True
    return general, _answer(engine, query, at)


@pytest.mark.parametrize("seed", range(12))
def test_fused_answers_equal_the_general_path(seed: int) -> None:
    store, at = _store(seed)
    engine = Engine(store)
    nonempty = 0
    for query in QUERIES + GENERAL_ONLY:
        general, quick = _both(engine, query, at)
        assert _bits(quick) == _bits(general), query
        nonempty += isinstance(general, list) and bool(general)
    assert nonempty >= len(QUERIES) // 2  # the stores exercise the queries


def test_fused_path_is_taken_for_its_forms_only(monkeypatch: pytest.MonkeyPatch) -> None:
    store, at = _store(3)
    engine = Engine(store)
    taken: list[str] = []
    for name in ("aggregate", "histogram_quantile"):
        real = getattr(fused, name)

        def spy(ev: object, e: object, real=real) -> object:
            out = real(ev, e)
            if out is not None:
                taken.append(real.__name__)
            return out
        monkeypatch.setattr(fused, name, spy)
    for query in QUERIES:
        taken.clear()
        engine.query(query, at)
        assert taken, f"fused path not taken: {query}"
    for query in GENERAL_ONLY:
        taken.clear()
        _answer(engine, query, at)
        assert not taken, f"fused path taken for {query}"


def test_a_store_without_summaries_takes_the_general_path() -> None:
    store, at = _store(5)

    class Plain:  # only what the engine's Protocol requires: no summarize_apply
        def select(self, matchers, start_ms, end_ms):  # type: ignore[no-untyped-def]
            return store.select(matchers, start_ms, end_ms)

    query = QUERIES[0]
    answer = Engine(Plain()).query(query, at)  # type: ignore[arg-type]
    assert _bits(answer) == _bits(Engine(store).query(query, at))
    assert answer
