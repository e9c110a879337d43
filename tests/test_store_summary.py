"""The store's range summaries give bit-for-bit what walking the samples gives.

rate(), increase(), delta(), count_over_time(), last_over_time() and
present_over_time() read MemoryStore.summarize (first/last sample, count,
counter drops indexed at ingest). Here every one of them is evaluated both
ways on randomised series with counter resets, NaNs, staleness markers,
overwritten samples, float32 and float64 values and timestamps past the
int32 range, and the results must be identical.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

import pytest

from sentinel.model import STALE_NAN, Labels, labels_of
from sentinel.promql.engine import Engine
from sentinel.store.memory import Clock, MemoryStore, Series
from sentinel.store.memory import Matcher as M

FUNCS = ["rate", "increase", "delta", "count_over_time", "last_over_time",
         "present_over_time"]


class WalkingStore:
    """The same store without summaries: the engine copies and walks the samples."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def select(self, matchers: Sequence[M], start_ms: int, end_ms: int) -> list[Series]:
        return self.store.select(matchers, start_ms, end_ms)


def _bits(vec: object) -> list[tuple[object, bytes]]:
    assert isinstance(vec, list)
    return sorted((s.labels, struct.pack("<d", s.value)) for s in vec)


def _fill(store: MemoryStore, rng: random.Random, series: int, start_ms: int) -> int:
    end = start_ms
    for k in range(series):
        labels = labels_of({"__name__": "m", "k": str(k), "target": f"t{k % 3}"})
        t, v = start_ms, rng.choice([0.0, 5.0, 1e9, -3.0])
        for _ in range(rng.randint(1, 120)):
            t += rng.choice([1, 500, 5000, 5000, 5000, 15000])
            r = rng.random()
            if r < 0.08:
                v = rng.choice([0.0, 1.0, v / 3])  # counter reset (or not quite)
            elif r < 0.11:
                v = float("nan")
            elif r < 0.13:
                v = float("inf")
            elif r < 0.5:
                v += rng.choice([1.0, 0.1, 2**25 + 1.0, 1e-7])  # float32 and not
            if rng.random() < 0.06:
                store.add(labels, t, STALE_NAN)
                continue
            store.add(labels, t, v)
            if rng.random() < 0.04:
                store.add(labels, t, v + 1)  # same timestamp: overwrites the newest
        end = max(end, t)
    return end


@pytest.mark.parametrize("seed", range(12))
def test_summaries_match_walking_the_samples(seed: int) -> None:
    rng = random.Random(seed)
    # Half the seeds start near the int32 edge so buffers rebase or widen to int64.
    start = 1_700_000_000_000 if seed % 2 else 0
    store = MemoryStore(retention_ms=10**12)
    end = _fill(store, rng, 40, start)
    if seed % 4 == 1:
        store.add(labels_of({"__name__": "m", "k": "late"}), end + 2**31 + 7, 1.0)
    fast, slow = Engine(store), Engine(WalkingStore(store))
    checked = 0
    for _ in range(60):
        at = rng.randint(start, end + 60_000)
        rng_s = rng.choice(["10s", "1m", "5m", "30m"])
        for func in FUNCS:
            q = f"{func}(m[{rng_s}])"
            a, b = fast.query(q, at), slow.query(q, at)
            assert _bits(a) == _bits(b), (q, at)
            checked += len(b)  # type: ignore[arg-type]
    assert checked > 1000


def test_retention_trims_the_indexes_and_summaries_stay_exact() -> None:
    store = MemoryStore(retention_ms=60_000)
    labels = labels_of({"__name__": "c", "target": "a"})
    for i in range(200):
        v = float(i % 7)  # a counter resetting every 7 samples
        store.add(labels, i * 1000, STALE_NAN if i % 50 == 49 else v)
    buf = store.ref(labels)
    assert buf.reset_at is not None and min(buf.reset_at) >= buf.start > 0  # trimmed with it
    assert buf.stale_ts is not None and min(buf.stale_ts, default=10**9) >= 140_000 - 4000
    fast, slow = Engine(store), Engine(WalkingStore(store))
    for at in (150_000, 175_000, 199_000, 205_000):
        for func in FUNCS:
            q = f"{func}(c[45s])"
            assert _bits(fast.query(q, at)) == _bits(slow.query(q, at)), q


