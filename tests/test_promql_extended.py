"""`anchored` and `smoothed` ranges (Prometheus 3, behind promql-extended-range-selectors)."""

from __future__ import annotations

import pytest

from sentinel.promql import Engine, PromQLError
from sentinel.promql.extended import extended_rate, interpolate_at, mark
from sentinel.promql.features import EXTENDED_RANGE
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.store.memory import MemoryStore

S = 15_000


def _engine(series: dict[str, str], features: frozenset[str] = frozenset({EXTENDED_RANGE})
            ) -> Engine:
    store = MemoryStore(retention_ms=10**12)
    for text, values in series.items():
        for i, v in enumerate(expand_values(values)):
            if v is not None:
                store.add(parse_series(text), i * S, v)
    return Engine(store, features=features)


def _value(e: Engine, expr: str, t: int) -> float:
    (s,) = e.query(expr, t)  # type: ignore[misc]
    return s.value


@pytest.mark.parametrize(("text", "want"), [
    ("increase(m[1m] anchored)", 'increase(m{__sentinel_anchored__="1"}[1m] )'),
    ('rate(m{a="b"}[5m] smoothed)', 'rate(m{__sentinel_smoothed__="1", a="b"}[5m] )'),
    ("m offset -100 smoothed + 0", 'm{__sentinel_smoothed__="1"} offset -100  + 0'),
    ('m{l="anchored"}', 'm{l="anchored"}'),  # inside a string: untouched
])
def test_mark(text: str, want: str) -> None:
    masked = text.replace('"anchored"', '"        "')
    assert mark(text, masked) == want


def test_anchored_increase_is_the_difference_of_the_ends_without_extrapolation() -> None:
    # 1 2 3 4 5 at 0s..60s, then a reset: 0 1 2 ... from 75s
    e = _engine({"m": "1+1x4 0+1x4"})
    # (0s, 60s] anchored on the sample at 0s: 5 - 1, no extrapolation.
    assert _value(e, "increase(m[1m] anchored)", 60_000) == 4.0
    assert _value(e, "increase(m[1m])", 60_000) == 4.0  # extrapolated to the same here
    # Over the reset, anchored on 4 at 45s: 2 - 4 + 5 (the value before the drop).
    assert _value(e, "increase(m[1m] anchored)", 105_000) == 2.0 - 4.0 + 5.0
    assert _value(e, "resets(m[1m] anchored)", 105_000) == 1.0


def test_smoothed_interpolates_the_ends() -> None:
    e = _engine({"m": "1+1x10"})
    assert _value(e, "m smoothed", 7_500) == 1.5  # halfway between 1 (0s) and 2 (15s)
    assert _value(e, "increase(m[10s] smoothed)", 22_500) == pytest.approx(10 / 15)
    assert interpolate_at([0, 15_000], [1.0, 2.0], 20_000) == 2.0  # past the last: it
    assert interpolate_at([15_000], [1.0], 0) is None


def test_extended_rate_counts_a_reset_inside_the_window() -> None:
    ts, vs = [0, 10_000, 20_000, 30_000], [5.0, 8.0, 2.0, 4.0]
    # anchored (0, 30s]: 4 - 5 + 8 (before the drop) = 7
    assert extended_rate(ts, vs, 0, 30_000, 30.0, False, True, False) == 7.0
    assert extended_rate(ts, vs, 0, 30_000, 30.0, False, False, False) == -1.0  # delta


def test_only_the_functions_prometheus_allows_and_only_with_the_feature() -> None:
    e = _engine({"m": "1+1x10"})
    with pytest.raises(PromQLError, match="anchored modifier can only be used with"):
        e.query("max_over_time(m[1m] anchored)", 60_000)
    with pytest.raises(PromQLError, match="smoothed modifier can only be used with"):
        e.query("changes(m[1m] smoothed)", 60_000)
    with pytest.raises(PromQLError):
        _engine({"m": "1"}, frozenset()).query("increase(m[1m] anchored)", 60_000)
