"""Reloading the whole configuration of a real `sentinel run` (issue 36).

One daemon on loopback, two simulators, three webhook sinks. One SIGHUP swaps a
target, a receiver's URL and the rules at once; a file with a YAML error, then one
with an unknown key, changes nothing; `POST /-/reload` does the same with the write
token and refuses without it. Short intervals: the whole story takes seconds.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_e2e import wait_for
from ha_helpers import Daemon as HaDaemon

from sentinel.demo import WebhookSink
from sentinel.sim.server import start_sim

pytestmark = pytest.mark.integration

WRITE = "reload-test-write-0123456789abcdef"
READ = "reload-test-read-0123456789abcdef"
WAIT_S = 60  # generous: the machine may be loaded; each wait ends at its event

RULE = """\
groups:
  - name: g
    rules:
"""


def _rules(*rules: tuple[str, str]) -> str:
    return RULE + "".join(f"      - alert: {name}\n        expr: {expr}\n        for: 0s\n"
                          for name, expr in rules)


def _config(folder: Path, target: tuple[str, str], hook: str, rules: str) -> str:
    return "\n".join([
        f"database: sqlite:///{folder / 'sentinel.db'}",
        "listen: 127.0.0.1:0",  # the port is read back from the log (ha_helpers.Daemon)
        f"rule_files: [{rules}]",
        "evaluation_interval: 200ms",
        "probe_interval: 0s",
        "api:",
        "  tokens:",
        f"    - {{name: ops, role: write, token: {WRITE}}}",
        f"    - {{name: viewer, role: read, token: {READ}}}",
        "targets:",
        f"  - {{name: {target[0]}, url: '{target[1]}', scrape_interval: 200ms, "
        "scrape_timeout: 200ms}",
        "receivers:",
        "  - name: oncall",
        f"    webhook: {{url: '{hook}', timeout: 2s}}",
        "notify:",
        "  interval: 200ms",
        "  route: {receiver: oncall, group_by: [alertname, target], group_wait: 0s, "
        "group_interval: 0s, repeat_interval: 1h}",
    ]) + "\n"


class Daemon:
    """A `sentinel run` subprocess, its port and its log: ha_helpers.Daemon, which listens on
    port 0 and reads the port back from the log (a port picked free here and handed over
    could be taken by another worker's process during a slow start)."""

    def __init__(self, config: Path, log: Path) -> None:
        self._daemon = HaDaemon(log.parent, log.stem, config=config).start()
        assert self._daemon.proc is not None
        self.proc = self._daemon.proc
        self.log_path = self._daemon.log

    @property
    def port(self) -> int:
        return self._daemon.port

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url(path), timeout=10) as r:
            return str(r.read().decode())

    def metric(self, name: str) -> float | None:
        """A metric of the daemon's own /metrics (first sample), None while not served."""
        try:
            text = self.get("/metrics")
        except OSError:
            return None
        m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def query(self, expr: str) -> list[dict]:
        body = json.loads(self.get(f"/api/v1/query?query={expr}"))
        return list(body["data"]["result"])

    def rule_names(self) -> set[str]:
        body = json.loads(self.get("/api/v1/rules"))
        return {r["name"] for g in body["data"]["groups"] for r in g["rules"]}

    def post_reload(self, token: str | None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(self.url("/-/reload"), data=b"", method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self._daemon.stop()


@pytest.fixture
def sims() -> Iterator[tuple]:
    a, b = start_sim(), start_sim()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def sinks() -> Iterator[tuple[WebhookSink, WebhookSink, WebhookSink]]:
    made = (WebhookSink().start(), WebhookSink().start(), WebhookSink().start())
    yield made
    for s in made:
        s.stop()


def _fired(sink: WebhookSink, alertname: str, target: str | None = None) -> bool:
    return any(a["labels"].get("alertname") == alertname and a["status"] == "firing"
               and (target is None or a["labels"].get("target") == target)
               for _, body, _ in list(sink.received) for a in body.get("alerts", ()))


def _alertnames(sink: WebhookSink) -> set[str]:
    return {a["labels"].get("alertname") for _, body, _ in list(sink.received)
            for a in body.get("alerts", ())}


def _up_targets(d: Daemon) -> set[str]:
    return {s["metric"].get("target") for s in d.query("up")}


def _scrapes(d: Daemon, target: str) -> float:
    text = d.get("/metrics")
    return sum(float(v) for v in re.findall(
        rf'^sentinel_scrapes_total{{[^}}]*target="{target}"[^}}]*}} (\S+)$', text, re.M))


@pytest.fixture
def daemon(tmp_path: Path, sims, sinks) -> Iterator[tuple[Daemon, Path]]:
    """The daemon on config v1: target alpha, receiver → sink A, rule OldRule."""
    sim_a, _ = sims
    (tmp_path / "rules1.yaml").write_text(_rules(("OldRule", "up == 1")))
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(_config(tmp_path, ("alpha", sim_a.url), sinks[0].url, "rules1.yaml"))
    d = Daemon(cfg, tmp_path / "sentinel.log")
    try:
        wait_for(lambda: _fired(sinks[0], "OldRule", "alpha"), WAIT_S, "OldRule's page at A")
        yield d, cfg
    finally:
        d.stop()


def _v2(tmp_path: Path, sims: tuple, hook: str) -> str:
    """Config v2: target beta (not alpha), receiver → `hook`, rules NewRule and Backlog."""
    (tmp_path / "rules2.yaml").write_text(_rules(
        ("NewRule", "up == 1"), ("Backlog", "vllm:num_requests_waiting > 50")))
    return _config(tmp_path, ("beta", sims[1].url), hook, "rules2.yaml")


def test_reload_swaps_target_receiver_and_rule_at_once_and_bad_files_change_nothing(
        tmp_path, sims, sinks, daemon):
    """One daemon start for the three stories: SIGHUP, bad files, POST /-/reload."""
    d, cfg = daemon
    _sighup_applies_all_three(tmp_path, d, cfg, sims, sinks)
    _bad_files_change_nothing(d, cfg, sims, sinks)
    _post_reload_needs_the_write_token(tmp_path, d, cfg, sinks)


def _sighup_applies_all_three(tmp_path: Path, d: Daemon, cfg: Path, sims: tuple,
                              sinks: tuple) -> None:
    sink_a, sink_b, _ = sinks
    assert d.metric("sentinel_config_last_reload_successful") == 1.0
    started = d.metric("sentinel_config_last_reload_success_timestamp_seconds")
    assert started
    cfg.write_text(_v2(tmp_path, sims, sink_b.url))
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: (d.metric("sentinel_config_last_reload_success_timestamp_seconds") or 0)
             > started, WAIT_S, "the reload's success timestamp to advance")
    assert d.metric("sentinel_config_last_reload_successful") == 1.0
    # The rule and the receiver: the new rule's alert goes to the new URL only.
    wait_for(lambda: _fired(sink_b, "NewRule", "beta"), WAIT_S, "NewRule's page at B")
    assert "NewRule" not in _alertnames(sink_a)
    assert d.rule_names() == {"NewRule", "Backlog"}
    # The target: beta scraped, alpha's series ended (staleness markers), not scraped.
    wait_for(lambda: _up_targets(d) == {"beta"}, WAIT_S, "up of beta only")


def _bad_files_change_nothing(d: Daemon, cfg: Path, sims: tuple, sinks: tuple) -> None:
    """A YAML error, then an unknown key; each names sink C, which must stay unused."""
    _, sink_b, sink_c = sinks
    alpha_scrapes = _scrapes(d, "alpha")
    good = cfg.read_text()
    cfg.write_text(good.replace(sink_b.url, sink_c.url) + "targets: [unclosed\n")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.metric("sentinel_config_last_reload_successful") == 0.0, WAIT_S,
             "the reload metric to say 0 after the YAML error")
    wait_for(lambda: re.search(rf"reload refused.*: {re.escape(str(cfg))}:\d+: YAML", d.log()),
             WAIT_S, "the log line naming the file and line")
    cfg.write_text(good.replace(sink_b.url, sink_c.url) + "targetz: []\n")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: re.search(rf"reload refused.*: {re.escape(str(cfg))}:\d+: targetz: ",
                               d.log()), WAIT_S, "the log line naming the unknown key")
    assert d.metric("sentinel_config_last_reload_successful") == 0.0
    # Nothing changed: beta still scraped, alpha not; a new alert goes to B, not C.
    before = _scrapes(d, "beta")
    wait_for(lambda: _scrapes(d, "beta") > before, WAIT_S, "beta still scraped")
    assert _scrapes(d, "alpha") == alpha_scrapes
    sims[1].set_state(num_requests_waiting=100)
    wait_for(lambda: _fired(sink_b, "Backlog", "beta"), WAIT_S, "Backlog's page at B")
    assert not sink_c.received
    assert d.rule_names() == {"NewRule", "Backlog"}
    cfg.write_text(good)


