"""`sentinel rules test`: rule unit tests in promtool's file format and output.

PromQL is Prometheus 3's by default; `--promql 2` gives promtool 2.42's.

    rule_files: [vllm.yaml]          # relative to the test file, globs allowed
    evaluation_interval: 1m          # default 1m
    group_eval_order: [a, b]         # optional partial order
    tests:
    - interval: 15s                  # spacing of input samples (0: all at t=0)
      name: optional
      external_labels: {cluster: x}
      external_url: http://...
      input_series:
      - series: 'up{target="a"}'
        values: '1 1 0x10'           # promtool's expanding notation
      alert_rule_test:
      - eval_time: 5m
        alertname: VLLMTargetDown
        exp_alerts:
        - exp_labels: {severity: page, target: a}   # alertname is implied
          exp_annotations: {summary: ...}           # all annotations, exactly
      promql_expr_test:
      - expr: up
        eval_time: 1m
        exp_samples: [{labels: 'up{target="a"}', value: 1}]

As promtool: each test group gets a fresh store holding the input series
(sample i at i × interval); rules are evaluated at every evaluation_interval
step from 0 to the largest eval_time; an alert test compares the FIRING
alerts of the named rule (order-insensitive, labels and annotations exactly)
after the evaluation at the last step not after its eval_time; floats
compare exactly; a rule evaluation error stops the test group. Output and
exit code follow promtool.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from sentinel.config import yamlpos
from sentinel.config.durations import format_duration, parse_duration
from sentinel.model import AlertState, Labels, is_stale, labels_of
from sentinel.promql.engine import Engine
from sentinel.promql.series_notation import expand_values, parse_series
from sentinel.promql.stepcache import StepCache
from sentinel.rules.gofmt import format_e_upper, go_quote
from sentinel.rules.loader import RuleFileError, load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.store.memory import MemoryStore

_FILE_KEYS = {"rule_files", "evaluation_interval", "group_eval_order", "tests"}
_GROUP_KEYS = {"interval", "input_series", "alert_rule_test", "promql_expr_test",
               "external_labels", "external_url", "name"}
_LOOKBACK_MS = 300_000


class TestFileError(Exception):
    """A test file that cannot be read or does not follow the format."""


@dataclass(frozen=True)
class AlertTest:
    """An `alert_rule_test` item: the firing alerts expected at one time."""

    eval_time_ms: int
    alertname: str
    expected: tuple[tuple[Labels, Labels], ...]  # (labels incl. alertname, annotations)


@dataclass(frozen=True)
class ExprTest:
    """A `promql_expr_test` item."""

    expr: str
    eval_time_ms: int
    expected: tuple[tuple[str, float], ...]  # (series text, value)


@dataclass(frozen=True)
class TestGroup:
    """One item of `tests`: input series and the checks made over them."""

    interval_ms: int
    input_series: tuple[tuple[str, str], ...]
    alert_tests: tuple[AlertTest, ...]
    expr_tests: tuple[ExprTest, ...]
    external_labels: dict[str, str]
    external_url: str
    name: str


def run_rule_tests(paths: Sequence[str], out: TextIO, semantics: int = 3,
                   features: frozenset[str] = frozenset()) -> int:
    """Run each test file, report like `promtool test rules`; 0 when all pass, else 1.

    `semantics` is the PromQL engine's (3: Prometheus 3, 2: Prometheus 2.x as the
    Debian promtool 2.42); see Engine. `features`: experimental PromQL the rules
    and test expressions may use, as promtool's `--enable-feature`.
    """
    failed = False
    for path in paths:
        out.write(f"Unit Testing:  {path}\n")
        errors = run_test_file(path, out, semantics, features)
        if errors:
            out.write("  FAILED:\n")
            for e in errors:
                out.write(e + "\n\n")
            failed = True
        else:
            out.write("  SUCCESS\n")
        out.write("\n")
    return 1 if failed else 0


def run_test_file(path: str, out: TextIO, semantics: int = 3,
                  features: frozenset[str] = frozenset()) -> list[str]:
    """The failures of one test file (empty when it passes)."""
    try:
        doc = _read(path)
        rule_files = _rule_files(path, doc.get("rule_files") or [], out)
        eval_ms = _duration(doc.get("evaluation_interval"), 60_000)
        order: dict[str, int] = {}
        for i, name in enumerate(doc.get("group_eval_order") or []):
            if name in order:
                return [f"group name repeated in evaluation order: {name}"]
            order[name] = i
        tests = [_test_group(t) for t in doc.get("tests") or []]
    except TestFileError as e:
        return [str(e)]
    errors: list[str] = []
    for tg in tests:
        errors += run_test_group(tg, eval_ms, order, rule_files, semantics, features)
    return errors


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Checked first (alias bombs, control characters, deep nesting), then loaded.
        yamlpos.compose(text)
        doc = yaml.safe_load(text) or {}
    except yamlpos.YamlSyntaxError as e:
        raise TestFileError(f"{path}:{e.line}: {e.message}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise TestFileError(f"{path}: {e}") from None
    if not isinstance(doc, dict):
        raise TestFileError(f"{path}: a test file is a mapping")
    _strict(doc, _FILE_KEYS, "the test file")
    return doc


def _strict(d: dict[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(map(str, d)) - allowed)
    if unknown:
        raise TestFileError(f"field {unknown[0]} not found in {what} "
                            f"(allowed: {', '.join(sorted(allowed))})")


def _scalar(v: Any) -> str:
    """A YAML scalar as Go's yaml decoder gives it to a string field (`false`, not `False`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)


