"""Unit tests for the text exposition parser and its per-target series cache."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.collect.exposition import ExpositionError, SeriesCache, parse_exposition
from sentinel.model import labels_of

VLLM_PAGE = (Path(__file__).parent / "data" / "vllm_metrics.txt").read_text()


def L(name: str, **labels: str):  # noqa: N802 - reads like a label set literal
    return labels_of({"__name__": name, **labels})


def _cache() -> tuple[SeriesCache, dict]:
    slots: dict = {}
    return SeriesCache(lambda labels: slots.setdefault(labels, len(slots))), slots


def test_plain_samples_with_help_and_type():
    text = (
        "# HELP http_requests_total The total.\n"
        "# TYPE http_requests_total counter\n"
        'http_requests_total{method="post",code="200"} 1027\n'
        "go_goroutines 8\n"
    )
    assert parse_exposition(text) == [
        (L("http_requests_total", method="post", code="200"), 1027.0, None),
        (L("go_goroutines"), 8.0, None),
    ]


def test_label_value_escapes():
    text = r'm{a="back\\slash",b="say \"hi\"",c="two\nlines",d="odd\q"} 1' + "\n"
    [(labels, _, _)] = parse_exposition(text)
    assert dict(labels) == {
        "__name__": "m", "a": "back\\slash", "b": 'say "hi"', "c": "two\nlines", "d": "odd\\q",
    }


def test_special_values():
    text = "a NaN\nb +Inf\nc -Inf\nd 1.5e-3\ne -0\n"
    values = [v for _, v, _ in parse_exposition(text)]
    assert math.isnan(values[0])
    assert values[1:] == [math.inf, -math.inf, 0.0015, 0.0]


def test_timestamps_ms_and_openmetrics_seconds():
    assert parse_exposition("a 1 1700000000123\nb 2\n") == [
        (L("a"), 1.0, 1700000000123), (L("b"), 2.0, None),
    ]
    assert parse_exposition("a 1 1700000000.123\n# EOF\n", openmetrics=True) == [
        (L("a"), 1.0, 1700000000123),
    ]


def test_histogram_series_and_whitespace_tolerance():
    text = (
        "# TYPE lat histogram\n"
        'lat_bucket{le="0.1"} 1\n'
        'lat_bucket{ le = "+Inf" , } 3\n'
        "lat_sum\t0.7\n"
        "lat_count 3  \n"
        "\n"
        "# a free comment\n"
    )
    got = parse_exposition(text)
    assert [lb for lb, _, _ in got] == [
        L("lat_bucket", le="0.1"), L("lat_bucket", le="+Inf"), L("lat_sum"), L("lat_count"),
    ]
    assert [v for _, v, _ in got] == [1, 3, 0.7, 3]


def test_openmetrics_isms_are_tolerated():
    text = (
        "# TYPE foo counter\n# UNIT foo seconds\n"
        "foo_total 17 # {trace_id=\"abc\"} 1.0 1520879607.789\n"
        "foo_created 1520430000.123\n"
        "# EOF\n"
    )
    assert parse_exposition(text) == [(L("foo_total"), 17.0, None), (L("foo_created"),
                                                                      1520430000.123, None)]


def test_empty_label_values_are_dropped():
    assert parse_exposition('a{x="",y="1"} 2\n') == [(L("a", y="1"), 2.0, None)]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("ok 1\nbad line here\n", 2, "invalid value"),
        ("ok 1\n\n{a=\"b\"} 1\n", 3, "expected a metric name"),
        ('a{b="c" 1\n', 1, "malformed labels"),
        ('a{b=c} 1\n', 1, "malformed labels"),
        ("a\n", 1, "expected a value"),
        ("a 1 notatime\n", 1, "invalid timestamp"),
        ('a{x="1",x="2"} 1\n', 1, "duplicate label name"),
        ("# TYPE a sometype\n", 1, "unknown metric type"),
        ("# TYPE a\n", 1, "unknown metric type"),
        ("# HELP\n", 1, "malformed HELP"),
        ("a 1\n# EOF\nb 2\n", 3, "data after # EOF"),
        ('x 1\ny 2\nx 3\n', 3, "duplicate series (first on line 1)"),
        ('x{a="1",b="2"} 1\nx{b="2",a="1"} 1\n', 2, "duplicate series"),
    ],
)
def test_invalid_pages_name_the_line(text, line, message):
    with pytest.raises(ExpositionError) as info:
        parse_exposition(text)
    assert info.value.line == line
    assert message in str(info.value)
    assert info.value.excerpt  # the offending text is quoted


@pytest.mark.parametrize(
    ("text", "line"),
    [("a 1\nb x\n", 2), ("a 1\na 2\n", 2), ("a 1\n# TYPE b nope\n", 2), ('a 1\nb{c="d 1\n', 2)],
)
def test_cache_reports_the_same_errors(text, line):
    cache, _ = _cache()
    with pytest.raises(ExpositionError) as info:
        cache.parse(text)
    assert info.value.line == line


def test_excerpt_is_short():
    with pytest.raises(ExpositionError) as info:
        parse_exposition("x" * 500 + "{\n")
    assert len(info.value.excerpt) <= 80


def _prometheus_client_samples(text: str) -> list:
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            ts = None if s.timestamp is None else round(float(s.timestamp) * 1000)
            out.append((labels_of({**s.labels, "__name__": s.name}), s.value, ts))
    return out


def test_vllm_page_has_the_v1_metrics():
    names = {dict(lb)["__name__"] for lb, _, _ in parse_exposition(VLLM_PAGE)}
    for expected in (
        "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
        "vllm:inter_token_latency_seconds_count", "vllm:request_queue_time_seconds_bucket",
        "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total", "vllm:cache_config_info",
        "vllm:prompt_tokens_created",
    ):
        assert expected in names


def test_vllm_page_matches_prometheus_client():
    ours = parse_exposition(VLLM_PAGE)
    assert len(ours) > 300
    assert ours == _prometheus_client_samples(VLLM_PAGE)


def test_cache_matches_plain_parser_cold_and_warm():
    cache, slots = _cache()
    expected = parse_exposition(VLLM_PAGE)
    for _ in range(2):  # cold, then every line from the cache
        page = cache.parse(VLLM_PAGE)
        by_slot = {s: lb for lb, s in slots.items()}
        got = [(by_slot[s], v, None) for s, v in zip(page.slots, page.values, strict=True)]
        assert got == expected
        assert page.timestamps == {}
    assert len(cache) == len(expected)


def test_cache_sees_new_values_and_timestamps():
    cache, slots = _cache()
    cache.parse('a{x="1"} 1\nb 2\n')
    page = cache.parse('a{x="1"} 5\nb 6 1234\nc NaN\n')
    assert page.values[:2] == [5.0, 6.0] and math.isnan(page.values[2])
    assert page.timestamps == {1: 1234}
    assert page.slots == [slots[L("a", x="1")], slots[L("b")], slots[L("c")]]


def test_cache_maps_differently_written_series_to_one_slot():
    cache, slots = _cache()
    page = cache.parse('a{x="1",y="2"} 1\n')
    page2 = cache.parse('a{y="2", x="1"} 2\n')
    assert page.slots == page2.slots and len(slots) == 1


def test_cache_retain_forgets_other_series():
    cache, slots = _cache()
    cache.parse("a 1\nb 2\n")
    cache.retain({slots[L("a")]})
    assert len(cache) == 1


def test_cache_stops_at_eof():
    cache, _ = _cache()
    page = cache.parse("a 1\n# EOF\n")
    assert page.values == [1.0]


def test_cache_non_strict_drops_later_duplicates():
    cache, slots = _cache()
    page = cache.parse("a 1\nb 2 77\na 3\nb 4\nc 5 99\n", strict=False)
    assert page.slots == [slots[L("a")], slots[L("b")], slots[L("c")]]
    assert page.values == [1.0, 2.0, 5.0]
    assert page.timestamps == {1: 77, 2: 99}
    assert page.duplicates == 2