def _post_reload_needs_the_write_token(tmp_path: Path, d: Daemon, cfg: Path,
                                       sinks: tuple) -> None:
    """The same through the API: 401/403 reload nothing; the body says how it went."""
    _, sink_b, sink_c = sinks
    (tmp_path / "rules2.yaml").write_text(_rules(("ThirdRule", "up == 1")))
    v3 = cfg.read_text().replace(sink_b.url, sink_c.url)
    cfg.write_text(v3 + "targetz: []\n")
    assert d.post_reload(None)[0] == 401
    assert d.post_reload(READ)[0] == 403
    status, body = d.post_reload(WRITE)
    assert status == 500 and body["status"] == "error"
    assert re.search(rf"{re.escape(str(cfg))}:\d+: targetz: ", body["error"]), body
    assert d.metric("sentinel_config_last_reload_successful") == 0.0
    assert d.rule_names() == {"NewRule", "Backlog"}  # nothing reloaded so far

    cfg.write_text(v3)
    before = d.metric("sentinel_config_last_reload_success_timestamp_seconds") or 0
    status, body = d.post_reload(WRITE)
    assert (status, body["status"]) == (200, "success"), body
    assert d.metric("sentinel_config_last_reload_successful") == 1.0
    assert (d.metric("sentinel_config_last_reload_success_timestamp_seconds") or 0) > before
    assert d.rule_names() == {"ThirdRule"}
    wait_for(lambda: _fired(sink_c, "ThirdRule", "beta"), WAIT_S, "ThirdRule's page at C")
    assert "configuration reload asked by ops" in d.log()
