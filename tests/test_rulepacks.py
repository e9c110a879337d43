"""Conformance corpus: real rule packs with their promtool unit tests (tests/data/rulepacks/).

Each pack is copied verbatim from a public repository (SOURCE.yaml names the
repository, commit and files). Every test file must pass both `promtool test
rules` (Prometheus 2.42, the reference) and `sentinel rules test`, and every
rule file must pass `sentinel rules check`; a disagreement fails the test.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sentinel.rules.check import check_rule_files
from sentinel.rules.ruletest import run_rule_tests

PACKS = Path(__file__).parent / "data" / "rulepacks"


def _yaml_files(pack: Path) -> list[Path]:
    return sorted(p for p in pack.rglob("*.yaml") if p.name != "SOURCE.yaml")


def _is_test_file(path: Path) -> bool:
    # libyaml's loader: this runs at collection, in every test worker (pure Python: ~2 CPU-s).
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    return isinstance(doc, dict) and "tests" in doc and "groups" not in doc


def _cases() -> list[tuple[str, Path]]:
    return [(pack.name, f) for pack in sorted(PACKS.iterdir()) if pack.is_dir()
            for f in _yaml_files(pack) if _is_test_file(f)]


def _rule_files() -> list[Path]:
    return [f for pack in sorted(PACKS.iterdir()) if pack.is_dir()
            for f in _yaml_files(pack) if not _is_test_file(f)]


def _ids(cases: list[tuple[str, Path]]) -> list[str]:
    return [str(path.relative_to(PACKS)) for _, path in cases]


def test_corpus_has_eight_packs_from_distinct_repositories() -> None:
    sources = [yaml.safe_load((p / "SOURCE.yaml").read_text()) for p in PACKS.iterdir()]
    repos = {s["repository"] for s in sources}
    assert len(repos) >= 8
    assert all(len(s["commit"]) == 40 for s in sources)
    assert len(_cases()) >= 8


@pytest.mark.parametrize(("pack", "test_file"), _cases(), ids=_ids(_cases()))
def test_sentinel_passes_the_pack(pack: str, test_file: Path) -> None:
    out = io.StringIO()
    code = run_rule_tests([str(test_file)], out)
    assert code == 0, out.getvalue()
    assert "SUCCESS" in out.getvalue() and "WARNING" not in out.getvalue()


@pytest.mark.integration
@pytest.mark.parametrize(("pack", "test_file"), _cases(), ids=_ids(_cases()))
def test_promtool_passes_the_pack(pack: str, test_file: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool (Prometheus 2.42) is required in CI but is not installed")
        pytest.skip("promtool not installed: cannot check the corpus against Prometheus")
    proc = subprocess.run([promtool, "test", "rules", test_file.name], cwd=test_file.parent,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("rule_file", _rule_files(), ids=lambda p: str(p.relative_to(PACKS)))
def test_rules_check_accepts_every_rule_file(rule_file: Path) -> None:
    out = io.StringIO()
    assert check_rule_files([str(rule_file)], out) == 0, out.getvalue()


UNSUPPORTED = """\
groups:
  - name: g
    rules:
      - record: job:x:top
        expr: limitk(2, x)
      - alert: Spread
        expr: mad_over_time(x[5m]) > 1
"""


def test_unsupported_constructs_are_named_with_file_line_col(tmp_path: Path) -> None:
    path = tmp_path / "unsupported.yaml"
    path.write_text(UNSUPPORTED)
    proc = subprocess.run([sys.executable, "-m", "sentinel", "rules", "check", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    # Prometheus 3's experimental PromQL, refused without its feature flag (as Prometheus).
    assert f"{path}:5:15: " in proc.stdout and "limitk() is experimental" in proc.stdout
    assert f"{path}:7:15: " in proc.stdout and "mad_over_time() is experimental" in proc.stdout
    enabled = subprocess.run([sys.executable, "-m", "sentinel", "rules", "check",
                              "--enable-feature=promql-experimental-functions", str(path)],
                             capture_output=True, text=True, timeout=60)
    assert enabled.returncode == 0, enabled.stdout + enabled.stderr
