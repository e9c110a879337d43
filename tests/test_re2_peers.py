"""RE2 against the real tools: promtool 2.42 (rules) and amtool 0.25 (silences).

Prometheus and Alertmanager compile regexes with Go's RE2, fully anchored.
Sentinel must accept what they accept, match what they match, and refuse
what they refuse, at load, with a position (issue 35).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import WRITE_TOKEN
from fixtures_e2e import write_config

from sentinel import exitcodes
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents.db import Database
from sentinel.model import labels_of
from sentinel.respond.notify.mute import mute_reason
from sentinel.respond.notify.silences import active_silences
from sentinel.rules.ruletest import run_rule_tests

pytestmark = pytest.mark.integration


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} ({package}) is required under CI=true")
        pytest.skip(f"{name} not installed (apt-get install {package})")
    return path


REFUSED = """\
groups:
  - name: g
    rules:
      - record: job:ok
        expr: up{job=~"[[:alnum:]]+"}
      - alert: LookAhead
        expr: up{job=~"api(?=-prod)"} == 0
      - alert: BackReference
        expr: up{instance!~"(a)\\\\1"} == 0
"""


def _promtool_positions(out: str, path: Path) -> list[tuple[int, int, str]]:
    """(line, column, reason) of each refused expression in promtool's output."""
    found = re.findall(rf"{re.escape(path.name)}: (\d+):(\d+): .*? could not parse expression: "
                       r"(\d+):(\d+): parse error: error parsing regexp: (.*)", out)
    return [(int(line), int(col) + int(ecol) - 1, reason)
            for line, col, _, ecol, reason in found]


