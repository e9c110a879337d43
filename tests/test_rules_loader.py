"""Rule file loading and `rules check`: every problem, with file:line:col."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sentinel.rules.check import check_rule_files
from sentinel.rules.loader import RuleFileError, load_rule_files

REPO = Path(__file__).resolve().parent.parent

GOOD = """\
groups:
  - name: g
    interval: 30s
    limit: 5
    rules:
      - alert: A
        expr: up == 0
        for: 1m
        keep_firing_for: 2m
        labels: {severity: page}
        annotations: {summary: "{{ $labels.target }} down"}
"""

BAD = """\
groups:
  - name: g
    interval: 1x
    rules:
      - alert: A
        expr: sum(rate(x[5m])
        for: 1m
        labels:
          bad-name: x
        annotations:
          s: '{{ $foo }}'
      - alert: B
        expr: up
        bogus: 1
  - name: g
    rules:
      - record: r x
        expr: up
      - alert: C
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_good_file_loads_with_everything_compiled(tmp_path: Path) -> None:
    [group] = load_rule_files([write(tmp_path, "good.yaml", GOOD)])
    assert (group.name, group.interval_ms, group.limit) == ("g", 30_000, 5)
    [rule] = group.rules
    assert (rule.name, rule.expr, rule.for_ms, rule.keep_firing_for_ms) == (
        "A", "up == 0", 60_000, 120_000)
    assert rule.labels == (("severity", "page"),)
    assert rule.query is not None and rule.annotation_templates[0][0] == "summary"


def test_all_problems_reported_with_positions(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", BAD)
    with pytest.raises(RuleFileError) as err:
        load_rule_files([path])
    lines = str(err.value).splitlines()
    assert lines == err.value.problems
    expected = [
        f'{path}:3:15: not a valid duration string: "1x"',
        f'{path}:6:15: group "g", rule 1, "A": could not parse expression',
        f'{path}:9:11: group "g", rule 1, "A": invalid label name: bad-name',
        f'{path}:11:14: group "g", rule 1, "A": annotation "s": template: __alert_A:1: '
        'undefined variable "$foo"',
        f"{path}:14:9: field bogus not found in rule",
        f'{path}:15:5: groupname: "g" is repeated in the same file',
        f'{path}:17:17: group "g", rule 1, "r x": invalid recording rule name: r x',
        f'{path}:19:9: group "g", rule 2, "C": field \'expr\' must be set in rule',
    ]
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected, strict=True):
        assert line.startswith(want), (line, want)


def test_expression_error_position_inside_a_block_scalar(tmp_path: Path) -> None:
    text = "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: |\n      sum(up)\n" \
           "        by (job) foo(\n"
    path = write(tmp_path, "block.yaml", text)
    with pytest.raises(RuleFileError) as err:
        load_rule_files([path])
    assert str(err.value).startswith(f"{path}:")
    assert "could not parse expression" in str(err.value)


def test_group_names_must_be_unique_across_files_and_globs_expand(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD)
    with pytest.raises(RuleFileError, match="already used in"):
        load_rule_files([str(tmp_path / "*.yaml")])
    assert load_rule_files([str(tmp_path / "nothing-*.yaml")]) == []
    with pytest.raises(RuleFileError, match="cannot read rule file"):
        load_rule_files([str(tmp_path / "missing.yaml")])


def test_empty_file_and_invalid_yaml(tmp_path: Path) -> None:
    assert load_rule_files([write(tmp_path, "empty.yaml", "")]) == []
    with pytest.raises(RuleFileError, match=r"broken.yaml:\d+:\d+: invalid YAML"):
        load_rule_files([write(tmp_path, "broken.yaml", "groups: [\n")])


def test_check_reports_like_promtool(tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", GOOD)
    bad = write(tmp_path, "bad.yaml", BAD)
    out = io.StringIO()
    assert check_rule_files([good], out) == 0
    assert out.getvalue() == f"Checking {good}\n  SUCCESS: 1 rules found\n\n"
    out = io.StringIO()
    assert check_rule_files([good, bad], out) == 1
    text = out.getvalue()
    assert text.startswith(f"Checking {good}\n  SUCCESS: 1 rules found\n\nChecking {bad}\n"
                           f"  FAILED:\n{bad}:3:15: ")
    assert text.count(f"{bad}:") == 8


def test_shipped_rules_check() -> None:
    out = io.StringIO()
    assert check_rule_files([str(REPO / "rules" / "vllm.yaml")], out) == 0, out.getvalue()
    rules = sum(len(g.rules) for g in load_rule_files([str(REPO / "rules" / "vllm.yaml")]))
    assert rules >= 24  # counted, so a new shipped rule needs no edit here
    assert f"SUCCESS: {rules} rules found" in out.getvalue()
