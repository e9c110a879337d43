"""Alert templates: expected strings were produced by promtool 2.42 (Go text/template)."""

from __future__ import annotations

import math

import pytest

from sentinel.rules.gofmt import format_e_upper, format_float, go_sprintf
from sentinel.rules.template import (
    TemplateData,
    TemplateSyntaxError,
    compile_template,
    expand_alert_template,
)

LABELS = {"__name__": "m", "i": "1", "job": "j"}


def expand(text: str, value: float = 2.0, labels: dict[str, str] | None = None) -> str:
    tmpl = compile_template(text, "__alert_A")
    data = TemplateData(LABELS if labels is None else labels, value, {"cluster": "c1"},
                        "http://ex:9090/p")
    return expand_alert_template(tmpl, data)


VALUES = "{{ $value }}|{{ humanize $value }}|{{ humanize1024 $value }}|" \
         "{{ humanizeDuration $value }}|{{ humanizePercentage $value }}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e6, "1e+06|1M|976.6ki|11d 13h 46m 40s|1e+08%"),
        (100000.0, "100000|100k|97.66ki|1d 3h 46m 40s|1e+07%"),
        (0.5, "0.5|500m|0.5|500ms|50%"),
        (1e-5, "1e-05|10u|1e-05|10us|0.001%"),
        (0.000123456, "0.000123456|123.5u|0.0001235|123.5us|0.01235%"),
        (math.inf, "+Inf|+Inf|+Inf|+Inf|+Inf%"),
        (math.nan, "NaN|NaN|NaN|NaN|NaN%"),
        (0.0, "0|0|0|0s|0%"),
        (-93784.5, "-93784.5|-93.78k|-91.59ki|-1d 2h 3m 4s|-9.378e+06%"),
        (0.93, "0.93|930m|0.93|930ms|93%"),
        (2048.0, "2048|2.048k|2ki|34m 8s|2.048e+05%"),
        (1.2345678901234569e23,
         "1.2345678901234569e+23|123.5Z|104.6Zi|-106751991167300d -15h -30m -8s|1.235e+25%"),
    ],
)
def test_value_and_humanize_match_prometheus(value: float, expected: str) -> None:
    assert expand(VALUES, value) == expected


def test_printf_verbs_match_go() -> None:
    text = '{{ printf "%.2f %v %g %e %d %s %5.1f|%-6.1f|" $value $value $value $value ' \
           '$value $value $value $value }}'
    assert expand(text, 0.5) == \
        "0.50 0.5 0.5 5.000000e-01 %!d(float64=0.5) %!s(float64=0.5)   0.5|0.5   |"
    assert go_sprintf('%q %5s|%-5s|%x %X %o %t %v %05.1f %+d %c', 'a"b', "ab", "ab", 255,
                      "hi", 8, True, None, 3.14159, 5, 65) == \
        '"a\\"b"    ab|ab   |ff 6869 10 true <nil> 003.1 +5 A'
    assert go_sprintf("%d %d", 1) == "1 %!d(MISSING)"
    assert go_sprintf("%d", 1, 2) == "1%!(EXTRA int=2)"


