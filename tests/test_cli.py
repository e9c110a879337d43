"""The `sentinel` command as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = [
    [], ["run"], ["demo"], ["sim"], ["check", "config"], ["rules", "check"], ["rules", "test"],
    ["incidents", "list"], ["incidents", "show"], ["db", "upgrade"], ["completion"],
]


def sentinel(*args: str, cwd: Path | None = None, timeout: float = 60, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "sentinel", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "sentinel")
def test_every_command_has_help(cmd):
    out = sentinel(*cmd, "--help")
    assert out.returncode == 0, out.stderr
    assert "usage: sentinel" in out.stdout
    # Help that helps: more than the usage line.
    assert len(out.stdout.splitlines()) > 3


def test_version_says_which_build():
    out = sentinel("--version")
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"sentinel \d+\.\d+\.\d+\S* \(commit [0-9a-f]{12}(\+dirty)?; "
                        r"Python 3\.\d+\.\d+, \w+ \w+\)\n", out.stdout), out.stdout


def test_check_config_names_file_line_and_key_for_every_typo(tmp_path):
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(
        "evaluation_interval: 5s\n"
        "targets:\n"
        "  - name: gemma\n"
        "    url: http://127.0.0.1:8000\n"
        "    scrape_intervall: 5s\n"
        "rule_file: [rules/*.yaml]\n"
    )
    out = sentinel("check", "config", str(cfg))
    assert out.returncode == 3  # sentinel.exitcodes.CONFIG
    assert f"{cfg}:5" in out.stderr and "scrape_intervall" in out.stderr
    assert f"{cfg}:6" in out.stderr and "rule_file" in out.stderr


def test_check_config_accepts_the_example_and_hides_its_secrets(tmp_path):
    secrets = {"ONCALL_HOOK": "https://hooks.example.invalid/T0/s3cr3t-path",
               "ONCALL_TOKEN": "tok-9f8e7d"}
    # Laid out as in /etc/sentinel: the config with the shipped rules/ beside it.
    shutil.copy(ROOT / "deploy" / "sentinel.example.yaml", tmp_path / "sentinel.yaml")
    shutil.copytree(ROOT / "rules", tmp_path / "rules")
    out = sentinel("check", "config", "--strict", str(tmp_path / "sentinel.yaml"), env=secrets)
    assert out.returncode == 0, out.stderr
    assert "SUCCESS" in out.stdout
    assert "s3cr3t-path" not in out.stdout + out.stderr
    assert "tok-9f8e7d" not in out.stdout + out.stderr


ALERT_TYPOS = """\
rule_files: [rules.yaml]
targets:
  - name: gemma
    url: http://127.0.0.1:8000
receivers:
  - name: oncall
    webhook: {url: "http://127.0.0.1:9/hook"}
notify:
  route:
    receiver: oncall
    routes:
      - matchers: ['alertname="KVCacheHihg"']
        receiver: oncall
      - matchers: ['alertname=~"Nothing.*"']
        receiver: oncall
  inhibit_rules:
    - source_matchers: ['alertname="targetdown"']
      target_matchers: ['alertname!="TargetDown"']
      equal: [target]
remediation:
  command_allowlist: [/bin/true]
  policies:
    - name: restart
      alerts: [TargetDown, Watchdog, KVCacheHigh2]
      steps:
        - command: {argv: [/bin/true]}
"""

ALERT_RULES = """\
groups:
  - name: g
    rules:
      - {alert: KVCacheHigh, expr: vllm:kv_cache_usage_perc > 0.85}
      - {alert: TargetDown, expr: up == 0}