def test_rules_check_refuses_what_promtool_refuses_at_the_same_place(tmp_path: Path) -> None:
    promtool = _tool("promtool", "prometheus")
    path = tmp_path / "refused.yaml"
    path.write_text(REFUSED)
    ref = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert ref.returncode == 1
    expected = _promtool_positions(ref.stdout + ref.stderr, path)
    assert [reason for *_, reason in expected] == [
        "invalid or unsupported Perl syntax: `(?=`", "invalid escape sequence: `\\1`"]
    ours = subprocess.run([sys.executable, "-m", "sentinel", "rules", "check", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert ours.returncode == 1
    assert "Traceback" not in ours.stdout + ours.stderr
    for line, col, reason in expected:
        assert f"{path}:{line}:{col}: " in ours.stdout, ours.stdout
        assert f"error parsing regexp: {reason}" in ours.stdout
    assert "job:ok" not in ours.stdout  # the POSIX class is fine for both


PACK_RULES = """\
groups:
  - name: hosts
    rules:
      - record: instance:up:host
        expr: label_replace(up, "host", "$1", "instance", "([[:alnum:]-]+)\\\\.[[:alpha:]]+:\\\\d+")
      - alert: CanaryDown
        expr: up{job=~"(?i)canary-\\\\d+"} == 0
        labels: {severity: page}
"""

PACK_TEST = """\
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="Canary-1", instance="tpu-v6e-7.zone:8000"}'
        values: '1 0 0'
      - series: 'up{job="canary-x", instance="10.0.0.1:8000"}'
        values: '0 0 0'
      - series: 'up{job="xcanary-2", instance="a.b.c:80"}'
        values: '0 0 0'
    promql_expr_test:
      - expr: instance:up:host
        eval_time: 1m
        exp_samples:
          - labels: 'instance:up:host{job="Canary-1", instance="tpu-v6e-7.zone:8000",
                      host="tpu-v6e-7"}'
            value: 0
          - labels: 'instance:up:host{job="canary-x", instance="10.0.0.1:8000"}'
            value: 0
          - labels: 'instance:up:host{job="xcanary-2", instance="a.b.c:80"}'
            value: 0
    alert_rule_test:
      - eval_time: 2m
        alertname: CanaryDown
        exp_alerts:
          - exp_labels: {severity: page, job: Canary-1, instance: tpu-v6e-7.zone:8000}
"""


def test_posix_classes_and_flags_pass_promtool_and_sentinel_alike(tmp_path: Path) -> None:
    """label_replace with [[:alnum:]] sets its label, `(?i)` and `\\d` match, anchoring holds."""
    promtool = _tool("promtool", "prometheus")
    (tmp_path / "rules.yaml").write_text(PACK_RULES)
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(PACK_TEST)
    ref = subprocess.run([promtool, "test", "rules", test_file.name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    out = io.StringIO()
    assert run_rule_tests([str(test_file)], out) == 0, out.getvalue()


RULES = """\
groups:
  - name: g
    interval: 200ms
    rules:
      - alert: Always
        expr: vector(1)
"""


@pytest.fixture
def daemon(tmp_path: Path, sim, sink) -> Iterator[tuple[str, Path]]:  # noqa: ANN001
    cfg = write_config(tmp_path, [("tpu-a", sim.url)], sink.url, RULES)
    cfg.write_text(cfg.read_text() + f"""\
api:
  tokens:
    - {{name: amtool-user, role: write, token: {WRITE_TOKEN}}}
""")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield f"http://{host}:{port}", tmp_path
    app.stop(2)


def test_amtool_regex_silence_is_stored_and_mutes_as_alertmanager(daemon) -> None:  # noqa: ANN001
    amtool = _tool("amtool", "prometheus-alertmanager")
    url, folder = daemon
    http_config = folder / "http.yaml"
    http_config.write_text(f"authorization:\n  type: Bearer\n  credentials: {WRITE_TOKEN}\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([amtool, f"--alertmanager.url={url}",
                               f"--http.config.file={http_config}", *args],
                              capture_output=True, text=True, timeout=30)

    added = run("silence", "add", 'target=~"tpu-[[:alpha:]]+\\\\d?"', "alertname=~(?i)always",
                "--comment=maintenance", "--duration=1h")
    assert added.returncode == 0, added.stderr
    (silence,) = json.loads(run("silence", "query", "-o", "json").stdout)
    assert silence["matchers"] == [
        {"name": "target", "value": "tpu-[[:alpha:]]+\\d?", "isRegex": True, "isEqual": True},
        {"name": "alertname", "value": "(?i)always", "isRegex": True, "isEqual": True}]
    # The silence as the dispatcher reads it back from the database.
    db = Database(f"sqlite:///{folder / 'sentinel.db'}")
    with db.session() as s:
        silences = active_silences(s, int(time.time() * 1000))
    assert len(silences) == 1

    def muted(target: str) -> bool:
        labels = labels_of({"alertname": "Always", "target": target})
        return mute_reason(labels, silences, [], [], silences[0].starts_at_ms + 1) is not None

    assert muted("tpu-a") and muted("tpu-abc7")
    assert not muted("gpu-tpu-a")  # anchored: containing a match is not matching
    assert not muted("tpu-a77")
    # A look-ahead: amtool refuses it itself, and so does Sentinel's API, in the same words.
    # (Not first: amtool reads a first argument that is no matcher as an alertname.)
    refused = run("silence", "add", "alertname=Always", "target=~tpu(?=-a)", "--comment=x")
    reason = "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"
    assert refused.returncode != 0 and reason in refused.stderr
    r = httpx.post(f"{url}/api/v2/silences", headers={"Authorization": f"Bearer {WRITE_TOKEN}"},
                   json={"matchers": [{"name": "target", "value": "tpu(?=-a)", "isRegex": True}],
                         "startsAt": "2030-01-01T00:00:00Z", "endsAt": "2030-01-02T00:00:00Z",
                         "comment": "x", "createdBy": "me"})
    assert r.status_code == 400, r.text
    assert reason in r.json()["error"], r.text


ROUTING = """\
route:
  receiver: a
  routes:
    - receiver: b
      matchers: ['job=~"api-[[:digit:]]+"', 'severity=~"(?i)CRIT\\\\d?"']
inhibit_rules:
  - source_matchers: ['severity=~"crit\\\\d"']
    target_matchers: ['severity=warning']
"""


def _check_both(tmp_path: Path, routing: str) -> tuple[subprocess.CompletedProcess[str], ...]:
    """amtool check-config on an Alertmanager file, `sentinel check config` on the same tree."""
    amtool = _tool("amtool", "prometheus-alertmanager")
    am = tmp_path / "alertmanager.yml"
    am.write_text(routing + "receivers: [{name: a}, {name: b}]\n")
    ours = tmp_path / "sentinel.yaml"
    ours.write_text(f"database: sqlite:///{tmp_path / 's.db'}\nrule_files: []\nreceivers:\n"
                    "  - {name: a, webhook: {url: 'http://127.0.0.1:9/a'}}\n"
                    "  - {name: b, webhook: {url: 'http://127.0.0.1:9/b'}}\n"
                    "notify:\n" + "".join(f"  {line}\n" for line in routing.splitlines()))
    return (subprocess.run([amtool, "check-config", str(am)], capture_output=True, text=True,
                           timeout=30),
            subprocess.run([sys.executable, "-m", "sentinel", "check", "config", str(ours)],
                           capture_output=True, text=True, timeout=60))


def test_route_and_inhibit_matchers_accept_and_refuse_as_alertmanager(tmp_path: Path) -> None:
    ref, ours = _check_both(tmp_path, ROUTING)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert ours.returncode == 0, ours.stdout + ours.stderr
    refused = ROUTING.replace("crit\\\\d", "crit(?!ical)")
    ref, ours = _check_both(tmp_path, refused)
    reason = "error parsing regexp: invalid or unsupported Perl syntax: `(?!`"
    assert ref.returncode == 1 and reason in ref.stdout + ref.stderr
    # amtool exits 1; Sentinel's code for an invalid configuration is its own (exitcodes.CONFIG).
    assert ours.returncode == exitcodes.CONFIG and reason in ours.stdout + ours.stderr
    where = "sentinel.yaml:13: notify.inhibit_rules[0].source_matchers[0]"
    assert where in ours.stdout + ours.stderr


def test_routes_pick_a_receiver_by_posix_class_and_flags() -> None:
    import yaml

    from sentinel.config.notify import RouteConfig
    from sentinel.respond.notify.routing import build_route, match_routes

    root = build_route(RouteConfig.model_validate(yaml.safe_load(ROUTING)["route"]), [])
    assert root is not None

    def receivers(**labels: str) -> list[str]:
        return [r.receiver for r in match_routes(root, labels_of(labels))]

    assert receivers(job="api-12", severity="Crit1") == ["b"]
    assert receivers(job="api-12", severity="critical") == ["a"]  # anchored
    assert receivers(job="api-x", severity="crit") == ["a"]
