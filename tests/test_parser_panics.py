"""Parser panics are errors: promql-parser (Rust) must never end `rules check`, `run` or a reload.

`up @ -1` made the binding panic (pyo3's PanicException, a BaseException) when
Sentinel read the `@` time back; a SIGHUP with such a file killed a running
daemon. Every `@` case here is also put to promtool 2.42: what it refuses,
Sentinel refuses; what Sentinel refuses beyond that is a documented limit.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for, write_config
from ha_helpers import Daemon
from test_rules_promtool import promtool

from sentinel.promql import compile as compile_mod
from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError

# (expression, promtool accepts, Sentinel accepts, where Sentinel's error points)
AT_CASES = [
    ("up @ -1 > 0", True, False, "@"),
    ("up @ - 1", True, False, "@"),
    ("up @ -0.5", True, False, "@"),
    ("rate(up[5m] @ -5)", True, False, "@"),
    ("up[5m:1m] @ -1", True, False, "@"),
    ("up @ -0", True, True, None),
    ("up @ 1.5", True, True, None),
    ("up @ 0x10", True, True, None),
    ("up @ 253402300800", True, True, None),  # after year 9999: no datetime overflow
    ("up @ 1e15", True, True, None),
    ("up @ 1e30", False, False, "1e30"),
    ("up @ -1e30", False, False, "1e30"),
    ("up @ 18446744073709551615", False, False, "18446744073709551615"),
    ("up @ 5m", False, False, "5m"),
    ('up{a="@ -1"} @ 3', True, True, None),  # an @ inside a string is no modifier
]


@pytest.mark.parametrize(("text", "promtool_ok", "ok", "needle"), AT_CASES)
def test_at_values_never_panic_and_errors_have_positions(text, promtool_ok, ok, needle) -> None:
    if ok:
        compile_expr(text)
        return
    with pytest.raises(PromQLError) as info:
        compile_expr(text)
    assert info.value.position == text.index(needle)


@pytest.mark.parametrize(("text", "promtool_ok", "ok", "needle"), AT_CASES)
def test_at_verdicts_agree_with_promtool(tmp_path: Path, text, promtool_ok, ok, needle) -> None:
    path = _rule_file(tmp_path, text)
    res = promtool("check", "rules", str(path))
    assert (res.returncode == 0) == promtool_ok, res.stdout + res.stderr
    assert ok <= promtool_ok  # Sentinel never accepts what promtool refuses


def test_huge_at_reads_exact_milliseconds() -> None:
    sel = compile_expr("up @ 253402300800.5")
    assert sel.at == 253_402_300_800_500  # type: ignore[attr-defined]


class _FakePanic(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException, not an Exception."""


def test_any_failure_of_the_binding_is_a_promql_error(monkeypatch) -> None:
    def panics(text: str) -> object:
        raise _FakePanic("called `Result::unwrap()` on an `Err` value")

    monkeypatch.setattr(compile_mod.pp, "parse", panics)
    with pytest.raises(PromQLError, match="parser failed") as info:
        compile_expr("up > 0 # a text not compiled before")
    assert info.value.position == 0


def _rule_file(folder: Path, expr: str) -> Path:
    path = folder / "rules.yaml"
    path.write_text(f"groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: {expr}\n")
    return path


def _sentinel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sentinel", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_rules_check_reports_the_position_without_a_traceback(tmp_path: Path) -> None:
    path = _rule_file(tmp_path, "up @ -1 > 0")
    res = _sentinel("rules", "check", str(path))
    assert res.returncode == 1
    assert f"{path}:5:" in res.stdout + res.stderr
    assert "negative @ timestamp" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "panicked" not in res.stderr


def test_run_refuses_the_file_with_a_position_and_no_traceback(tmp_path: Path, sim) -> None:
    cfg = write_config(tmp_path, [("gemma", sim.url)], None, "")
    _rule_file(tmp_path, "up @ -1 > 0")
    res = _sentinel("run", "-c", str(cfg))
    assert res.returncode != 0
    assert "rules.yaml:5:" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "panicked" not in res.stderr


@pytest.mark.integration
def test_sighup_with_a_panicking_file_keeps_the_daemon(tmp_path: Path, sim) -> None:
    good = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up > 1\n"
    cfg = write_config(tmp_path, [("gemma", sim.url)], None, good)
    # Port 0, read back from the log: a port picked free here could be taken meanwhile.
    daemon = Daemon(tmp_path, "daemon", config=cfg).start()
    assert daemon.proc is not None
    proc = daemon.proc
    try:
        wait_for(lambda: daemon.port and _status(f"http://127.0.0.1:{daemon.port}/healthz")
                 == 200, 60, "the daemon to serve /healthz")
        url = f"http://127.0.0.1:{daemon.port}/healthz"
        _rule_file(tmp_path, "up @ -1 > 0")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in (tmp_path / "daemon.log").read_text(), 30,
                 "the reload to fail")
        assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
        assert _status(url) == 200
        text = (tmp_path / "daemon.log").read_text()
        assert "negative @ timestamp" in text and "panicked" not in text
    finally:
        daemon.stop()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None
