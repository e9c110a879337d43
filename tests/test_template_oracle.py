"""Alert templates that query, and every other template function, against promtool 2.42.

Sentinel evaluates an alerting rule whose annotations call the functions of
Prometheus's template/template.go (`query` over the same store at the
alert's evaluation time, `first`, `value`, `label`, `sortByLabel`, links,
`toTime`, ...); the expanded annotations become the `exp_annotations` of a
promtool unit test, which must pass: byte-for-byte agreement with Go.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sentinel.model import AlertState
from sentinel.promql import Engine
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.store.memory import MemoryStore

SERIES = {
    'req_total{job="api", instance="b.example.com:9100"}': "0+10x20",
    'req_total{job="api", instance="a.example.com:9100"}': "0+30x20",
    'req_total{job="web", instance="10.0.0.7:80"}': "5+1x20",
    "boot_time_seconds": "1700000000.123x20",
}

ANNOTATIONS = {
    "sum": '{{ with query "sum(rate(req_total[5m]))" }}{{ . | first | value | humanize }}{{ end }}',
    # An unsorted query's order is the storage's series order, which in promtool differs
    # from run to run (whatever PYTHONHASHSEED is: about one run in three disagreed), so a
    # template that depends on order sorts first or selects a single series.
    "range": '{{ range query "req_total" | sortByLabel "instance" }}{{ .Labels.instance }}='
             '{{ .Value }};{{ end }}',
    "sorted": '{{ range query "req_total" | sortByLabel "instance" }}'
              '{{ label "instance" . }} {{ label "job" . }}|{{ end }}',
    "now": '{{ with query "time()" }}{{ . | first | value }}{{ end }}',
    "labels": '{{ with query "topk(1, sum by (job) (req_total))" }}{{ (first .).Labels }}'
              '{{ end }}',
    "strvalue": '{{ with query "label_replace(vector(1), \\"__value__\\", \\"hi\\", '
                '\\"\\", \\"\\")" }}[{{ . | first | strvalue }}]{{ end }}',
    "empty": '{{ first (query "nothing_here") }}',
    "boot": '{{ with query "boot_time_seconds" }}{{ . | first | value | humanizeTimestamp }}'
            '{{ end }}',
    "alerts": '{{ with query "ALERTS" }}{{ len . }}{{ end }}',
    "args": '{{ $a := args 1 "x" 2.5 }}{{ $a.arg0 }} {{ $a.arg1 }} {{ $a.arg2 }}',
    "html": '{{ "<b>bold</b>" | safeHtml }} {{ html "<a href=\'x\'>&\\"" }}',
    "js": '{{ js "it\'s <b>= \\\\ \\"q\\"" }}',
    "urlquery": '{{ urlquery "a b&c=d/é" }}',
    "links": '{{ graphLink "sum(rate(x{a=\\"b c\\"}[5m])) > 0" }} {{ tableLink "up == 0" }}',
    "strip": '{{ "foo.example.com:8080" | stripDomain }} {{ "10.0.0.1:80" | stripDomain }} '
             '{{ "host.a.b" | stripDomain }} {{ "[::1]:9" | stripDomain }} '
             '{{ "localhost" | stripDomain }} {{ "a.b:c:d" | stripDomain }} '
             '{{ "web-1.svc:9090" | stripPort }}',
    "time": "{{ toTime 1700000000.123 }} {{ (toTime 1700000000).Unix }} "
            "{{ (toTime 86400.5).UnixMilli }} {{ toTime $value }}",
    "duration": '{{ parseDuration "1h30m" }} {{ parseDuration "1d" }} {{ parseDuration "90s" }} '
                '{{ parseDuration "1y2w" }} {{ parseDuration "250ms" }}',
    "text": '{{ title "hello wide world" }} {{ toUpper "a" }} {{ toLower "B" }} '
            '{{ match "^a.c$" "abc" }} {{ reReplaceAll "(\\\\w+)@(\\\\w+)" "$2 at $1" "me@host" }}',
    "humanize": "{{ humanize 1234567 }} {{ humanize1024 1048576 }} {{ humanizeDuration 3725 }} "
                "{{ humanizePercentage 0.1234 }}",
}
# externalURL and pathPrefix are left out: promtool 2.42 sets no external URL for
# them (they fail with a nil pointer there); tests/test_rules_template.py checks them.

RULES = {"groups": [{"name": "t", "rules": [
    {"alert": "Templated", "expr": "sum by (job) (rate(req_total[5m])) > 0", "for": "2m",
     "labels": {"severity": "page"}, "annotations": ANNOTATIONS},
]}]}
EVAL_MS = 10 * 60_000
EXTERNAL_URL = "https://prom.example.com/sub/path"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool (Prometheus 2.42) is required in CI but is not installed")
        pytest.skip("promtool not installed: cannot compare with Prometheus")
    return path


def _sentinel_alerts(rule_file: Path) -> list[dict]:
    store = MemoryStore(retention_ms=10**12)
    for text, values in SERIES.items():
        for i, v in enumerate(expand_values(values)):
            if v is not None:
                store.add(parse_series(text), i * 60_000, v)
    manager = RuleManager(load_rule_files([str(rule_file)]), Engine(store), store=store,
                          external_url=EXTERNAL_URL)
    for ts in range(0, EVAL_MS + 1, 60_000):
        manager.evaluate_group("t", ts)
    firing = [a for a in manager.active_alerts() if a.state == AlertState.FIRING]
    return [{"exp_labels": {k: v for k, v in a.labels if k != "alertname"},
             "exp_annotations": dict(a.annotations)} for a in firing]


def test_every_template_function_is_exercised() -> None:
    from sentinel.rules.template_funcs import FUNCS
    from sentinel.rules.template_query import QUERY_FUNCS

    text = "".join(ANNOTATIONS.values())
    names = set(QUERY_FUNCS) | {"query"} | (
        set(FUNCS) - {"and", "or", "not", "len", "index", "print", "println", "printf",
                      "eq", "ne", "lt", "le", "gt", "ge"})
    missing = sorted(n for n in names - {"urlQueryEscape"} if n not in text)
    assert not missing


@pytest.mark.integration
def test_templates_expand_like_promtool(tmp_path: Path) -> None:
    promtool = _promtool()
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(RULES, sort_keys=False, allow_unicode=True))
    alerts = _sentinel_alerts(rule_file)
    assert len(alerts) == 2
    assert "error" not in alerts[0]["exp_annotations"]["sum"]
    assert alerts[0]["exp_annotations"]["empty"].startswith("<error expanding template")
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "external_url": EXTERNAL_URL,
        "input_series": [{"series": s, "values": v} for s, v in SERIES.items()],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "Templated", "exp_alerts": alerts}],
    }]}
    test_file = tmp_path / "templates_test.yaml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False, allow_unicode=True))
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"promtool disagrees:\n{proc.stdout}\n{proc.stderr}"
