"""The reload's pure parts: what changed, what needs a restart, all-or-nothing, the metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sentinel.config import Config, load_config, parse_config
from sentinel.daemon.reload import (
    Reloader,
    ReloadMetrics,
    diff_targets,
    restart_needed,
    sources_changed,
)

BASE = {"rule_files": [], "targets": [{"name": "a", "url": "http://127.0.0.1:9"}]}


def _config(**update: object) -> Config:
    return parse_config({**BASE, **update})


def _target(name: str, url: str = "http://127.0.0.1:9", **more: object) -> dict:
    return {"name": name, "url": url, **more}


def test_diff_targets_names_what_went_came_and_changed():
    old = _config(targets=[_target("a"), _target("b"), _target("c")]).targets
    new = _config(targets=[_target("a"), _target("b", "http://127.0.0.1:10"),
                           _target("d")]).targets
    diff = diff_targets(old, new)
    assert diff.removed == ("c",)
    assert [t.name for t in diff.added] == ["d"]
    assert [t.name for t in diff.changed] == ["b"]  # a is unchanged: its jobs and state stay
    assert not diff_targets(old, old)


@pytest.mark.parametrize(("update", "key"), [
    ({"database": "sqlite:///elsewhere.db"}, "database"),
    ({"listen": "127.0.0.1:9999"}, "listen"),
    ({"ha": {"lease": "5s"}}, "ha"),
    ({"api": {"allowed_hosts": ["sentinel.example.com"]}}, "api.allowed_hosts"),
    ({"evaluation_interval": "30s"}, "evaluation_interval"),
    ({"retention": "1h"}, "retention"),
    ({"external_url": "https://sentinel.example.com"}, "external_url"),
    ({"probe_interval": "1m"}, "probe_interval"),
])
def test_keys_the_daemon_holds_need_a_restart(update, key):
    lines = restart_needed(_config(), _config(**update))
    # (external_url follows listen when not set: both are named then)
    assert lines[0] == f"{key}: changed; a restart is needed to apply it", lines


@pytest.mark.parametrize("update", [
    {"targets": [_target("b")]},
    {"receivers": [{"name": "r", "webhook": {"url": "http://127.0.0.1:9/hook"}}]},
    {"scrape_interval": "5s"},
    {"api": {"tokens": [{"name": "w", "role": "write", "token": "0123456789abcdef0123"}]}},
    # Issue 49: `fleet:` is applied in place (its open incidents kept)...
    {"fleet": {"min_targets": 20, "min_fraction": 0.5, "breakdown_by": ["pool"]}},
    {"fleet": {"enabled": False}},
])
def test_targets_receivers_and_rules_reload_in_place(update):
    assert restart_needed(_config(), _config(**update)) == []


def test_fleet_group_by_needs_a_restart():
    """...but not its grouping: the open fleet incidents are keyed by it."""
    (line,) = restart_needed(_config(), _config(fleet={"group_by": ["pool"]}))
    assert line.startswith("fleet.group_by: changed; a restart is needed to apply it")
    assert restart_needed(_config(), _config(fleet={"group_by": ["pool"], "enabled": False}))
    # Off: turned on with a grouping in place (daemon/fleetwiring.retune).
    assert restart_needed(_config(fleet={"enabled": False}),
                          _config(fleet={"group_by": ["pool"]})) == []


def test_log_sources_are_rebuilt_only_when_they_change(tmp_path):
    log = str(tmp_path / "vllm.log")
    plain = _config()
    logged = _config(targets=[_target("a", logs={"files": [log]})])
    moved = _config(targets=[_target("a", "http://127.0.0.1:10", logs={"files": [log]})])
    assert sources_changed(plain, logged)
    assert not sources_changed(logged, moved)  # the URL is the scrape's, not the source's
    more = _config(targets=[_target("a", logs={"files": [log]}), _target("b")])
    assert not sources_changed(logged, more)  # a target without sources re-opens nothing
    assert sources_changed(logged, _config(targets=[_target("a", logs={"files": [log]})],
                                           signatures=log))


class Applied:
    """The App's side of a reload, as a fake: what it was given (or it raises)."""

    def __init__(self, fail: bool = False) -> None:
        self.configs: list[Config] = []
        self.fail = fail

    def __call__(self, new: Config) -> None:
        if self.fail:
            raise RuntimeError("the scheduler went away")
        self.configs.append(new)


