"""Experimental PromQL in rule files: refused unless its Prometheus feature flag is on."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel.config import load_config
from sentinel.promql import compile_expr
from sentinel.promql.features import ALL, DURATION_EXPR, EXPERIMENTAL_FUNCTIONS
from sentinel.rules.loader import RuleFileError, load_rule_files
from sentinel.rules.needs import _selectors
from sentinel.rules.ruletest import run_rule_tests

RULES = """\
groups:
  - name: g
    rules:
      - record: top:two
        expr: limitk(2, x)
      - record: x:recent
        expr: count_over_time(x[1m+1m])
"""

TESTS = """\
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'x{i="1"}', values: '1 1 1 1'}
      - {series: 'x{i="2"}', values: '2 2 2 2'}
      - {series: 'x{i="3"}', values: '3 3 3 3'}
    promql_expr_test:
      - expr: count(top:two)
        eval_time: 3m
        exp_samples: [{labels: '{}', value: 2}]
      - expr: x:recent{i="1"}
        eval_time: 3m
        exp_samples: [{labels: 'x:recent{i="1"}', value: 2}]
"""


def test_rule_files_take_experimental_promql_only_with_its_flag(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    with pytest.raises(RuleFileError) as err:
        load_rule_files([str(rules)])
    assert "limitk() is experimental" in str(err.value)
    with pytest.raises(RuleFileError):
        load_rule_files([str(rules)], frozenset({EXPERIMENTAL_FUNCTIONS}))  # [1m+1m] too
    groups = load_rule_files([str(rules)], frozenset({EXPERIMENTAL_FUNCTIONS, DURATION_EXPR}))
    assert [r.name for r in groups[0].rules] == ["top:two", "x:recent"]


def test_rules_test_and_check_take_enable_feature(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "test.yaml").write_text(TESTS)
    out = io.StringIO()
    assert run_rule_tests([str(tmp_path / "test.yaml")], out, features=ALL) == 0, out.getvalue()
    cli = [sys.executable, "-m", "sentinel", "rules"]
    without = subprocess.run([*cli, "test", str(tmp_path / "test.yaml")], capture_output=True,
                             text=True, timeout=120, check=False)
    assert without.returncode == 1 and "experimental" in without.stdout
    with_flags = subprocess.run(
        [*cli, "test", "--enable-feature=promql-experimental-functions,promql-duration-expr",
         str(tmp_path / "test.yaml")], capture_output=True, text=True, timeout=120, check=False)
    assert with_flags.returncode == 0, with_flags.stdout + with_flags.stderr
    bad = subprocess.run([*cli, "check", "--enable-feature=promql-nonsense",
                          str(tmp_path / "rules.yaml")], capture_output=True, text=True,
                         timeout=120, check=False)
    assert bad.returncode == 2 and "unknown PromQL feature" in bad.stderr


def test_the_config_names_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.yaml"
    path.write_text("promql_features: [promql-experimental-functions]\n")
    assert load_config(path, environ={}).promql_features == ("promql-experimental-functions",)
    path.write_text("promql_features: [promql-nonsense]\n")
    with pytest.raises(Exception, match="promql_features"):
        load_config(path, environ={})


def test_info_keeps_the_info_series_in_the_store() -> None:
    names = [next((m.value for m in s.matchers if m.name == "__name__"), None)
             for s in _selectors(compile_expr('info(up, {data=~".+"})', ALL))]
    assert names == [".+_info", "up"]  # the data-label selector is no read of its own
