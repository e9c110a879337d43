"""Go's RE2 where Prometheus and Alertmanager use it (issue 35; issue 39 item 2).

The syntax Go accepts and refuses, Prometheus's anchoring, the matchers that
use it (PromQL selectors, label_replace, Alertmanager matchers), and linear
time on the pattern that froze the daemon. Agreement with the real
promtool is in tests/test_re2_promtool.py and tests/promql_cases/oracle.yaml.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel.model import labels_of
from sentinel.promql import Engine
from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError
from sentinel.re2match import GoRegex, RegexError, anchored, unanchored
from sentinel.respond.notify.matchers import make_matcher, parse_matcher
from sentinel.store.memory import Matcher, MemoryStore


@pytest.mark.parametrize(("pattern", "value", "hit"), [
    ("[[:alnum:]]+-[[:digit:]]+", "api-01", True),   # POSIX classes (Python's re misreads them)
    ("[[:alnum:]]+", "api-01", False),
    (r"\d+", "0042", True),
    (r"\d+", "42a", False),
    ("(?i)api-.*", "API-02", True),                   # Go's flag syntax
    ("api-.*", "API-02", False),
    (r"\pL+_\d", "wéb_3", True),                      # Unicode classes
    ("api", "xapi-01", False),                        # anchored: a substring is not a match
    ("api.*", "xapi-01", False),
    (".*api.*", "xapi-01", True),
    ("a|b", "ab", False),                             # ^(?:a|b)$, not ^a|b$
    (".*", "two\nlines", False),                      # "." does not match a newline (2.x)
    ("(?s).*", "two\nlines", True),
    ("", "", True),
    ("abort|error", "error", True),                   # literal alternatives: a set lookup
    ("abort|error", "errors", False),
    ("abort|error", "abort|error", False),
    ("a-b|", "", True),
])
def test_anchored_matches_as_prometheus(pattern: str, value: str, hit: bool) -> None:
    assert anchored(pattern).matches(value) is hit
    assert anchored(pattern).matches(value) is hit  # the remembered answer agrees


@pytest.mark.parametrize(("pattern", "reason", "offset"), [
    ("a(?=b)", "invalid or unsupported Perl syntax: `(?=`", 1),      # look-ahead
    ("(?<!a)b", "invalid or unsupported Perl syntax: `(?<`", 0),     # look-behind
    (r"(a)\1", r"invalid escape sequence: `\1`", 3),                 # backreference
    ("(?<name>a)", "invalid or unsupported Perl syntax: `(?<`", 0),  # Go 1.19 (C++ RE2 takes it)
    (r"x\C", r"invalid escape sequence: `\C`", 1),                   # Go refuses, C++ RE2 takes it
    (r"a\Z", r"invalid escape sequence: `\Z`", 1),
    ("[[:word:]][[:nope:]]", "invalid character class range: `[:nope:]`", 11),
    ("a**", "invalid nested repetition operator: `**`", 1),
    ("x{1001}", "invalid repeat count: `{1001}`", 1),
    ("(a", "missing closing ): `^(?:(a)$`", 0),
])
def test_refused_as_go_refuses_with_the_offset(pattern: str, reason: str, offset: int) -> None:
    with pytest.raises(RegexError) as err:
        anchored(pattern)
    assert err.value.reason == reason
    assert err.value.offset == offset
    assert str(err.value) == f"error parsing regexp: {reason}"


@pytest.mark.parametrize("pattern", [r"\Qa(?=\E", "[(?<]", r"[\d\]]", "[]a]", "(?P<n>a)"])
def test_go_only_refusals_leave_quoted_and_class_text_alone(pattern: str) -> None:
    assert isinstance(anchored(pattern), GoRegex)


def test_unanchored_find_all_skips_an_empty_match_after_a_match_as_go_does() -> None:
    spans = [(s, e) for _, s, e in unanchored("x*").find_all("abxd")]
    assert spans == [(0, 0), (1, 1), (2, 3), (4, 4)]  # Python's re also matches at (3, 3)
    (groups, start, end), = unanchored("é(.)").find_all("aébc")
    assert (groups, start, end) == (["éb", "b"], 1, 3)  # offsets in characters, not bytes


def test_store_matchers_and_selectors_run_re2() -> None:
    m = Matcher("job", "=~", "[[:alpha:]]+")
    assert isinstance(m._re, GoRegex)
    assert m.matches("api") and not m.matches("api-1")
    assert Matcher("job", "!~", "[[:alpha:]]+").matches("api-1")
    store = MemoryStore()
    for job in ("api-01", "API-02", "web_3", "xapi-01"):
        store.add(labels_of({"__name__": "up", "job": job}), 0, 1)
    engine = Engine(store)

    def jobs(expr: str) -> list[str]:
        result = engine.query(expr, 0)
        assert not isinstance(result, float)
        return sorted(dict(s.labels)["job"] for s in result)

    assert jobs('up{job=~"[[:alnum:]]+-\\\\d+"}') == ["API-02", "api-01", "xapi-01"]
    assert jobs('up{job=~"(?i)api-.*"}') == ["API-02", "api-01"]
    assert jobs('up{job=~"api"}') == []
    assert jobs('up{job!~"[[:lower:]]+[-_]\\\\d+"}') == ["API-02"]


def test_label_replace_with_posix_classes_and_named_groups_sets_the_label() -> None:
    store = MemoryStore()
    store.add(labels_of({"__name__": "up", "instance": "tpu-v6e-7:8000"}), 0, 1)
    engine = Engine(store)
    result = engine.query('label_replace(up, "host", "${h}/$2", "instance", '
                          '"(?P<h>[[:alnum:]-]+):([[:digit:]]+)")', 0)
    assert not isinstance(result, float)
    assert dict(result[0].labels)["host"] == "tpu-v6e-7/8000"
    # A substring match is no match: the label is left unset.
    result = engine.query('label_replace(up, "host", "$1", "instance", "([[:digit:]]+)")', 0)
    assert not isinstance(result, float)
    assert "host" not in dict(result[0].labels)


@pytest.mark.parametrize(("expr", "reason", "position"), [
    ('up{job=~"a(?=b)"}', "invalid or unsupported Perl syntax: `(?=`", 3),
    ('up{a="b", job!~"(?<x>a)"}', "invalid or unsupported Perl syntax: `(?<`", 10),
    ('label_replace(up, "a", "$1", "b", "(a)\\\\1")', r"invalid escape sequence: `\1`", 34),
])
def test_refused_regex_is_a_compile_error_with_its_position(expr: str, reason: str,
                                                            position: int) -> None:
    with pytest.raises(PromQLError) as err:
        compile_expr(expr)
    assert reason in err.value.message
    assert err.value.position == position


def test_regexes_only_the_parsers_rust_regex_refuses_are_accepted_as_go_accepts_them() -> None:
    store = MemoryStore()
    for v in ("[", "A", "[a", "x"):
        store.add(labels_of({"__name__": "up", "v": v}), 0, 1)
    engine = Engine(store)
    for expr, want in (('up{v=~"[[]"}', ["["]), ('up{v=~"\\\\101"}', ["A"]),
                       ('up{v=~`\\Q[a\\E`}', ["[a"]), ('{v=~"[[]+"}', ["["])):
        result = engine.query(expr, 0)
        assert not isinstance(result, float)
        assert [dict(s.labels)["v"] for s in result] == want, expr
    # The parser judged a stand-in; the real regex matches "", as Prometheus refuses.
    with pytest.raises(PromQLError, match="at least one non-empty matcher"):
        compile_expr('{v=~"[[]*"}')
    with pytest.raises(PromQLError, match="unsupported Perl syntax") as err:
        compile_expr('up{v=~"[[]", w=~"(?=x)"}')
    assert err.value.position == 13


def test_alertmanager_matchers_run_re2_and_unescape_as_alertmanager() -> None:
    # amtool and Alertmanager read `\\d` and `\d` inside quotes as the regex \d.
    for text in ('job=~"[[:alpha:]]+-\\\\d+"', 'job=~"[[:alpha:]]+-\\d+"',
                 "job=~[[:alpha:]]+-\\d+"):
        m = parse_matcher(text)
        assert m.value == "[[:alpha:]]+-\\d+", text
        assert m.matches(labels_of({"job": "api-12"}))
        assert not m.matches(labels_of({"job": "xx api-12"}))
        assert parse_matcher(str(m)) == m  # the stored text form reads back the same
    with pytest.raises(ValueError, match="unsupported Perl syntax"):
        make_matcher("job", "=~", "api(?!-test)")
    with pytest.raises(ValueError, match="unescaped double quote"):
        parse_matcher('job="a"b"')


def test_a_catastrophic_pattern_answers_in_linear_time() -> None:
    """`{__name__=~"(.*.*)*X"}` held Python's re for minutes (issue 39 item 2).

    Run in a child process with a generous deadline, so a regression fails
    the test instead of hanging the suite.
    """
    code = textwrap.dedent("""
        from sentinel.model import labels_of
        from sentinel.promql import Engine
        from sentinel.store.memory import MemoryStore
        store = MemoryStore()
        for i in range(2000):
            store.add(labels_of({"__name__": "m_" + "a" * 60 + str(i)}), 0, 1)
        store.add(labels_of({"__name__": "a" * 60 + "X"}), 0, 1)
        result = Engine(store).query('{__name__=~"(.*.*)*X"}', 0)
        print(len(result))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


def test_remembered_answers_are_bounded_per_pattern_and_overall() -> None:
    from sentinel import re2match

    rx = anchored("v[[:digit:]]+x")
    for i in range(re2match._MAX_ANSWERS + 500):
        assert rx.matches(f"v{i}x") and not rx.matches(f"v{i}")
        assert len(rx._answers or {}) <= re2match._MAX_ANSWERS
    assert 0 < re2match._remembered[0] <= re2match._ANSWER_BUDGET


_REGEX_ALPHABET = "ab-.*+?|()[]{}^$\\:=!<>PpLdDsSwWzZCQE0123456789,iUsm \n\"'`é\x00"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=_REGEX_ALPHABET, max_size=24), st.text(max_size=12))
def test_any_pattern_compiles_or_is_refused_and_never_raises_anything_else(pattern: str,
                                                                           value: str) -> None:
    try:
        rx = anchored(pattern)
    except RegexError as e:
        assert 0 <= e.offset <= len(pattern)
    else:
        assert rx.matches(value) in (True, False)
        rx.groups_of(value)
    try:
        compile_expr(f"up{{a=~{json.dumps(pattern)}}}")
    except PromQLError:
        pass