"""


def test_check_config_strict_names_unknown_alerts_with_line_and_suggestion(tmp_path):
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(ALERT_TYPOS)
    (tmp_path / "rules.yaml").write_text(ALERT_RULES)
    lenient = sentinel("check", "config", str(cfg))
    assert lenient.returncode == 0, lenient.stderr
    assert lenient.stderr.count("warning: ") == 4, lenient.stderr
    strict = sentinel("check", "config", "--strict", str(cfg))
    assert strict.returncode == 3
    # (the notes of who is told what come first; the errors are the point here)
    errors = [ln for ln in strict.stderr.splitlines() if not ln.startswith("note: ")]
    assert errors == [
        f"error: {cfg}:12: notify.route.routes[0].matchers[0]: alert 'KVCacheHihg' is defined "
        "by no loaded rule; did you mean 'KVCacheHigh'?",
        f"error: {cfg}:14: notify.route.routes[1].matchers[0]: alert '=~Nothing.*' is defined "
        "by no loaded rule",
        f"error: {cfg}:17: notify.inhibit_rules[0].source_matchers[0]: alert 'targetdown' is "
        "defined by no loaded rule; did you mean 'TargetDown'?",
        f"error: {cfg}:24: remediation.policies[0].alerts[2]: alert 'KVCacheHigh2' is defined "
        "by no loaded rule; did you mean 'KVCacheHigh'?",
    ], strict.stderr


def test_run_with_bad_config_exits_3_with_the_problem(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("evaluation_interval: five seconds\n")
    out = sentinel("run", "-c", str(cfg))
    assert out.returncode == 3
    assert f"{cfg}:1" in out.stderr and "evaluation_interval" in out.stderr


def test_rules_check_and_test_on_shipped_rules():
    check = sentinel("rules", "check", str(ROOT / "rules" / "vllm.yaml"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout
    test = sentinel("rules", "test", str(ROOT / "rules" / "vllm_test.yaml"))
    assert test.returncode == 0, test.stdout + test.stderr
    assert "SUCCESS" in test.stdout


def test_db_upgrade_then_empty_incident_queries(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    up = sentinel("db", "upgrade", "--database", url)
    assert up.returncode == 0, up.stderr
    listed = sentinel("incidents", "list", "--database", url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    missing = sentinel("incidents", "show", "42", "--database", url)
    assert missing.returncode == 1
    assert "no incident 42" in missing.stderr


def test_incidents_list_filters_and_errors(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert sentinel("db", "upgrade", "--database", url).returncode == 0
    ok = sentinel("incidents", "list", "--database", url, "--since", "1h", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == []
    iso = sentinel("incidents", "list", "--database", url, "--since", "2026-01-01T00:00:00Z")
    assert iso.returncode == 0, iso.stderr
    bad_since = sentinel("incidents", "list", "--database", url, "--since", "yesterday")
    assert bad_since.returncode == 2 and "not a duration" in bad_since.stderr
    bad_limit = sentinel("incidents", "list", "--database", url, "--limit", "0")
    assert bad_limit.returncode == 1 and "limit" in bad_limit.stderr
    assert "Traceback" not in bad_limit.stderr


def test_read_only_commands_never_create_or_migrate(tmp_path):
    # Run in the wrong folder: no ./sentinel.db appears, the error names the path.
    out = sentinel("incidents", "list", cwd=tmp_path)
    assert out.returncode == 4  # sentinel.exitcodes.UNAVAILABLE
    assert f"no database at {tmp_path / 'sentinel.db'}" in out.stderr
    assert "sentinel db upgrade" in out.stderr
    assert list(tmp_path.iterdir()) == []
    # An older schema is reported, not migrated behind the operator's back.
    url = f"sqlite:///{tmp_path / 'old.db'}"
    assert sentinel("db", "upgrade", "--database", url).returncode == 0
    import sqlite3

    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    old = sentinel("incidents", "list", "--database", url)
    assert old.returncode == 4
    assert "schema version 0001" in old.stderr and "sentinel db upgrade" in old.stderr
    with sqlite3.connect(tmp_path / "old.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0001",)


def test_read_only_commands_need_no_receiver_secret(tmp_path):
    db = tmp_path / "s.db"
    assert sentinel("db", "upgrade", "--database", f"sqlite:///{db}").returncode == 0
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"database: sqlite:///{db}\n"
                   "targets: [{name: a, url: 'http://127.0.0.1:9'}]\n"
                   "receivers:\n  - name: r\n    webhook: {url: '${HOOK_NOT_SET_HERE}'}\n")
    env = {k: v for k, v in os.environ.items() if k != "HOOK_NOT_SET_HERE"}
    for cmd in (["incidents", "list"], ["silence", "list"]):
        out = subprocess.run([sys.executable, "-m", "sentinel", *cmd, "-c", str(cfg)],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, (cmd, out.stderr)


def test_unreachable_database_is_one_line_without_the_password():
    out = sentinel("incidents", "list", "--database",
                   "postgresql://sentinel:hunter2-secret@127.0.0.1:9/sentinel")
    assert out.returncode == 4
    assert "hunter2-secret" not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr and out.stderr.startswith("sentinel: ")


def test_db_upgrade_says_what_it_did(tmp_path):
    from sentinel.incidents.db import Database, find_migrations_dir, head_revision

    head = head_revision()
    url = f"sqlite:///{tmp_path / 'x.db'}"
    first = sentinel("db", "upgrade", "--database", url)
    assert first.returncode == 0 and f"created at {head}" in first.stdout, first.stdout
    again = sentinel("db", "upgrade", "--database", url)
    assert f"up to date ({head})" in again.stdout
    # A database one migration behind: the output names both revisions.
    body = next(p.read_text() for p in (find_migrations_dir() / "versions").glob("*.py")
                if re.search(rf'^revision(?:: str)? = ["\']{head}', p.read_text(), re.M))
    previous = re.search(r'^down_revision(?:: [^=]+)? = ["\']([^"\']+)', body, re.M)
    assert previous is not None
    old = f"sqlite:///{tmp_path / 'old.db'}"
    Database(old).upgrade(previous.group(1))
    upgraded = sentinel("db", "upgrade", "--database", old)
    assert f"upgraded from {previous.group(1)} to {head}" in upgraded.stdout, upgraded.stdout
