"""promtool 2.42 as the oracle: the same test files pass (or fail) under both.

promtool is required in CI (CI=true); elsewhere these tests skip without it.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sentinel.rules.loader import load_rule_files
from sentinel.rules.ruletest import run_rule_tests

REPO = Path(__file__).resolve().parent.parent
PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is required in CI (Debian package prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def sentinel_test(path: Path) -> tuple[int, str]:
    out = io.StringIO()
    return run_rule_tests([str(path)], out), out.getvalue()


def test_shipped_rules_pass_promtool_check() -> None:
    res = promtool("check", "rules", str(REPO / "rules" / "vllm.yaml"))
    assert res.returncode == 0, res.stdout + res.stderr
    # Counted by Sentinel's own loader, so a new shipped rule needs no edit here.
    rules = sum(len(g.rules) for g in load_rule_files([str(REPO / "rules" / "vllm.yaml")]))
    assert rules >= 24
    assert f"SUCCESS: {rules} rules found" in res.stdout


@pytest.mark.parametrize("name", ["vllm_test.yaml", "slo/serving_test.yaml"])
def test_shipped_rule_tests_pass_promtool_and_sentinel(name: str) -> None:
    path = REPO / "rules" / name
    res = promtool("test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    rc, out = sentinel_test(path)
    assert rc == 0, out
    assert out == f"Unit Testing:  {path}\n  SUCCESS\n\n"


@pytest.mark.parametrize("semantics", [2, 3])
def test_shipped_rule_tests_pass_under_both_promql_semantics(semantics: int) -> None:
    """The shipped tests hold whichever PromQL runs them: CI's promtool is 2.42, Sentinel
    defaults to Prometheus 3 (left-open windows), so their data avoids the difference."""
    paths = [str(REPO / "rules" / name) for name in (
        "vllm_test.yaml", "sentinel_test.yaml", "slo/serving_test.yaml")]
    out = io.StringIO()
    assert run_rule_tests(paths, out, semantics=semantics) == 0, out.getvalue()


RULES = """\
groups:
  - name: g
    rules:
      - alert: High
        expr: m > 1
        for: 1m
        keep_firing_for: 1m
        labels: {severity: page}
        annotations: {summary: "{{ $labels.job }} at {{ $value }}"}
      - alert: Dup
        expr: (label_replace(m, "a", "1", "", "") or label_replace(m, "b", "1", "", "")) > 100
        labels: {a: "", b: ""}
"""

PASSING = """\
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'm{job="j"}'
        values: '0 5 5 5 0 0 0'
    alert_rule_test:
      - {eval_time: 1m, alertname: High, exp_alerts: []}
      - eval_time: 2m
        alertname: High
        exp_alerts:
          - exp_labels: {severity: page, job: j}
            exp_annotations: {summary: "j at 5"}
      - eval_time: 4m
        alertname: High
        exp_alerts:
          - exp_labels: {severity: page, job: j}
            exp_annotations: {summary: "j at 5"}
      - {eval_time: 5m, alertname: High, exp_alerts: []}
    promql_expr_test:
      - expr: m
        eval_time: 3m
        exp_samples: [{labels: 'm{job="j"}', value: 5}]
"""

FAILING = {
    # Still pending at 1m, so nothing fires.
    "pending": PASSING.replace("{eval_time: 1m, alertname: High, exp_alerts: []}",
                               "{eval_time: 1m, alertname: High, exp_alerts: [{}]}"),
    # Annotations compare exactly.
    "annotation": PASSING.replace('exp_annotations: {summary: "j at 5"}',
                                  'exp_annotations: {summary: "j at 6"}', 1),
    # keep_firing_for holds it through 4m but not 5m.
    "resolution": PASSING.replace("{eval_time: 5m, alertname: High, exp_alerts: []}",
                                  "{eval_time: 5m, alertname: High, exp_alerts: [{}]}"),
    # Floats compare exactly.
    "value": PASSING.replace("value: 5}", "value: 5.000001}"),
    # A rule evaluation error (same labelset after templating) fails the test group.
    "eval_error": PASSING.replace("'0 5 5 5 0 0 0'", "'0 500 5 5 0 0 0'"),
}


def write_case(tmp_path: Path, name: str, test_text: str) -> Path:
    (tmp_path / "rules.yaml").write_text(RULES)
    path = tmp_path / f"{name}_test.yaml"
    path.write_text(test_text)
    return path


def test_custom_passing_file_passes_both(tmp_path: Path) -> None:
    path = write_case(tmp_path, "passing", PASSING)
    res = promtool("test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    rc, out = sentinel_test(path)
    assert rc == 0, out


@pytest.mark.parametrize("case", sorted(FAILING))
def test_deliberately_failing_files_fail_both(tmp_path: Path, case: str) -> None:
    path = write_case(tmp_path, case, FAILING[case])
    res = promtool("test", "rules", str(path))
    assert res.returncode == 1, res.stdout + res.stderr
    rc, out = sentinel_test(path)
    assert rc == 1, out
    assert "  FAILED:\n" in out
    # Sentinel's report names the same failure as promtool's (first line of it).
    first = [ln for ln in res.stderr.splitlines() if ln.strip() and "FAILED" not in ln][0]
    assert first.split(", err:")[0].strip() in out


def test_the_slo_rules_are_shipped_but_not_loaded_by_default() -> None:
    """rules/slo/ is outside the bundled glob (rules/*.yaml): its 3-day windows would make
    the embedded store keep every series for 3 days (docs/reference/rules.md)."""
    import glob

    from sentinel.config.model import bundled_rule_glob

    loaded = {Path(p).resolve() for p in glob.glob(bundled_rule_glob())}
    assert (REPO / "rules" / "vllm.yaml").resolve() in loaded
    assert (REPO / "rules" / "slo" / "serving.yaml").resolve() not in loaded
    assert (REPO / "rules" / "slo" / "serving.yaml").is_file()