def _reloader(path: Path, running: Config, apply: Applied, now: list[float]
              ) -> tuple[Reloader, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = ReloadMetrics(registry, now[0])
    return Reloader(lambda: load_config(path), str(path), lambda: running, apply, metrics,
                    lambda: now[0]), registry


def _metrics(registry: CollectorRegistry) -> tuple[float | None, float | None]:
    return (registry.get_sample_value("sentinel_config_last_reload_successful"),
            registry.get_sample_value("sentinel_config_last_reload_success_timestamp_seconds"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_good_file_is_applied_and_the_metrics_say_when(tmp_path):
    path = _write(tmp_path / "s.yaml", "rule_files: []\n")
    running, apply, now = load_config(path), Applied(), [100.0]
    reloader, registry = _reloader(path, running, apply, now)
    assert _metrics(registry) == (1.0, 100.0)  # the start counts as the first load
    _write(path, "rule_files: []\nscrape_interval: 7s\n")
    now[0] = 160.0
    result = reloader.reload()
    assert result and result.message == f"configuration reloaded from {path}"
    assert [c.scrape_interval_ms for c in apply.configs] == [7000]
    assert _metrics(registry) == (1.0, 160.0)


@pytest.mark.parametrize(("text", "expect"), [
    ("rule_files: [\n", r":2: YAML syntax error"),
    ("rule_files: []\ntargetz: []\n", r":2: targetz: unknown key"),
    ("rule_files: []\ndatabase: sqlite:///other.db\n",
     r": database: changed; a restart is needed to apply it"),
    ("rule_files: [bad.yaml]\n", r"bad.yaml:\d+:\d+: "),  # what the pre-flight refuses
])
def test_a_bad_file_changes_nothing_and_says_why(tmp_path, text, expect, caplog):
    import re

    path = _write(tmp_path / "s.yaml", "rule_files: []\n")
    _write(tmp_path / "bad.yaml", "groups:\n  - name: g\n    rules:\n      - alert: X\n"
           "        expr: up ==\n")
    running, apply, now = load_config(path), Applied(), [100.0]
    reloader, registry = _reloader(path, running, apply, now)
    _write(path, text)
    now[0] = 160.0
    result = reloader.reload()
    assert not result and apply.configs == []
    assert re.search(expect, result.message), result.message
    assert _metrics(registry) == (0.0, 100.0)
    refusals = [r.getMessage() for r in caplog.records if "reload refused" in r.getMessage()]
    assert refusals and all(str(tmp_path) in line for line in refusals), refusals


def test_a_good_file_with_a_missing_log_file_is_applied_with_a_warning(tmp_path, caplog):
    path = _write(tmp_path / "s.yaml", "rule_files: []\n")
    apply = Applied()
    reloader, _ = _reloader(path, load_config(path), apply, [100.0])
    missing = tmp_path / "later.log"
    _write(path, "rule_files: []\nsignatures: " + str(Path(__file__).parents[1] / "rules" /
                                                     "signatures.yaml") +
           f"\ntargets: [{{name: a, url: 'http://127.0.0.1:9', logs: {{files: ['{missing}']}}}}]\n")
    assert reloader.reload()
    assert len(apply.configs) == 1
    assert any(f"{missing} does not exist (yet)" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)


def test_a_failure_while_applying_says_so_and_the_metric_is_0(tmp_path):
    path = _write(tmp_path / "s.yaml", "rule_files: []\n")
    reloader, registry = _reloader(path, load_config(path), Applied(fail=True), [100.0])
    result = reloader.reload()
    assert not result and "the scheduler went away" in result.message
    assert _metrics(registry)[0] == 0.0