def test_label_pairs_are_shared_between_series() -> None:
    store = MemoryStore()
    a = store.ref(labels_of({"__name__": "x", "target": "t1", "le": "0.5"}))
    b = store.ref(labels_of({"__name__": "y", "target": "t1", "le": "0.5"}))
    la, lb = a.labels, b.labels
    assert la[1] is lb[1] and la[2] is lb[2]
    # Selection by name neither scans other names nor reorders: creation order.
    refs = [store.ref(labels_of({"__name__": "x", "target": f"t{i}"})) for i in (9, 2, 5)]
    got = [s.labels for s in store.select([M("__name__", "=", "x")], 0, 10**13)]
    assert got == []  # no samples yet
    for r in refs:
        store.append(r, 1000, 1.0)
    store.append(a, 1000, 1.0)
    got = [s.labels for s in store.select([M("__name__", "=", "x")], 0, 10**13)]
    assert [dict(lb)["target"] for lb in got] == ["t1", "t9", "t2", "t5"]


def test_values_stay_exact_in_float32_and_float64() -> None:
    store = MemoryStore()
    labels = labels_of({"__name__": "v"})
    values = [1.0, 2.0, 16777216.0, 0.1, 1e300, float("-inf"), -0.0, STALE_NAN, 3.0]
    for i, v in enumerate(values):
        store.add(labels, 1000 * (i + 1), v)
    (s,) = store.select([M("__name__", "=", "v")], 0, 10**6)
    assert [struct.pack("<d", v) for v in s.vs] == [struct.pack("<d", v) for v in values]
    small = labels_of({"__name__": "w"})
    for i in range(10):
        store.add(small, 1000 * (i + 1), float(i))
    assert store.ref(small).vs.itemsize == 4
    assert store.ref(labels).vs.itemsize == 8


def test_has_live_counts_staleness_markers() -> None:
    store = MemoryStore()
    a = labels_of({"__name__": "g", "target": "a"})
    store.add(a, 1000, 1.0)
    store.add(a, 6000, STALE_NAN)
    assert store.has_live("g", 0, 7000)
    assert not store.has_live("g", 2000, 7000)  # only the marker in range
    assert not store.has_live("h", 0, 7000)
    store.add(labels_of({"__name__": "g", "target": "b"}), 6500, 2.0)
    assert store.has_live("g", 2000, 7000)


def test_cached_postings_follow_new_and_collected_series() -> None:
    store = MemoryStore(retention_ms=10_000)
    sel = [M("__name__", "=", "r"), M("code", "=~", "5..")]
    store.add(labels_of({"__name__": "r", "code": "500", "t": "a"}), 1000, 1.0)
    store.add(labels_of({"__name__": "r", "code": "200", "t": "a"}), 1000, 1.0)
    assert len(store.select(sel, 0, 5000)) == 1
    assert len(store.select(sel, 0, 5000)) == 1  # from the cache
    store.add(labels_of({"__name__": "r", "code": "503", "t": "b"}), 2000, 1.0)
    assert [dict(s.labels)["code"] for s in store.select(sel, 0, 5000)] == ["500", "503"]
    store.add(labels_of({"__name__": "r", "code": "503", "t": "b"}), 30_000, 1.0)
    assert store.gc(30_000) == 2  # the t=a series aged out
    assert [dict(s.labels)["code"] for s in store.select(sel, 0, 40_000)] == ["503"]


def test_readers_never_see_a_sample_half_appended_or_trimmed() -> None:
    import sys
    import threading

    store = MemoryStore(retention_ms=20_000)
    refs = [store.ref(labels_of({"__name__": "z", "k": str(k)})) for k in range(50)]
    stop = threading.Event()

    def write() -> None:
        t = 1000
        while not stop.is_set():
            t += 1000
            for r in refs:  # value = time in seconds: first/last must agree with it
                store.append(r, t, t / 1000)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        bad = 0
        for _ in range(300):
            for s in store.summarize([M("__name__", "=", "z")], 0, 10**12):
                bad += s.v_first != s.t_first / 1000 or s.v_last != s.t_last / 1000
            for x in store.select([M("__name__", "=", "z")], 0, 10**12):
                bad += [v * 1000 for v in x.vs] != x.ts
    finally:
        stop.set()
        writer.join()
        sys.setswitchinterval(old)
    assert bad == 0


