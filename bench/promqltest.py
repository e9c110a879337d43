"""Prometheus's own PromQL test files through Sentinel's engine: how many cases pass?

Run: `python bench/promqltest.py PROMETHEUS_DIR [--semantics 3|2] [--failures]`

PROMETHEUS_DIR is a Prometheus checkout (or its `promql/` test data extracted
anywhere): the 3.x suite is `promql/promqltest/testdata/*.test`, the 2.x suite
(v2.42.0) `promql/testdata/*.test`; the script finds whichever the folder holds.
Never commit those files. One way to get both without a network checkout:

    git -C MIRROR archive v3.14.0 promql/promqltest/testdata | tar -x -C /tmp/p3
    git -C MIRROR archive v2.42.0 promql/testdata | tar -x -C /tmp/p242

A case is one `eval` command. It passes when Sentinel's answer matches the
expected one the way Prometheus's test runner compares (promql/promqltest/
test.go): the same series, values equal within a relative 1e-6 (NaN equals
NaN), in order only for `eval_ordered`/`expect ordered`; `eval_fail`/`expect
fail` passes when Sentinel raises an error. The `exact` column counts the
passes whose values equal the file's written values bit for bit (the files
often round, e.g. `1.833333333`, so it is a floor, not Prometheus's bits).
Not checked: warning and info annotations (`expect warn`, `eval_warn`: only
the result is compared), the error message of an expected failure, and the
extra runs Prometheus's runner adds to an instant case (the same query as a
range query, and with `@` pinned to other times).

A range case (`eval range from A to B step S`) is Sentinel's instant query at
each step, with `@ start()`/`@ end()` the range's ends, as a range query is.

A case is a native-histogram case when its input or its expected output holds
a native histogram (`{{...}}` samples, `load_with_nhcb`) for a metric its
expression names (or for any metric, when it names none); those are counted
apart, and Sentinel (floats only) is expected to fail them.

Semantics: `--semantics 3` (default for the 3.x suite) or `2` (default for
the 2.42 suite) sets Sentinel's `Engine(semantics=...)`.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sentinel.model import METRIC_NAME, STALE_NAN, Labels, labels_of
from sentinel.promql import Engine, PromQLError, features
from sentinel.promql.calls import RangeSeries
from sentinel.promql.series_notation import expand_values
from sentinel.store.memory import MemoryStore

EPSILON = 1e-6
MIN_NORMAL = 2.2250738585072014e-308
_LOOKBACK_MS = 300_000

_LOAD = re.compile(r"^load(?:_(with_nhcb))?\s+(.+?)$")
_INSTANT = re.compile(r"^eval(?:_(fail|warn|ordered|info))?\s+instant\s+(?:at\s+(.+?))?\s+(.+)$")
_RANGE = re.compile(
    r"^eval(?:_(fail|warn|info))?\s+range\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+?)\s+(.+)$")
_EXPECT = re.compile(r"^expect\s+(ordered|fail|warn|no_warn|info|no_info)(?:\s+(regex|msg):(.+))?$")
_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
          "w": 604_800_000, "y": 31_536_000_000}
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def duration_ms(text: str) -> int:
    """A Prometheus duration (`1h30m`, `90s`, `0`) in ms."""
    text = text.strip()
    if text == "0":
        return 0
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("-")
    parts = _DURATION.findall(body)
    if not parts or "".join(a + b for a, b in parts) != body:
        raise ValueError(f"invalid duration {text!r}")
    return sign * sum(int(a) * _UNITS[b] for a, b in parts)


@dataclass
class Case:
    """One eval command: its expression, times and what it expects."""

    line: int
    expr: str
    start_ms: int
    end_ms: int
    step_ms: int  # 0: an instant query at end_ms
    fail: bool = False
    ordered: bool = False
    scalar: float | None = None
    string: str | None = None
    series: list[tuple[Labels, list[float | None]]] = field(default_factory=list)
    native: bool = False
    range_vector: tuple[int, int, int] | None = None  # an instant query's range vector result
    unparsed: str = ""  # why the case itself could not be read (counted as failed)


@dataclass
class Result:
    """A case's outcome."""

    passed: bool
    exact: bool
    reason: str = ""


