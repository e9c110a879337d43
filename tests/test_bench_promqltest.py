"""bench/promqltest.py reads Prometheus's promqltest format and judges cases as its runner does."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "promqltest.py"

CASES = """\
# a comment
load 5m
  http_requests{job="api", instance="0"} 0+10x10
  http_requests{job="api", instance="1"} 0+20x10
  {"utf8.metric", "a.b"="c"} 1+1x10
  hist {{schema:0 sum:1 count:1}}x10

eval instant at 50m sum(http_requests)
  {} 300

eval instant at 50m sum(http_requests)
  {} 301

eval_ordered instant at 50m topk(2, http_requests)
  http_requests{job="api", instance="1"} 200
  http_requests{job="api", instance="0"} 100

eval range from 0 to 10m step 5m http_requests{instance="0"}
  http_requests{job="api", instance="0"} 0 10 20

eval instant at 5m {"utf8.metric"}
  {__name__="utf8.metric", "a.b"="c"} 2

eval instant at 0m scalar(vector(1)) + 1
  2

eval_fail instant at 0m http_requests{job="api"} + on() http_requests

eval instant at 5m hist
  hist {{schema:0 sum:1 count:1}}

clear

load 1m
  m 1 2 3

eval instant at 2m m[2m]
  expect range vector from 1m to 2m step 1m
  m 2 3

eval instant at 0m "foo"
  expect string "foo"
"""


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_promqltest", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_promqltest"] = module
    spec.loader.exec_module(module)
    return module


def test_cases_are_judged_as_prometheus_does(tmp_path: Path) -> None:
    bench = _bench()
    path = tmp_path / "promql" / "promqltest" / "testdata" / "t.test"
    path.parent.mkdir(parents=True)
    path.write_text(CASES)
    results = [(case.line, case.native, bench.run_case(block, case, 3))
               for block, case in bench.parse_file(path)]
    by_line = {line: (native, res.passed) for line, native, res in results}
    assert by_line == {
        8: (False, True), 11: (False, False),  # a wrong expected value fails
        14: (False, True), 18: (False, True), 21: (False, True), 24: (False, True),
        27: (False, True),
        29: (True, False),  # a native histogram: counted apart, and Sentinel fails it
        37: (False, True), 41: (False, True),
    }


def test_the_script_prints_a_table(tmp_path: Path) -> None:
    path = tmp_path / "promql" / "promqltest" / "testdata" / "t.test"
    path.parent.mkdir(parents=True)
    path.write_text(CASES)
    out = subprocess.run([sys.executable, str(BENCH), str(tmp_path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "suite 3.x, semantics 3.x" in out
    row = next(line for line in out.splitlines() if line.startswith("t.test")).split()
    assert row[1:3] == ["9", "8"] and row[-2:] == ["1", "0"]  # 9 cases, 8 pass; 1 native