def _scrape_like(rng: random.Random, shared: MemoryStore, alone: MemoryStore,
                 ticks: int) -> int:
    """Write the same scrape-shaped history into both stores: on `shared` every series
    of a target keeps its times on the target's clock, on `alone` each on its own.

    As a scraper writes: each tick a random subset of the series is present;
    one that vanishes gets a staleness marker at that tick; some ticks the
    whole target fails (markers for all, then nothing); times jump now and then.
    """
    clocks = [Clock() for _ in range(3)]
    names = [labels_of({"__name__": "m", "k": str(k), "target": f"t{k % 3}"})
             for k in range(24)]
    values = {lb: rng.choice([0.0, 5.0, 1e9]) for lb in names}
    prev: set[Labels] = set()
    t = 1_700_000_000_000
    for _ in range(ticks):
        t += rng.choice([5000, 5000, 5000, 1, 15000, 400_000])
        failed = rng.random() < 0.05
        now = set() if failed else {lb for lb in names if rng.random() < 0.85}
        for lb in names:
            k = int(dict(lb)["k"])
            if lb in now:
                r = rng.random()
                v = values[lb]
                v = (rng.choice([0.0, 1.0]) if r < 0.06 else float("nan") if r < 0.08
                     else v + rng.choice([1.0, 0.5, 2**25 + 1.0]) if r < 0.7 else v)
                values[lb] = v
            elif lb in prev:
                v = STALE_NAN
            else:
                continue
            shared.append(shared.ref(lb, clocks[k % 3]), t, v)
            alone.add(lb, t, v)
        prev = now
    return t


@pytest.mark.parametrize("seed", range(8))
def test_series_sharing_a_clock_read_as_series_alone(seed: int) -> None:
    rng = random.Random(seed)
    retention = rng.choice([60_000, 360_000, 10**12])
    shared, alone = MemoryStore(retention), MemoryStore(retention)
    end = _scrape_like(rng, shared, alone, 300)
    if seed % 2:
        shared.gc(end)
        alone.gc(end)
    checked = 0
    for _ in range(40):
        at = rng.randint(end - 600_000, end + 60_000)
        rng_s = rng.choice(["10s", "1m", "5m"])
        for q in [f"{f}(m[{rng_s}])" for f in FUNCS] + ["m", "m offset 1m"]:
            a = Engine(shared).query(q, at)
            assert _bits(a) == _bits(Engine(alone).query(q, at)), (q, at)
            assert _bits(a) == _bits(Engine(WalkingStore(shared)).query(q, at)), (q, at)
            checked += len(a)  # type: ignore[arg-type]
    assert checked > 300
    # The times are held once per clock: 3 clocks instead of 24 series' worth.
    assert shared.sample_bytes() < alone.sample_bytes()


def _summary_tuple(s: object) -> tuple[object, ...]:
    return (s.labels, s.count, s.t_first, struct.pack("<d", s.v_first),  # type: ignore[attr-defined]
            s.t_last, struct.pack("<d", s.v_last), [struct.pack("<d", c) for c in s.corrections])  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(6))
def test_one_pass_summaries_on_shared_clocks_match_the_per_series_ones(seed: int) -> None:
    # summarize_apply searches the range once per clock (a target's series share one)
    # and holds the lock per chunk of series: series that joined the clock late, left
    # it (staleness markers), were absent for a while or trimmed must read the same
    # as summarize's own search of each series' part of the clock. More series than a
    # chunk, so the clocks are searched again across chunk boundaries.
    rng = random.Random(seed)
    store = MemoryStore(retention_ms=rng.choice([60_000, 10**9]))
    clocks = [Clock() for _ in range(5)]
    refs = [(store.ref(labels_of({"__name__": "m", "k": str(k), "target": f"t{k % 5}"}),
                       clocks[k % 5]), k % 5) for k in range(300)]
    values = [float(rng.randint(0, 50)) for _ in refs]
    t = 1_700_000_000_000 if seed % 2 else 0
    for _ in range(120):
        t += rng.choice([1000, 5000, 5000, 15000])
        for c in range(5):
            page = [(i, ref) for i, (ref, cc) in enumerate(refs) if cc == c
                    and (rng.random() < 0.9 or i % 7)]  # some series skip a scrape
            vs = []
            for i, _ in page:
                r = rng.random()
                values[i] = 0.0 if r < 0.05 else STALE_NAN if r < 0.08 else values[i] + r
                vs.append(values[i])
            store.append_at(t + c, [ref for _, ref in page], vs)
    calls: list[tuple[object, ...]] = []

    def record(count: int, t0: int, v0: float, t1: int, v1: float,
               corrections: Sequence[float], arg: object) -> float | None:
        calls.append((count, t0, struct.pack("<d", v0), t1, struct.pack("<d", v1),
                      [struct.pack("<d", c) for c in corrections]))
        return None if count % 5 == 0 else float(count)  # None: left out

    for _ in range(40):
        at = rng.randint(t - 700_000, t + 30_000)
        span = rng.choice([10_000, 60_000, 300_000])
        matchers = [M("__name__", "=", "m")] + (
            [M("target", "=~", "t[12]")] if rng.random() < 0.3 else [])
        calls.clear()
        got = store.summarize_apply(matchers, at - span, at, record, None)
        want = store.summarize(matchers, at - span, at)
        assert [c for c in calls] == [_summary_tuple(s)[1:] for s in want]
        assert got == [(s.labels, float(s.count)) for s in want if s.count % 5]
