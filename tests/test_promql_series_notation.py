"""promtool's input_series notation."""

from __future__ import annotations

import math

import pytest

from sentinel.model import is_stale
from sentinel.promql.series_notation import expand_values, parse_series


def test_plain_values_and_special_floats() -> None:
    values = expand_values("1 -2.5 1e3 Inf -Inf")
    assert values == [1.0, -2.5, 1000.0, math.inf, -math.inf]
    # No hex in series notation: "0x10" is zero repeated ten more times, as in promtool.
    assert expand_values("0x10") == [0.0] * 11
    (nan,) = expand_values("NaN")
    assert nan is not None and math.isnan(nan) and not is_stale(nan)


def test_expanding_notation() -> None:
    assert expand_values("1+2x3") == [1.0, 3.0, 5.0, 7.0]
    assert expand_values("-2-1x2") == [-2.0, -3.0, -4.0]
    assert expand_values("5x2") == [5.0, 5.0, 5.0]
    assert expand_values("_ 1 _x3 2") == [None, 1.0, None, None, None, 2.0]


def test_steps_accumulate_like_promtool() -> None:
    # promtool adds the step repeatedly, so rounding accumulates: 1+0.1+0.1+0.1.
    assert expand_values("1+0.1x3")[-1] == 1.3000000000000003


def test_stale_marker() -> None:
    (v,) = expand_values("stale")
    assert v is not None and is_stale(v)


@pytest.mark.parametrize("bad", ["1+x3", "abc", "1x", "1+2", "_x"])
def test_bad_values_name_the_item(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid series value"):
        expand_values(f"1 {bad}")


def test_parse_series() -> None:
    assert parse_series('vllm:kv_cache_usage_perc{target="a", engine="0"}') == (
        ("__name__", "vllm:kv_cache_usage_perc"),
        ("engine", "0"),
        ("target", "a"),
    )
    assert parse_series("up") == (("__name__", "up"),)
    assert parse_series('{__name__="up", job="x"}') == (("__name__", "up"), ("job", "x"))


@pytest.mark.parametrize("bad", ['up{job=~"x"}', "rate(x[5m])", "up{", "up offset 5m"])
def test_parse_series_rejects_non_series(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid series"):
        parse_series(bad)