def _duration(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return parse_duration(str(value))
    except ValueError as e:
        raise TestFileError(str(e)) from None


def _rule_files(test_path: str, patterns: list[str], out: TextIO) -> list[str]:
    """Paths relative to the test file's directory, globs expanded, as promtool."""
    base = os.path.dirname(test_path)
    files: list[str] = []
    for p in patterns:
        full = p if os.path.isabs(p) else os.path.join(base, p)
        found = sorted(glob.glob(full))
        if not found:
            out.write(f"  WARNING: no file match pattern {full}\n")
        files += found
    return files


def _test_group(t: Any) -> TestGroup:
    if not isinstance(t, dict):
        raise TestFileError("each item of tests must be a mapping")
    _strict(t, _GROUP_KEYS, "a test group")
    name = str(t.get("name") or "")
    series = []
    for s in t.get("input_series") or []:
        _strict(s, {"series", "values"}, "input_series")
        series.append((str(s.get("series", "")), str(s.get("values", ""))))
    alerts = []
    for a in t.get("alert_rule_test") or []:
        _strict(a, {"eval_time", "alertname", "exp_alerts"}, "alert_rule_test")
        at = _duration(a.get("eval_time"), 0)
        alertname = str(a.get("alertname") or "")
        if not alertname:
            where = f" (in TestGroup {name})" if name else ""
            raise TestFileError("an item under alert_rule_test misses required attribute "
                                f"alertname at eval_time {format_duration(at)}{where}")
        exp = []
        for e in a.get("exp_alerts") or []:
            _strict(e, {"exp_labels", "exp_annotations"}, "exp_alerts")
            labels = {str(k): _scalar(v) for k, v in (e.get("exp_labels") or {}).items()}
            labels["alertname"] = alertname  # implied, as promtool adds it
            anns = {str(k): _scalar(v) for k, v in (e.get("exp_annotations") or {}).items()}
            exp.append((labels_of(labels), tuple(sorted(anns.items()))))
        alerts.append(AlertTest(at, alertname, tuple(exp)))
    exprs = []
    for x in t.get("promql_expr_test") or []:
        _strict(x, {"expr", "eval_time", "exp_samples"}, "promql_expr_test")
        samples = []
        for s in x.get("exp_samples") or []:
            _strict(s, {"labels", "value"}, "exp_samples")
            samples.append((str(s.get("labels") or ""), float(s.get("value") or 0)))
        exprs.append(ExprTest(str(x.get("expr", "")), _duration(x.get("eval_time"), 0),
                              tuple(samples)))
    ext = {str(k): _scalar(v) for k, v in (t.get("external_labels") or {}).items()}
    return TestGroup(_duration(t.get("interval"), 0), tuple(series), tuple(alerts),
                     tuple(exprs), ext, str(t.get("external_url") or ""), name)


def _load_store(tg: TestGroup, horizon_ms: int) -> MemoryStore:
    """A store holding the input series; sample i at i × interval, the first kept on a tie.

    A series listed twice keeps its last definition, as promtool does (its load
    command keys the definitions by label set); it keeps its first place.
    """
    by_labels: dict[Labels, list[float | None]] = {}
    for series, values in tg.input_series:
        try:
            by_labels[parse_series(series)] = expand_values(values)
        except ValueError as e:
            raise TestFileError(f"invalid input series {series!r}: {e}") from None
    parsed = list(by_labels.items())
    # Retention past the newest input sample, so loading never trims the oldest ones.
    newest = max((len(v) * tg.interval_ms for _, v in parsed), default=0)
    store = MemoryStore(retention_ms=max(horizon_ms, newest) + 10 * _LOOKBACK_MS + 86_400_000)
    for labels, vals in parsed:
        ref = store.ref(labels)
        last_t = None
        for i, v in enumerate(vals):
            t = i * tg.interval_ms
            if v is None or t == last_t:  # promtool rejects a second sample at one timestamp
                continue
            store.append(ref, t, v)
            last_t = t
    return store


def run_test_group(
    tg: TestGroup, eval_ms: int, order: dict[str, int], rule_files: list[str],
    semantics: int = 3, features: frozenset[str] = frozenset(),
) -> list[str]:
    """The failures of one test group."""
    max_t = max([a.eval_time_ms for a in tg.alert_tests]
                + [x.eval_time_ms for x in tg.expr_tests] + [0])
    try:
        store = _load_store(tg, max_t)
        groups = load_rule_files(rule_files, features)
    except (TestFileError, RuleFileError) as e:
        return [str(e)]
    groups.sort(key=lambda g: order.get(g.name, 0))  # stable: file order otherwise
    # Input series are all loaded and rules write at the evaluation time only, so before
    # each evaluation the older data is final: subquery steps over it are kept.
    steps = StepCache()
    engine = Engine(store, _LOOKBACK_MS, subquery_step_ms=eval_ms,  # as promtool
                    step_cache=steps, semantics=semantics, features=features)
    mgr = RuleManager(groups, engine, default_interval_ms=tg.interval_ms or 60_000,
                      external_labels=tg.external_labels, external_url=tg.external_url,
                      store=store)
    # A group's query_offset writes its recorded samples that far before the evaluation.
    back_ms = max((g.query_offset_ms for g in groups), default=0)
    errors = _run_alert_tests(tg, mgr, eval_ms, max_t, lambda ts: steps.seal(ts - back_ms))
    if errors and errors[-1].startswith("    rule: "):
        return errors
    steps.seal(max_t + 1)  # nothing writes from here on (eval_time <= max_t)
    return errors + _run_expr_tests(tg, engine)


def _run_alert_tests(tg: TestGroup, mgr: RuleManager, eval_ms: int, max_t: int,
                     seal: Callable[[int], None]) -> list[str]:
    pending = sorted(tg.alert_tests, key=lambda a: a.eval_time_ms)
    errors: list[str] = []
    ts = 0
    while ts <= max_t:
        seal(ts)  # what is older than this evaluation's writes is final
        for name in mgr.groups:
            mgr.evaluate_group(name, ts)
        bad = [r for r in mgr.rule_health() if r.last_error]
        if bad:
            return errors + [f"    rule: {r.rule}, time: {go_duration(ts)}, err: {r.last_error}"
                             for r in bad]
        firing = [a for a in mgr.active_alerts() if a.state == AlertState.FIRING]
        while pending and ts <= pending[0].eval_time_ms < ts + eval_ms:
            test = pending.pop(0)
            got = sorted((a.labels, a.annotations) for a in firing if a.rule == test.alertname)
            exp = sorted(test.expected)
            if got != exp:
                named = f"    name: {tg.name},\n" if tg.name else ""
                errors.append(
                    f"{named}    alertname: {test.alertname}, time: "
                    f"{format_duration(test.eval_time_ms)}, \n"
                    f"        exp:{_indent(_alerts_str(exp), ' ' * 12)}, \n"
                    f"        got:{_indent(_alerts_str(got), ' ' * 12)}"
                )
        ts += eval_ms
    return errors


def _run_expr_tests(tg: TestGroup, engine: Engine) -> list[str]:
    errors = []
    for x in tg.expr_tests:
        when = format_duration(x.eval_time_ms)
        try:
            res = engine.query(x.expr, x.eval_time_ms)
        except Exception as e:  # any query failure is a test failure, reported like promtool
            errors.append(f'    expr: {go_quote(x.expr)}, time: {when}, err: {e}')
            continue
        got: list[tuple[Labels, float]] = (
            [((), res)] if isinstance(res, float) else [(s.labels, s.value) for s in res])
        try:
            exp = [(_parse_metric(lbl), v) for lbl, v in x.expected]
        except ValueError as e:
            errors.append(f"    expr: {go_quote(x.expr)}, time: {when}, err: {e}")
            continue
        got.sort(key=lambda s: s[0])
        exp.sort(key=lambda s: s[0])
        same = len(got) == len(exp) and all(
            g[0] == e[0] and g[1] == e[1] for g, e in zip(got, exp, strict=True))
        if not same:
            errors.append(f"    expr: {go_quote(x.expr)}, time: {when},\n"
                          f"        exp: {_samples_str(exp)}\n        got: {_samples_str(got)}")
    return errors


def _parse_metric(text: str) -> Labels:
    """parser.ParseMetric: a series, or `{}` for the empty label set of a scalar."""
    return () if text.strip() in ("", "{}") else parse_series(text)


def go_labels(labels: Labels) -> str:
    """labels.Labels.String(): `{a="b", c="d"}`."""
    return "{" + ", ".join(f"{k}={go_quote(v)}" for k, v in labels) + "}"


def _alerts_str(alerts: list[tuple[Labels, Labels]]) -> str:
    if not alerts:
        return "[]"
    parts = [f"{i}:" + _indent(f"\nLabels:{go_labels(lb)}\nAnnotations:{go_labels(an)}", "  ")
             for i, (lb, an) in enumerate(alerts)]
    return "[\n" + ",\n".join(parts) + "\n]"


def _samples_str(samples: list[tuple[Labels, float]]) -> str:
    if not samples:
        return "nil"
    return ", ".join(f"{go_labels(lb)} {_value(v)}" for lb, v in samples)


def _value(v: float) -> str:
    return "NaN" if is_stale(v) else format_e_upper(v)


def _indent(text: str, prefix: str) -> str:
    return ("\n" + prefix).join(text.split("\n"))


def go_duration(ms: int) -> str:
    """Go's time.Duration.String() for whole milliseconds: "0s", "1m30s", "1h0m0s", "1.5s"."""
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s = f"{rest // 1000}" + (f".{rest % 1000:03d}".rstrip("0") if rest % 1000 else "") + "s"
    if h:
        return f"{h}h{m}m{s}"
    return f"{m}m{s}" if m else s
