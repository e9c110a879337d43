"""Template functions that promtool cannot check: the external URL, and query's edges."""

from __future__ import annotations

from sentinel.model import InstantSample
from sentinel.rules.template import TemplateData, compile_template, expand_alert_template


def expand(text: str, data: TemplateData) -> str:
    return expand_alert_template(compile_template(text, "__alert_T"), data)


def test_external_url_and_path_prefix() -> None:
    data = TemplateData({}, 1.0, {}, "https://prom.example.com/sub/path")
    assert expand("{{ externalURL }}|{{ pathPrefix }}", data) == (
        "https://prom.example.com/sub/path|/sub/path")


def test_query_runs_the_given_function_and_errors_are_expansion_errors() -> None:
    seen: list[str] = []

    def run(q: str) -> list[InstantSample]:
        seen.append(q)
        if q == "bad(":
            raise ValueError("parse error: unexpected end of input")
        return [InstantSample((("__name__", "up"), ("i", "b")), 1.0),
                InstantSample((("__name__", "up"), ("i", "a")), 0.0)]

    data = TemplateData({}, 1.0, query=run)
    out = expand('{{ range query "up" | sortByLabel "i" }}{{ .Labels.i }}{{ .Value }} {{ end }}',
                 data)
    assert out == "a0 b1 " and seen == ["up"]
    err = expand('{{ query "bad(" }}', data)
    assert err.startswith("<error expanding template:") and "parse error" in err
    without = expand('{{ query "up" }}', TemplateData({}, 1.0))
    assert "query is not available" in without


def test_sample_and_time_print_like_go() -> None:
    data = TemplateData({}, 1.0, query=lambda q: [InstantSample((("a", "b"),), 2.5)])
    assert expand('{{ first (query "x") }}', data) == "&{map[a:b] 2.5}"
    assert expand("{{ (toTime 90061.25).Hour }} {{ (toTime 90061).Weekday }}", data) == (
        "1 Friday")
    assert "can't evaluate field Nope" in expand("{{ (toTime 1).Nope }}", data)
