"""bench/rules.py stays runnable: its pack loads, and a tiny fleet evaluates without errors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent.parent / "bench" / "rules.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_rules", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rules"] = module
    spec.loader.exec_module(module)
    return module


def test_pack_has_200_rules_half_recording_and_evaluates(tmp_path: Path) -> None:
    bench = _bench()
    pack = bench.rule_pack()
    rules = [r for g in pack["groups"] for r in g["rules"]]
    assert len(rules) == 200 and sum("record" in r for r in rules) == 100
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(pack, sort_keys=False))
    series, times, alerts = bench.run_sentinel(rule_file, bench.base_series(), 8, 30, 1)
    assert series > 8 * 80 and len(times) == 1 and alerts >= 1
