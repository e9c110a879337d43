"""Evidence that stays (issue 37): an incident's plotted series, captured from the store,
encoded compactly in the database, extended while open, final after the resolution, and
read back identically once the store has forgotten them; only the incident's own series."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from sentinel.api.evidence import incident_evidence
from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert
from sentinel.incidents.models_series import IncidentSeries
from sentinel.incidents.series_capture import (
    CaptureSettings,
    CaptureSpec,
    RuleSpec,
    belongs,
    capture,
    grid,
    window,
)
from sentinel.incidents.series_codec import (
    EVIDENCE,
    MAX_BYTES,
    MAX_POINTS,
    RULE,
    Plot,
    SeriesSet,
    StoredSeries,
    bound,
    decimate,
    decode,
    encode,
    merge,
)
from sentinel.incidents.series_recorder import SeriesRecorder
from sentinel.promql import Engine
from sentinel.promql.threshold import Threshold, split_condition
from sentinel.store.memory import MemoryStore

T0 = dt_to_ms(datetime(2026, 11, 27, 3, 0, tzinfo=UTC))
RULE_EXPR = "max by (target) (vllm:kv_cache_usage_perc) > 0.85"
SETTINGS = CaptureSettings(before_ms=30 * 60_000, after_ms=60_000, interval_ms=10_000,
                           step_ms=10_000)


# -- threshold ------------------------------------------------------------------------------

@pytest.mark.parametrize(("expr", "plotted", "threshold"), [
    ("x > 0.85", "x{}", Threshold(">", 0.85)),
    ("0.85 < x", "x{}", Threshold(">", 0.85)),
    ("3 >= x", "x{}", Threshold("<=", 3.0)),
    ("(up == 0)", "up{}", Threshold("==", 0.0)),
    ("x > -1", "x{}", Threshold(">", -1.0)),
    ("max by (target) (kv) > 0.85", "max by (target)(kv{})", Threshold(">", 0.85)),
    # A guard after `and`/`unless` leaves the compared part and its threshold.
    ("(a / b > 0.05) and on (target) c >= 20", "a{} / b{}", Threshold(">", 0.05)),
    ("a > 2 unless b", "a{}", Threshold(">", 2.0)),
    # Not a simple comparison against a number: the whole expression, no line.
    ("x > bool 3", "x > bool 3", None),
    ("x > y", "x > y", None),
    ("a > 1 or b > 2", "a > 1 or b > 2", None),
    ("x > 2 * 3", "x > 2 * 3", None),
    ("rate(x[5m])", "rate(x[5m])", None),
    ("x > Inf", "x{}", None),
    ("not promql ((", "not promql ((", None),
])
def test_threshold_from_the_expressions_comparison(expr: str, plotted: str,
                                                   threshold: Threshold | None) -> None:
    cond = split_condition(expr)
    assert (cond.plotted, cond.threshold) == (plotted, threshold)


def test_threshold_text() -> None:
    assert str(Threshold(">", 0.85)) == "> 0.85"
    assert str(Threshold("==", 0.0)) == "== 0"


# -- encoding -------------------------------------------------------------------------------

def _set(n: int, series: int = 1, step: int = 15_000) -> SeriesSet:
    return SeriesSet(step, T0, T0 + (n - 1) * step, (Plot(
        RULE, "KV", RULE_EXPR, "kv", Threshold(">", 0.85), tuple(
            StoredSeries((("target", f"t{k}"),), tuple(
                (T0 + i * step, 0.5 + 0.4 * math.sin(i / 7 + k)) for i in range(n)))
            for k in range(series))),))


def test_encoding_round_trips_values_times_and_specials() -> None:
    s = SeriesSet(1000, T0, T0 + 4000, (Plot(
        RULE, "A", "x > 1", "x{}", Threshold(">", 1.0), (StoredSeries(
            (("target", "a"), ("z", "<b>")),
            ((T0, 1.0), (T0 + 1000, math.inf), (T0 + 3000, -math.inf), (T0 + 4000, 0.123456789))),
        )), Plot(EVIDENCE, "up", "max(up)", "max(up)", None, ())))
    blob, kept = encode(s)
    back = decode(blob)
    assert kept == back
    assert back.plots[0].series[0].points[:3] == s.plots[0].series[0].points[:3]
    assert back.plots[0].series[0].points[3] == (T0 + 4000, 0.123457)  # six digits
    assert back.plots[0].threshold == Threshold(">", 1.0)
    assert back.plots[1] == s.plots[1]
    with pytest.raises(ValueError):
        decode(b"not zlib")


def test_an_hour_at_15s_is_a_few_kilobytes() -> None:
    blob, kept = encode(_set(240, series=2))
    assert kept.points() == 480
    assert len(blob) < 8 * 1024, len(blob)


def test_size_per_incident_is_bounded() -> None:
    # Far past any real incident: 10 plots of 8 noisy series, 360 points each.
    noisy = SeriesSet(1000, T0, T0 + 360_000, tuple(Plot(
        RULE, f"R{p}", "x", "x", None, tuple(StoredSeries(
            (("target", "t"), ("k", str(k))),
            tuple((T0 + i * 1000, (i * 7919 + k * 104729) % 1000003 / 7.0) for i in range(360)))
            for k in range(8))) for p in range(10)))
    blob, kept = encode(noisy)
    assert len(blob) <= MAX_BYTES
    assert kept.step_ms > noisy.step_ms and decode(blob) == kept


def test_decimation_keeps_spikes_and_drops() -> None:
    flat = [(i, 1.0) for i in range(64)]
    spike = list(flat)
    spike[37] = (37, 50.0)
    drop = list(flat)
    drop[20] = (20, 0.0)
    for pts, (t, v) in ((spike, (37, 50.0)), (drop, (20, 0.0))):
        out = tuple(pts)
        for _ in range(5):  # 64 → 2 points
            out = decimate(out)
        assert (t, v) in out
    assert len(decimate([(1, 1.0), (2, 2.0), (3, 3.0)])) == 2


def test_long_incidents_halve_and_coarsen_the_step() -> None:
    s = bound(_set(MAX_POINTS * 3))
    assert max(len(x.points) for x in s.plots[0].series) <= MAX_POINTS
    assert s.step_ms == 15_000 * 4


def test_merge_appends_only_what_is_new() -> None:
    first = _set(10)
    later = SeriesSet(15_000, first.end_ms + 1, first.end_ms + 45_000, (Plot(
        RULE, "KV", RULE_EXPR, "kv", Threshold(">", 0.85), (StoredSeries(
            (("target", "t0"),), tuple((first.end_ms + i * 15_000, 0.9) for i in range(4))),
            StoredSeries((("target", "late"),), ((first.end_ms + 30_000, 1.0),)))),))
    merged = merge(first, later)
    pts = merged.plots[0].series[0].points
    assert len(pts) == 13 and [t for t, _ in pts] == sorted({t for t, _ in pts})
    assert merged.plots[0].series[1].labels == (("target", "late"),)
    assert merged.end_ms == later.end_ms and merged.start_ms == first.start_ms


def test_window_and_grid() -> None:
    assert window(T0, None, None, T0 + 5000, SETTINGS) == (T0 - 1_800_000, T0 + 5000, False)
    # The first evidence (a crash line) starts the window; after the resolution, `after`.
    start, end, final = window(T0, T0 - 60_000, T0 + 120_000, T0 + 150_000, SETTINGS)
    assert (start, end, final) == (T0 - 1_860_000, T0 + 150_000, False)
    assert window(T0, None, T0 + 120_000, T0 + 999_000, SETTINGS)[1:] == (T0 + 180_000, True)
    assert list(grid(1001, 4000, 1000)) == [2000, 3000, 4000]


# -- capture: only the incident's own series ------------------------------------------------

def _engine(until_ms: int, high_from: int, high_until: int | None = None) -> Engine:
    """Two targets reporting KV usage every 5 s: tpu-a high in a window, tpu-b always high."""
    store = MemoryStore(retention_ms=10**12)
    for t in range(T0 - 900_000, until_ms + 1, 5000):
        a_high = t >= high_from and (high_until is None or t < high_until)
        for target, engine, v in (("tpu-a", "0", 0.97 if a_high else 0.4),
                                  ("tpu-a", "1", 0.3), ("tpu-b", "0", 0.99)):
            store.add((("__name__", "vllm:kv_cache_usage_perc"), ("engine", engine),
                       ("target", target)), t, v)
            store.add((("__name__", "up"), ("target", target)), t, 1.0)
    return Engine(store)


def _spec(target: str = "tpu-a") -> CaptureSpec:
    return CaptureSpec(target, (RuleSpec("VLLMKVCacheNearlyFull", RULE_EXPR, (
        {"alertname": "VLLMKVCacheNearlyFull", "target": target, "severity": "warning"},)),))


def test_capture_keeps_only_the_incidents_target() -> None:
    engine = _engine(T0 + 600_000, T0)
    got = capture(engine.query, _spec(), T0 - 300_000, T0 + 300_000, 10_000)
    rule, *evidence = got.plots
    assert rule.threshold == Threshold(">", 0.85)
    assert [dict(s.labels) for s in rule.series] == [{"target": "tpu-a"}]
    values = dict(rule.series[0].points)
    assert values[T0 - 10_000] == 0.4 and values[T0] == 0.97
    assert [p.title for p in evidence] == ["vllm:kv_cache_usage_perc", "up"]
    for p in evidence:
        assert all(dict(s.labels)["target"] == "tpu-a" for s in p.series)
    kv = dict(evidence[0].series[0].points)
    assert kv[T0] == 0.97  # the worst engine: tpu-b's 0.99 never enters


@pytest.mark.parametrize(("labels", "target", "alerts", "ok"), [
    ({"target": "a"}, "a", [{"target": "a"}], True),
    ({"target": "b"}, "a", [{"target": "a"}], False),
    ({"target": "b"}, "a", [], False),
    ({"__name__": "up", "target": "a", "engine": "1"}, "a", [{"target": "a", "engine": "0"}],
     False),
    ({"target": "a", "engine": "1"}, "a", [{"target": "a", "engine": "0"},
                                           {"target": "a", "engine": "1"}], True),
    ({"group": "g"}, "", [{"group": "g", "alertname": "X"}], True),
    ({}, "a", [{"target": "a"}], True),  # an aggregate without labels: the alert's own
])
def test_belongs(labels: dict[str, str], target: str, alerts: list[dict[str, str]],
                 ok: bool) -> None:
    assert belongs(labels, target, alerts) is ok


# -- the recorder and the API, on SQLite and PostgreSQL --------------------------------------

def _incident(db: Database, target: str, opened: int) -> int:
    at = ms_to_dt(opened)
    with db.session() as s:
        inc = Incident(group_key=f"VLLMKVCacheNearlyFull/{target}",
                       alertname="VLLMKVCacheNearlyFull", target=target, status="open",
                       severity="warning", summary="", labels={"target": target},
                       opened_at=at, resolved_at=None, updated_at=at)
        s.add(inc)
        s.flush()
        s.add(IncidentAlert(incident_id=inc.id, fingerprint="a" * 16, labels={
            "alertname": "VLLMKVCacheNearlyFull", "target": target, "severity": "warning"},
            annotations={}, state="firing", value=0.97, value_recorded_at=None, active_at=at,
            fired_at=at, resolved_at=None, notified_firing_at=None, notified_resolved_at=None))
        return inc.id


def _resolve(db: Database, iid: int, at_ms: int) -> None:
    with db.session() as s:
        inc = s.get(Incident, iid)
        assert inc is not None
        inc.status, inc.resolved_at = "resolved", ms_to_dt(at_ms)


def _lookup(name: str) -> str | None:
    return RULE_EXPR if name == "VLLMKVCacheNearlyFull" else None


def test_stored_at_opening_extended_final_and_the_same_once_the_store_forgot(
        incident_db: Database) -> None:
    db = incident_db
    resolved = T0 + 180_000
    iid = _incident(db, "tpu-a", T0)
    other = _incident(db, "tpu-b", T0 - 60_000)
    engine = _engine(T0 + 600_000, T0, resolved)
    # The store keeps 10 minutes: the first capture asks no further back than that.
    recorder = SeriesRecorder(db, engine.query, _lookup, SETTINGS,
                              earliest_ms=lambda now: now - 600_000)
    assert recorder.tick(T0 + 20_000) == 2  # at opening: both incidents get a row
    with db.session() as s:
        row = s.get(IncidentSeries, iid)
        assert row is not None and not row.final
        first = decode(row.data)
    pts = first.plots[0].series[0].points
    assert pts[0][0] >= T0 + 20_000 - 600_000 and pts[-1][0] == T0 + 20_000
    recorder.tick(T0 + 60_000)  # while open: extended
    _resolve(db, iid, resolved)
    recorder.tick(resolved + 30_000)
    with db.session() as s:
        assert s.get(IncidentSeries, iid).final is False  # type: ignore[union-attr]
    recorder.tick(resolved + 90_000)  # `after` (1 m) past the resolution: final
    with db.session() as s:
        row = s.get(IncidentSeries, iid)
        assert row is not None and row.final and row.points > 0
        stored = decode(row.data)
    assert stored.end_ms == resolved + 60_000
    times = [t for t, _ in stored.plots[0].series[0].points]
    assert times == sorted(set(times)) and times[-1] == resolved + 60_000
    # A day later, after a restart: an empty store, and the same plot from the database.
    empty = Engine(MemoryStore(retention_ms=600_000))
    later = T0 + 86_400_000

    def live(spec, stored_, start, end, settings):  # noqa: ANN001,ANN202
        from sentinel.incidents.series_recorder import extend
        return extend(empty.query, spec, stored_, start, end, settings)
    ev = incident_evidence(db, iid, _lookup, SETTINGS, later, live)
    assert ev["source"] == "stored" and ev["stored"]["final"] is True
    rule = ev["plots"][0]
    assert rule["threshold"] == {"op": ">", "value": 0.85, "text": "> 0.85"}
    assert [s["labels"] for s in rule["series"]] == [{"target": "tpu-a"}]
    assert [tuple(p) for p in rule["series"][0]["points"]] == list(
        stored.plots[0].series[0].points)
    assert [m["kind"] for m in ev["marks"]] == ["firing", "resolved"]
    for p in ev["plots"]:  # another target's series never appears
        assert all(s["labels"].get("target") == "tpu-a" for s in p["series"])
    # tpu-b's own incident shows tpu-b only.
    ev_b = incident_evidence(db, other, _lookup, SETTINGS, later, live)
    assert {s["labels"]["target"] for p in ev_b["plots"] for s in p["series"]} == {"tpu-b"}
    # Final rows are left alone.
    assert recorder.tick(later) == 1  # only tpu-b's (still open) incident
    with db.session() as s:
        assert len(s.scalars(select(IncidentSeries)).all()) == 2


def test_an_open_incidents_tail_comes_from_the_live_store(incident_db: Database) -> None:
    db = incident_db
    iid = _incident(db, "tpu-a", T0)
    engine = _engine(T0 + 600_000, T0)
    SeriesRecorder(db, engine.query, _lookup, SETTINGS).tick(T0 + 60_000)

    def live(spec, stored_, start, end, settings):  # noqa: ANN001,ANN202
        from sentinel.incidents.series_recorder import extend
        return extend(engine.query, spec, stored_, start, end, settings)
    ev = incident_evidence(db, iid, _lookup, SETTINGS, T0 + 120_000, live)
    assert ev["source"] == "stored+live"
    assert ev["plots"][0]["series"][0]["points"][-1][0] == T0 + 120_000
    # Nothing stored at all (an incident from before the upgrade): all from the store.
    with db.session() as s:
        s.delete(s.get(IncidentSeries, iid))
    ev = incident_evidence(db, iid, _lookup, SETTINGS, T0 + 120_000, live)
    assert ev["source"] == "live" and ev["plots"][0]["series"]


def test_a_failing_backend_stores_nothing_and_the_next_tick_retries(
        incident_db: Database) -> None:
    db = incident_db
    iid = _incident(db, "tpu-a", T0)
    engine = _engine(T0 + 600_000, T0)
    calls = {"n": 0}

    def flaky(expr, at):  # noqa: ANN001,ANN202
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("backend down")
        return engine.query(expr, at)
    recorder = SeriesRecorder(db, flaky, _lookup, SETTINGS)
    assert recorder.tick(T0 + 30_000) == 0
    with db.session() as s:
        assert s.get(IncidentSeries, iid) is None
    assert recorder.tick(T0 + 60_000) == 1
    assert recorder.captures.labels("failed")._value.get() == 1


def test_an_unknown_rule_still_stores_evidence(incident_db: Database) -> None:
    iid = _incident(incident_db, "tpu-a", T0)
    engine = _engine(T0 + 600_000, T0)
    SeriesRecorder(incident_db, engine.query, lambda name: None, SETTINGS).tick(T0 + 60_000)
    ev = incident_evidence(incident_db, iid, lambda name: None, SETTINGS, T0 + 60_000, None)
    assert [p["kind"] for p in ev["plots"]] == ["evidence", "evidence"]


def test_stored_rows_stay_small(incident_db: Database) -> None:
    iid = _incident(incident_db, "tpu-a", T0 - timedelta(hours=2) // timedelta(milliseconds=1))
    engine = _engine(T0 + 600_000, T0)
    recorder = SeriesRecorder(incident_db, engine.query, _lookup, SETTINGS)
    for k in range(12):
        recorder.tick(T0 + k * 60_000)
    with incident_db.session() as s:
        row = s.get(IncidentSeries, iid)
        assert row is not None
        assert len(row.data) < 16 * 1024