def test_control_flow_labels_and_functions() -> None:
    b = ('{{ if gt $value 0.5 }}big{{ else if eq $value 0.0 }}zero{{ else }}small{{ end }}|'
         '{{ $labels }}|{{ print 1 2 "a" "b" 3.5 }}|{{ len $labels }}|{{ index $labels "job" }}|'
         '{{ and 1 0 }}|{{ or 0 "" }}|{{ not 0 }}|{{ humanize "1234" }}|{{ .ExternalURL }}|'
         '{{ $externalLabels.cluster }}')
    assert expand(b, 1e6) == "big|map[__name__:m i:1 job:j]|1 2ab3.5|3|j|0||true|1.234k|" \
                             "http://ex:9090/p|c1"
    assert expand(b, 0.0).startswith("zero|")
    assert expand(b, math.nan).startswith("big|")  # Go's gt is !le, true for NaN
    d = ('{{ $labels.job | toUpper }}-{{ "ab" | printf "%s-%s" "x" }}-'
         '{{ title "hello wORLD_x y.z o\'neil" }}-{{ 3 }}-{{ 1e3 }}-{{ 0x10 }}-{{ 2.50 }}-'
         '{{ true }}-{{ .Labels.nope }}-{{ index $labels "nope" }}-{{ $labels.nope | len }}')
    assert expand(d) == "J-x-ab-Hello WORLD_x Y.Z O'Neil-3-1000-16-2.5-true---0"
    e = ('{{ range $k, $v := $labels }}{{ $k }}={{ $v }};{{ end }}'
         '{{ with $labels.job }}J={{ . }}{{ end }}{{ with $labels.zz }}Z{{ else }}noZ{{ end }}'
         '{{- "  trim  " -}}  x  {{ humanizeTimestamp 1700000000.5 }} '
         '{{ humanizeTimestamp $value }}')
    assert expand(e) == "__name__=m;i=1;job=j;J=jnoZ  trim  x  2023-11-14 22:13:20.5 +0000 UTC " \
                        "1970-01-01 00:00:02 +0000 UTC"
    g = ('{{ .Value }} {{ $.Value }} {{ eq "a" "a" "b" }} {{ ne 1 2 }} {{ lt "a" "b" }} '
         '{{ eq $value 2.0 }} {{ le 1 1 }}{{/* comment */}}|{{- /* c2 */ -}} |'
         '{{ match "^a.*" "abc" }} {{ reReplaceAll "(a)(b)" "${2}$1" "xaby" }} '
         '{{ toLower "ABC" }} {{ stripPort "host:9090" }} {{ humanize 1234 }} '
         '{{ humanize1024 1023 }}')
    assert expand(g) == "2 2 true true true true true||true xbay abc host 1.234k 1023"
    f = '{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}'
    assert expand(f) == "2"


def test_missing_label_expands_to_empty_string() -> None:
    assert expand("[{{ $labels.target }}][{{ .Labels.target }}]", labels={}) == "[][]"


def test_execution_errors_become_text_like_prometheus() -> None:
    assert expand("{{ gt $value 1 }}") == (
        '<error expanding template: error executing template __alert_A: template: '
        '__alert_A:1:115: executing "__alert_A" at <gt $value 1>: error calling gt: '
        "incompatible types for comparison>"
    )
    assert "nil is not a command" in expand("{{ nil }}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{ if true }}x", "template: __alert_A:1: unexpected EOF"),
        ("{{ $labels.x", "template: __alert_A:1: unclosed action"),
        ("{{ end }}", "template: __alert_A:1: unexpected {{end}}"),
        ("line1\n{{ nofunc }}", 'template: __alert_A:2: function "nofunc" not defined'),
        ("{{ | toUpper }}", 'template: __alert_A:1: unexpected "|" in command'),
        ("{{ else }}", "template: __alert_A:1: unexpected {{else}}"),
        ("{{ $labels.x := 1 }}", 'template: __alert_A:1: unexpected ":=" in operand'),
        ("{{ (1 }}", "template: __alert_A:1: unclosed left paren"),
        ('{{ "abc }}', "template: __alert_A:1: unterminated quoted string"),
        ("{{ .Labels..x }}", "template: __alert_A:1: unexpected <.> in operand"),
        ("{{ $foo }}", 'template: __alert_A:1: undefined variable "$foo"'),
        ('{{ slice "up" 1 }}', 'function "slice" is not supported by Sentinel'),
        ("{{ 1 | 2 }}", "non executable command in pipeline stage 2"),
    ],
)
def test_parse_errors_read_like_go(text: str, message: str) -> None:
    with pytest.raises(TemplateSyntaxError) as err:
        compile_template(text, "__alert_A")
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("value", "v", "e_upper"),
    [(1e6, "1e+06", "1E+06"), (0.3, "0.3", "3E-01"), (0.30000000000000004,
     "0.30000000000000004", "3.0000000000000004E-01"), (123456.0, "123456", "1.23456E+05"),
     (-0.0, "-0", "-0E+00"), (0.0001, "0.0001", "1E-04")],
)
def test_go_float_formatting(value: float, v: str, e_upper: str) -> None:
    assert format_float(value) == v
    assert format_e_upper(value) == e_upper