def split_series(line: str) -> tuple[str, str]:
    """`metric{a="b c"} 1 2 3` → (`metric{a="b c"}`, `1 2 3`), quotes respected."""
    depth, quoted, i = 0, False, 0
    while i < len(line):
        c = line[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return line[:i + 1], line[i + 1:].strip()
        elif c in " \t" and depth == 0:
            return line[:i], line[i:].strip()
        i += 1
    return line, ""


def parse_labels(text: str) -> Labels:
    """The label set of `name{a="b"}`, `{"utf8.name", a="b"}` or `{}`."""
    text = text.strip()
    pairs: dict[str, str] = {}
    brace = text.find("{")
    if brace < 0:
        name, body = text, ""
    else:
        if not text.endswith("}"):
            raise ValueError(f"invalid series {text!r}")
        name, body = text[:brace], text[brace + 1:-1]
    if name:
        pairs[METRIC_NAME] = name
    for item in _label_items(body):
        if "=" not in item:  # a bare quoted name: the metric name
            pairs[METRIC_NAME] = _unquote(item)
            continue
        key, _, value = item.partition("=")
        pairs[_unquote(key.strip())] = _unquote(value.strip())
    return labels_of(pairs)


def _label_items(body: str) -> list[str]:
    items, cur, quoted, i = [], "", False, 0
    while i < len(body):
        c = body[i]
        if quoted and c == "\\":
            cur += body[i:i + 2]
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        if c == "," and not quoted:
            items.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    if cur.strip():
        items.append(cur.strip())
    return items


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        body = text[1:-1]
        return body if text[0] == "`" else body.encode().decode("unicode_escape")
    return text


def parse_values(text: str) -> tuple[list[float | None], bool]:
    """Expanded sample values (None: missing) and whether any was a native histogram."""
    if "{{" in text:
        return [], True
    return expand_values(text), False


@dataclass
class Block:
    """Series loaded since the last `clear`, and which hold native histograms."""

    loads: list[tuple[int, list[tuple[Labels, list[float | None]]]]] = field(default_factory=list)
    histogram_names: set[str] = field(default_factory=set)
    any_histogram: bool = False
    unreadable: bool = False  # a load line this script could not read


def parse_file(path: Path) -> list[tuple[Block, Case]]:
    """Every case of a test file with the series loaded when it runs."""
    lines = [ln.strip() for ln in path.read_text().split("\n")]
    lines = ["" if ln.startswith("#") else ln for ln in lines]
    out: list[tuple[Block, Case]] = []
    block = Block()
    i = 0
    while i < len(lines):
        ln = lines[i]
        word = ln.split(None, 1)[0].lower() if ln else ""
        if not ln:
            i += 1
        elif word == "clear":
            block = Block()
            i += 1
        elif word.startswith("load"):
            i = _parse_load(lines, i, block)
        elif word.startswith("eval"):
            i, case = _parse_eval(lines, i, block)
            out.append((_copy(block), case))
        else:
            i += 1  # a command this script does not know: skipped
    return out


def _copy(block: Block) -> Block:
    return Block(list(block.loads), set(block.histogram_names), block.any_histogram,
                 block.unreadable)


def _parse_load(lines: list[str], i: int, block: Block) -> int:
    m = _LOAD.match(lines[i])
    gap = duration_ms(m.group(2)) if m else 60_000
    nhcb = bool(m and m.group(1))
    defs: dict[Labels, list[float | None]] = {}
    while i + 1 < len(lines) and lines[i + 1]:
        i += 1
        head, values = split_series(lines[i])
        if head.endswith("@st") or values.startswith("@st"):
            continue  # start timestamps: not modelled
        try:
            labels = parse_labels(head)
            vals, hist = parse_values(values)
        except ValueError:
            block.unreadable = True
            continue
        name = dict(labels).get(METRIC_NAME, "")
        if hist or (nhcb and name.endswith("_bucket")):
            block.histogram_names.add(name.removesuffix("_bucket"))
            block.histogram_names.add(name)
            block.any_histogram = True
        defs[labels] = vals  # a series defined twice keeps its last definition, as Prometheus
    block.loads.append((gap, list(defs.items())))
    return i + 1


def _parse_eval(lines: list[str], i: int, block: Block) -> tuple[int, Case]:
    head = lines[i]
    inst, rng = _INSTANT.match(head), _RANGE.match(head)
    if inst:
        mod, expr = inst.group(1), inst.group(3)
        at = duration_ms(inst.group(2) or "0")
        case = Case(i + 1, expr, at, at, 0)
    elif rng:
        mod, expr = rng.group(1), rng.group(5)
        case = Case(i + 1, expr, duration_ms(rng.group(2)), duration_ms(rng.group(3)),
                    duration_ms(rng.group(4)))
    else:
        case = Case(i + 1, head, 0, 0, 0, unparsed="unreadable eval line")
        mod = None
    case.fail = mod == "fail"
    case.ordered = mod == "ordered"
    expected_hist = False
    while i + 1 < len(lines) and lines[i + 1]:
        i += 1
        ln = lines[i]
        if ln.startswith(("expected_fail_message", "expected_fail_regexp")):
            continue
        if ln.startswith("expect range vector"):
            m = re.match(r"^expect range vector\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+)$", ln)
            if m:
                case.range_vector = (duration_ms(m.group(1)), duration_ms(m.group(2)),
                                     duration_ms(m.group(3)))
            else:
                case.unparsed = f"unreadable: {ln}"
            continue
        if ln.startswith("expect string"):
            case.string = _unquote(ln[len("expect string"):].strip())
            continue
        if ln.split(" ")[0] == "expect":
            em = _EXPECT.match(ln)
            if em and em.group(1) == "fail":
                case.fail = True
            elif em and em.group(1) == "ordered":
                case.ordered = True
            continue
        try:
            case.scalar = float(ln)
            continue
        except ValueError:
            pass
        try:
            head_s, values = split_series(ln)
            labels = parse_labels(head_s)
            vals, hist = parse_values(values)
        except ValueError as e:
            case.unparsed = f"expected series: {e}"
            continue
        expected_hist = expected_hist or hist
        case.series.append((labels, vals))
    case.native = expected_hist or _reads_histograms(case.expr, block)
    return i + 1, case


def _reads_histograms(expr: str, block: Block) -> bool:
    if not block.any_histogram:
        return False
    masked = _QUOTED.sub(lambda m: " " * len(m.group(0)), expr)  # offsets kept
    names = set(_NAME.findall(masked)) | set(_QUOTED.findall(expr))
    named = names & block.histogram_names
    if named:
        return True
    # A selector with no metric name (`{job="a"}`, `{__name__=~".+"}`) may read any series.
    # A quoted name first in the braces (`{"my.metric", ...}`) is a name.
    nameless = any(not re.match(r'\s*"[^"]*"\s*[,}]', expr[m.end():])
                   for m in re.finditer(r"(?:^|[^\w\"])\{", masked))
    return (nameless and "__name__" not in masked) or "__name__=~" in expr


def build_store(block: Block) -> MemoryStore:
    """The block's series, sample i of a load at i × its step (later loads append)."""
    store = MemoryStore(retention_ms=10**13)
    last: dict[Labels, int] = {}
    for gap, defs in block.loads:
        for labels, vals in defs:
            ref = store.ref(labels)
            for k, v in enumerate(vals):
                t = k * gap
                if v is None or t <= last.get(labels, -(10**15)):
                    continue  # out of order or a duplicate timestamp: Prometheus refuses it
                store.append(ref, t, v)
                last[labels] = t
    return store


def almost_equal(a: float, b: float) -> bool:
    """util/almost.Equal with Prometheus's test epsilon."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < MIN_NORMAL:
        return diff < EPSILON * MIN_NORMAL
    return diff / min(abs_sum, sys.float_info.max) < EPSILON


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def run_case(block: Block, case: Case, semantics: int) -> Result:
    """Evaluate one case and compare."""
    if case.unparsed or block.unreadable:
        return Result(False, False, case.unparsed or "unreadable load line")
    engine = Engine(build_store(block), _LOOKBACK_MS, semantics=semantics,
                    features=features.ALL)  # Prometheus's test engine enables them all
    steps = [case.end_ms] if not case.step_ms else list(
        range(case.start_ms, case.end_ms + 1, case.step_ms))
    got: dict[Labels, dict[int, float]] = {}
    order: list[Labels] = []
    scalar = False
    string = None
    try:
        for t in steps:
            value = engine.query_value(case.expr, t, start_ms=case.start_ms,
                                       end_ms=case.end_ms, step_ms=case.step_ms)
            if isinstance(value, str):
                string = value
                continue
            if isinstance(value, float):
                scalar = True
                got.setdefault((), {})[t] = value
                continue
            for s in value:
                if s.labels not in got:
                    order.append(s.labels)
                if isinstance(s, RangeSeries):  # an instant query's range vector
                    got.setdefault(s.labels, {}).update(zip(s.ts, s.vs, strict=True))
                else:
                    got.setdefault(s.labels, {})[t] = s.value
    except (PromQLError, ValueError, ZeroDivisionError, OverflowError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return Result(case.fail, case.fail, "" if case.fail else f"error: {first}")
    except Exception as e:  # noqa: BLE001 - an engine crash is a failed case, reported
        return Result(False, False, f"crash: {type(e).__name__}: {e}")
    if case.fail:
        return Result(False, False, "expected a failure, got a result")
    if case.string is not None or string is not None:
        same = case.string == string
        return Result(same, same, "" if same else f"expected string {case.string!r}, "
                                                  f"got {string!r} / {_show(got)}")
    if case.range_vector is not None:
        start, end, step = case.range_vector
        steps = list(range(start, end + 1, step))
    return _compare(case, steps, got, order if not scalar else [()], scalar)


def _compare(case: Case, steps: list[int], got: dict[Labels, dict[int, float]],
             order: list[Labels], scalar: bool) -> Result:
    if case.scalar is not None:
        if not scalar or case.step_ms:
            return Result(False, False, f"expected scalar {case.scalar}, got {_show(got)}")
        v = got[()][steps[0]]
        return Result(almost_equal(case.scalar, v), _same(case.scalar, v),
                      f"expected {case.scalar}, got {v}")
    exp: dict[Labels, dict[int, float]] = {}
    for labels, vals in case.series:
        points = {}
        for k, v in enumerate(vals):
            if v is not None and k < len(steps):
                points[steps[k]] = v
        exp[labels] = points
    got = {k: v for k, v in got.items() if v}
    if set(exp) != set(got):
        return Result(False, False, f"series: expected {_show(exp)}, got {_show(got)}")
    if case.ordered and [k for k in order if k in got] != [lb for lb, _ in case.series]:
        return Result(False, False, "order differs")
    close = exact = True
    for labels, points in exp.items():
        if set(points) != set(got[labels]):
            return Result(False, False, f"steps of {labels}: expected {sorted(points)}, "
                                        f"got {sorted(got[labels])}")
        for t, v in points.items():
            g = got[labels][t]
            if g is STALE_NAN:
                close = exact = False
            close = close and almost_equal(v, g)
            exact = exact and _same(v, g)
    return Result(close, close and exact, "" if close else f"values: expected {_show(exp)}, "
                                                        f"got {_show(got)}")


def _show(d: dict[Labels, dict[int, float]]) -> str:
    text = "; ".join(f"{dict(k)} {list(v.values())}" for k, v in d.items())
    return text[:300]


def find_files(root: Path) -> tuple[str, list[Path]]:
    """('3', files) for promql/promqltest/testdata, ('2', files) for promql/testdata."""
    for suite, sub in (("3", "promql/promqltest/testdata"), ("2", "promql/testdata")):
        folder = root / sub
        if folder.is_dir():
            return suite, sorted(folder.glob("*.test"))
    if list(root.glob("*.test")):
        return "3", sorted(root.glob("*.test"))
    raise SystemExit(f"no promql test files under {root}")


def main() -> int:
    """Run every file, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prometheus_dir", type=Path)
    ap.add_argument("--semantics", type=int, choices=(2, 3), default=None,
                    help="engine semantics (default: 3 for the 3.x suite, 2 for 2.x)")
    ap.add_argument("--failures", action="store_true", help="print each failed case")
    ap.add_argument("--file", default=None, help="only files whose name contains this")
    args = ap.parse_args()
    suite, files = find_files(args.prometheus_dir)
    semantics = args.semantics or int(suite)
    print(f"suite {suite}.x, semantics {semantics}.x, {len(files)} files")
    print(f"{'file':28} {'cases':>6} {'pass':>6} {'exact':>6} {'%':>6}   {'nh':>4} {'nh pass':>7}")
    totals = Counter[str]()
    reasons = Counter[str]()
    for path in files:
        if args.file and args.file not in path.name:
            continue
        row = Counter[str]()
        for block, case in parse_file(path):
            res = run_case(block, case, semantics)
            kind = "nh" if case.native else "f"
            row[kind] += 1
            row[kind + "_pass"] += res.passed
            row[kind + "_exact"] += res.exact
            if not res.passed and not case.native:
                reasons[res.reason.split(":")[0] + ":" + res.reason.split(":")[1][:50]
                        if res.reason.startswith("error") else res.reason.split(":")[0]] += 1
                if args.failures:
                    print(f"  FAIL {path.name}:{case.line}: {case.expr}\n      {res.reason}")
        totals.update(row)
        print(f"{path.name:28} {row['f']:6} {row['f_pass']:6} {row['f_exact']:6} "
              f"{_pct(row['f_pass'], row['f']):>6}   {row['nh']:4} {row['nh_pass']:7}")
    print(f"{'total':28} {totals['f']:6} {totals['f_pass']:6} {totals['f_exact']:6} "
          f"{_pct(totals['f_pass'], totals['f']):>6}   {totals['nh']:4} {totals['nh_pass']:7}")
    if args.failures:
        print("\nfailures by reason (non-native-histogram cases):")
        for reason, count in reasons.most_common(40):
            print(f"  {count:5}  {reason}")
    return 0


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}" if b else "-"


if __name__ == "__main__":
    sys.exit(main())
