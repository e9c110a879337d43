"""Sentinel's PromQL engine against the real Prometheus: promtool 2.42 is the oracle.

For every case in tests/promql_cases/oracle.yaml the engine evaluates the
expression over the input series (after evaluating the case group's `rules`,
if any, every minute with their output written back, as promtool does);
its results become the `exp_samples` of a promtool rule unit test, and
`promtool test rules` must pass. Floats are written in their shortest
round-trip form and promtool 2.42 compares them exactly, so a pass means
bit-for-bit agreement with Prometheus.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sentinel.config.durations import parse_duration
from sentinel.model import Labels, format_labels
from sentinel.promql import Engine
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.store.memory import MemoryStore

CASES = Path(__file__).parent / "promql_cases" / "oracle.yaml"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool (Prometheus 2.42) is required in CI but is not installed")
        pytest.skip("promtool not installed: cannot compare with Prometheus")
    return path


def _load(series: dict[str, str], interval_ms: int) -> MemoryStore:
    store = MemoryStore(retention_ms=10**12)
    for text, values in series.items():
        labels = parse_series(text)
        for i, value in enumerate(expand_values(values)):
            if value is not None:
                store.add(labels, i * interval_ms, value)
    return store


def _yaml_float(v: float) -> str:
    if math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    return repr(v)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _evaluate(engine: Engine, expr: str, at_ms: int) -> tuple[str, list[tuple[Labels, float]]]:
    """The expression to give promtool and the samples Sentinel computes for it.

    promtool cannot compare NaN (NaN != NaN), so an expression whose result
    holds a NaN is checked as `(e) == bool (e)`: same label sets, 0 where NaN.
    """
    result = engine.query(expr, at_ms)
    if isinstance(result, float):
        samples: list[tuple[Labels, float]] = [((), result)]
    else:
        samples = [(s.labels, s.value) for s in result]
    if any(math.isnan(v) for _, v in samples):
        return _evaluate(engine, f"({expr}) == bool ({expr})", at_ms)
    return expr, samples


def _run_rules(store: MemoryStore, engine: Engine, rule_file: Path, exprs: list[dict]) -> None:
    """Evaluate the rules every minute up to the last eval time, writing back as promtool does."""
    last = max(parse_duration(at) for case in exprs for at in case["at"])
    manager = RuleManager(load_rule_files([str(rule_file)]), engine, store=store)
    for ts in range(0, last + 1, 60_000):
        for name in manager.groups:
            manager.evaluate_group(name, ts)
        assert not [r for r in manager.rule_health() if r.last_error]


def _test_group(group: dict, rule_file: Path | None = None) -> str:
    interval = group["interval"]
    store = _load(group["series"], parse_duration(interval))
    engine = Engine(store, semantics=2)  # promtool 2.42: Prometheus 2.x windows
    if rule_file is not None:
        _run_rules(store, engine, rule_file, group["exprs"])
    lines = [f"  - name: {_quote(group['name'])}", f"    interval: {interval}"]
    lines.append("    input_series:")
    for text, values in group["series"].items():
        lines += [f"      - series: {_quote(text)}", f"        values: {_quote(values)}"]
    lines.append("    promql_expr_test:")
    for case in group["exprs"]:
        for at in case["at"]:
            expr, samples = _evaluate(engine, case["expr"], parse_duration(at))
            lines += [f"      - expr: {_quote(expr)}", f"        eval_time: {at}"]
            lines.append("        exp_samples:" + ("" if samples else " []"))
            for labels, value in samples:
                lines += [
                    f"          - labels: {_quote(format_labels(labels))}",
                    f"            value: {_yaml_float(value)}",
                ]
    return "\n".join(lines)


def _unit_test_files(tmp_path: Path) -> list[Path]:
    """One promtool test file for the plain cases, and one per case group with rules."""
    groups = yaml.safe_load(CASES.read_text())
    plain = "\n".join(_test_group(g) for g in groups if "rules" not in g)
    files = [tmp_path / "oracle_test.yml"]
    files[0].write_text(f"rule_files: []\nevaluation_interval: 1m\ntests:\n{plain}\n")
    for i, g in enumerate(g for g in groups if "rules" in g):
        rule_file = tmp_path / f"rules_{i}.yml"
        rule_file.write_text(yaml.safe_dump({"groups": g["rules"]}, sort_keys=False))
        body = _test_group(g, rule_file)
        files.append(tmp_path / f"oracle_rules_{i}_test.yml")
        # Without group_eval_order promtool runs groups in random order (a Go map):
        # name them all, in file order, as Sentinel evaluates them.
        order = ", ".join(rg["name"] for rg in g["rules"])
        files[-1].write_text(f"rule_files: [{rule_file.name}]\nevaluation_interval: 1m\n"
                             f"group_eval_order: [{order}]\ntests:\n{body}\n")
    return files


def test_cases_file_covers_every_family() -> None:
    text = CASES.read_text()
    for needle in ("rate(", "irate(", "increase(", "delta(", "_over_time(", "histogram_quantile(",
                   "by (", "without (", "on(", "ignoring(", "bool", " and ", " or ", " unless ",
                   "offset", "absent(", "changes(", "resets(", "stale", "group_left",
                   "[10m:1m]", "[5m:]", "@ start()", "@ end()", "@ 300", "atan2", "holt_winters(",
                   "sin(", "cos(", "tan(", "asin(", "acos(", "atan(", "tanh(", "asinh(",
                   "acosh(", "atanh(", "deg(", "rad(", "pi()", "day_of_month(", "day_of_week(",
                   "day_of_year(", "days_in_month(", "hour(", "minute(", "month(",
                   "year(", "[[:alnum:]]", "(?i)", "\\\\d", "(.*.*)*X"):  # fmt: skip
        assert needle in text, needle


@pytest.mark.integration
def test_engine_agrees_with_promtool(tmp_path: Path) -> None:
    promtool = _promtool()
    files = _unit_test_files(tmp_path)
    proc = subprocess.run(
        [promtool, "test", "rules", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"promtool disagrees:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.count("SUCCESS") == len(files)


@pytest.mark.integration
def test_promtool_catches_a_wrong_value(tmp_path: Path) -> None:
    """The oracle is not vacuous: a result off in the last bit fails."""
    promtool = _promtool()
    engine = Engine(_load({'x{a="1"}': "0.1 0.2"}, 60_000), semantics=2)
    (sample,) = engine.query("x + 0.1", 60_000)
    wrong = math.nextafter(sample.value, math.inf)
    test_file = tmp_path / "wrong.yml"
    test_file.write_text(
        "rule_files: []\ntests:\n  - interval: 1m\n    input_series:\n"
        "      - series: 'x{a=\"1\"}'\n        values: '0.1 0.2'\n"
        "    promql_expr_test:\n      - expr: x + 0.1\n        eval_time: 1m\n"
        f"        exp_samples:\n          - labels: '{{a=\"1\"}}'\n            value: {wrong!r}\n"
    )
    proc = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True
    )
    assert proc.returncode == 1
