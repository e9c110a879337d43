"""Issue 33: act first, then tell once.

The real daemon (in process) with a simulated vLLM behind a fake Docker socket, a
second simulator as the model endpoint (diagnosis), a warm-restart policy, and two
webhook receivers on loopback: `oncall` (the pager, the root route) and `chat`
(`notify.act_first.receiver`). A crash line is written into the followed log:

- the warm restart verifies: nobody is paged; chat gets one message with the
  excerpt, the action, the time to recovery and a runbook; the incident is resolved
  at verification;
- the restart is refused (cold XLA cache): one page, released by the audited
  refusal (not by the grace running out, on Sentinel's clock), with the runbook and
  the refusal; the model's runbook, which comes
  later, is sent as an update of that page (same groupKey, status "update");
- the refused crash also takes the target down and fails its health probe: one
  incident, at most one page, and the timeline names the alerts that joined it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.demo import WebhookSink
from sentinel.incidents import queries
from sentinel.incidents.convert import dt_to_ms
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

CRASH = "VLLMHBMOutOfMemory"
WINDOW_S = 10  # the crash rule's window: its alert ends this long after the line
RULES = f"""\
groups:
  - name: crashes
    interval: 200ms
    rules:
      - alert: {CRASH}
        expr: >-
          sum by (target) (increase(
            sentinel_log_signature_matches_total{{category="hbm_oom"}}[{WINDOW_S}s])) > 0
        labels: {{severity: critical}}
        annotations: {{summary: "TPU HBM exhausted on {{{{ $labels.target }}}}"}}
      - alert: VLLMTargetDown
        expr: up == 0
        for: 3s  # shipped: 30s. 1 s let a failed scrape beat the crash line on a busy machine
        labels: {{severity: critical}}
      - alert: VLLMHealthCheckFailing
        expr: max by (target) (sentinel_probe_success{{probe="health"}}) == 0
        for: 2s
        labels: {{severity: critical}}
"""


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


@pytest.fixture
def chat() -> Iterator[WebhookSink]:
    s = WebhookSink().start()
    yield s
    s.stop()


@pytest.fixture
def model() -> Iterator[SimServer]:
    """The model endpoint: a second simulator, slowed so its runbook comes after the page."""
    m = start_sim()
    httpx.post(f"{m.url}/sim/state", json={"latency_s": 2.0}).raise_for_status()
    yield m
    m.stop()


def _config(folder: Path, sim: SimServer, sock: str, log: Path, oncall: str, chat: str,
            model: str) -> Path:
    (folder / "rules.yaml").write_text(RULES)
    path = folder / "sentinel.yaml"
    path.write_text(f"""\
database: sqlite:///{folder / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
probe_interval: 500ms
targets:
  - name: tpu-a
    url: {sim.url}
    scrape_interval: 500ms
    scrape_timeout: 400ms
    logs: {{files: ['{log}'], poll_interval: 100ms}}
receivers:
  - name: oncall
    webhook: {{url: '{oncall}', timeout: 2s}}
  - name: chat
    webhook: {{url: '{chat}', timeout: 2s}}
notify:
  interval: 200ms
  route: {{receiver: oncall, group_by: [target], group_wait: 0s, group_interval: 0s,
           repeat_interval: 1h}}
  act_first: {{grace: 1m, receiver: chat}}
diagnosis:
  endpoints: [{{name: sim, url: '{model}', timeout: 30s}}]
  interval: 200ms
  max_tokens: 256
remediation:
  policies:
    - name: restart-on-hbm-oom
      alerts: [{CRASH}]
      cooldown: 1m
      steps:
        - docker_restart: {{container: vllm, socket: '{sock}', settle: 200ms}}
          timeout: 20s
          verify_deadline: 10s
""")
    return path


def _daemon(tmp: Path, sock_dir: Path, warm: bool, oncall: WebhookSink, chat: WebhookSink,
            model: SimServer) -> tuple[App, SimServer, object, Path]:
    cache = tmp / "xla"
    cache.mkdir()
    if warm:
        (cache / "jit_step_fn.bin").write_bytes(b"\0" * 512)
    log = tmp / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    sim = start_sim()
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), log_file=str(log),
                                              release_s=0.2, warm_start_s=0.3), path)
    app = App(load_config(_config(tmp, sim, path, log, oncall.url, chat.url, model.url)))
    app.start()
    wait_for(lambda: app.metrics.registry.get_sample_value(
        "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
        30, "the log source to join the file")
    return app, sim, sock, log


def _stop(app: App, sim: SimServer, sock: object) -> None:
    app.stop(2)
    sock.stop()  # type: ignore[attr-defined]
    sim.stop()


def _pages(sink: WebhookSink, status: str = "firing") -> list[tuple[float, dict]]:
    return [(t, b) for t, b, _ in list(sink.received) if b.get("status") == status]


def _crash_incident(app: App):  # noqa: ANN202
    db = app.pipeline.tracker.db
    found = [i for i in queries.list_incidents(db) if i.alertname == CRASH]
    return queries.get_incident(db, found[0].id) if found else None


def test_a_verified_warm_restart_pages_nobody_and_tells_chat_once(
        tmp_path, sock_dir, sink, chat, model) -> None:
    app, sim, sock, _ = _daemon(tmp_path, sock_dir, True, sink, chat, model)
    try:
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        (told,) = wait_for(lambda: list(chat.received), 30, "the fixed-by-Sentinel message")
        body = told[1]
        assert body["status"] == "resolved" and body["receiver"] == "chat"
        # The crash, and whatever joined its incident while the server restarted.
        (alert,) = [a for a in body["alerts"] if a["labels"]["alertname"] == CRASH]
        ann = alert["annotations"]
        assert ann["sentinel_outcome"] == "fixed"
        assert "docker_restart" in ann["sentinel_action"] and "step 1" in ann["sentinel_action"]
        assert ann["runbook"]
        detail = _crash_incident(app)
        excerpt = next(e for e in detail.timeline if e.kind == "log_excerpt")
        assert ann["sentinel_excerpt"] == "\n".join(excerpt.data["excerpt"])[:4000]
        assert "EngineCore encountered a fatal error" in ann["sentinel_excerpt"]
        assert detail.incident.status == "resolved"
        ended = next(e for e in detail.timeline if e.kind == "incident_resolved")
        assert "resolved at verification" in ended.message
        assert ann["sentinel_time_to_recovery"] == f"{detail.clocks.recovery_ms / 1000:.1f}s"
        assert any("not paged: fixed by Sentinel" in e.message for e in detail.timeline)
        # The crash alert goes on firing from its window, then ends: still nobody is paged.
        wait_for(lambda: not app.pipeline.rules.active_alerts(), WINDOW_S + 30,
                 "the alerts to end")
        app.notifier.run_once()
        assert list(sink.received) == [], [b for _, b, _ in sink.received]
        assert len(chat.received) == 1
        assert [i.alertname for i in queries.list_incidents(app.pipeline.tracker.db)] == [CRASH]
    finally:
        _stop(app, sim, sock)


def test_a_refused_restart_pages_once_at_the_refusal_then_updates_the_runbook(
        tmp_path, sock_dir, sink, chat, model) -> None:
    offset = time.time() - time.monotonic()  # the sink stamps arrivals with monotonic time
    app, sim, sock, _ = _daemon(tmp_path, sock_dir, False, sink, chat, model)
    try:
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        ((arrived, page),) = wait_for(lambda: _pages(sink), 30, "the page")
        (alert,) = [a for a in page["alerts"] if a["labels"]["alertname"] == CRASH]
        ann = alert["annotations"]
        assert "refused" in ann["sentinel_remediation"] and "is empty" in \
            ann["sentinel_remediation"], ann
        assert "cold_cache" in ann["sentinel_remediation"]
        assert ann["runbook"], "the page carries the signature's runbook"
        # ...and the crash lines (issue 48: no page carried an excerpt).
        assert "EngineCore encountered a fatal error" in ann["sentinel_excerpt"], ann
        detail = _crash_incident(app)
        refusal = next(e for e in detail.timeline if e.kind == "action"
                       and e.data.get("reason") == "cold_cache")
        late_s = arrived + offset - dt_to_ms(refusal.at) / 1000
        print(f"page received {late_s * 1000:.0f} ms after the audited refusal")  # a figure
        # At the refusal, not when the act-first grace (1 m) ends: the hold was released by
        # the refusal (the reason is the page's own remediation text, not the grace running
        # out), at or after it and before the grace's end, all on Sentinel's clock.
        held = next(e for e in detail.timeline if (e.data or {}).get("act_first") == "waiting")
        paged = next(e for e in detail.timeline if (e.data or {}).get("act_first") == "paged")
        assert paged.data["reason"] == ann["sentinel_remediation"], paged.data
        grace_end_ms = dt_to_ms(held.at) + held.data["grace_ms"]
        assert dt_to_ms(refusal.at) <= dt_to_ms(paged.at) < grace_end_ms, (refusal, paged)

        # The model's runbook comes after the page: an update of the same page.
        ((_, update),) = wait_for(lambda: _pages(sink, "update"), 60, "the runbook update")
        assert update["groupKey"] == page["groupKey"]
        (updated,) = [a for a in update["alerts"] if a["labels"]["alertname"] == CRASH]
        assert updated["annotations"]["runbook"] != ann["runbook"]
        assert updated["annotations"]["sentinel_remediation"] == ann["sentinel_remediation"]
        assert len(_pages(sink)) == 1 and list(chat.received) == []
        detail = _crash_incident(app)
        assert any(e.kind == "runbook" and e.data.get("source") == "model"
                   for e in detail.timeline)
        assert any("sent as an update to oncall" in e.message for e in detail.timeline)
    finally:
        _stop(app, sim, sock)


def test_a_refused_crash_that_takes_the_target_down_is_one_incident_and_one_page(
        tmp_path, sock_dir, sink, chat, model) -> None:
    app, sim, sock, _ = _daemon(tmp_path, sock_dir, False, sink, chat, model)
    db = app.pipeline.tracker.db
    try:
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()

        def joined() -> set[str]:
            detail = _crash_incident(app)
            return {e.data["joined"] for e in detail.timeline
                    if e.kind == "note" and (e.data or {}).get("joined")} if detail else set()
        wait_for(lambda: joined() >= {"VLLMTargetDown", "VLLMHealthCheckFailing"}, 60,
                 "the down and health alerts to join the crash's incident")
        app.notifier.run_once()
        assert [i.alertname for i in queries.list_incidents(db)] == [CRASH]
        pages = [a["labels"]["alertname"] for _, b in _pages(sink) for a in b["alerts"]]
        assert len(_pages(sink)) <= 1 and set(pages) <= {CRASH}, pages
        detail = _crash_incident(app)
        notes = [e.message for e in detail.timeline if e.kind == "note"]
        assert any("VLLMTargetDown on tpu-a joined this incident" in m for m in notes)
        assert any("VLLMHealthCheckFailing on tpu-a joined this incident" in m for m in notes)
    finally:
        _stop(app, sim, sock)


def test_an_action_parked_for_approval_is_one_page_carrying_the_approval_links(
        tmp_path, sock_dir, sink) -> None:  # noqa: ANN001
    """Approval required: the crash's own page goes at once when the action is parked, with
    the approve links in it; no second page for the approval (issue 33: one failure, one
    page). Approving then fixes it, and no other page follows."""
    from api_helpers import WRITE_TOKEN, start_rig, wait_log_source

    rig = start_rig(tmp_path, sock_dir, sink.url, approval="required", act_first=True)
    try:
        wait_log_source(rig)
        rig.crash()
        approval = wait_for(lambda: httpx.get(f"{rig.url}/api/v1/approvals").json()[
            "approvals"], 30, "the action to be parked")[0]
        page = wait_for(lambda: [a for _, b, _ in list(sink.received) for a in b.get("alerts", [])
                                 if a["labels"].get("alertname") == "VLLMHBMOutOfMemory"
                                 and a["status"] == "firing"], 30, "the crash's page")[0]
        said = " ".join(page["annotations"].values())
        assert f"/api/v1/approvals/{approval['id']}/approve" in said, page["annotations"]
        r = httpx.post(f"{rig.url}/api/v1/approvals/{approval['id']}/approve",
                       headers={"Authorization": f"Bearer {WRITE_TOKEN}"})
        assert r.status_code == 200
        wait_for(lambda: httpx.get(f"{rig.url}/api/v1/approvals").json()["approvals"][0][
            "status"] == "done", 60, "the approved restart to finish")
        firing = [a["labels"]["alertname"] for _, b, _ in list(sink.received)
                  for a in b.get("alerts", []) if a["status"] == "firing"]
        assert firing.count("VLLMHBMOutOfMemory") == 1, firing
        assert "SentinelRemediationAwaitingApproval" not in firing, firing
    finally:
        rig.stop()


def test_a_refused_crash_whose_server_stays_down_resolves_only_when_it_serves_again(
        tmp_path, sock_dir, sink, chat, model) -> None:
    """Issue 48: the crash counter's window ended while the server was down (its down and
    health alerts firing) and the page was `resolved`. Now nothing resolves until the
    server serves again; then the incident resolves, and the page is resolved once."""
    app, sim, sock, _ = _daemon(tmp_path, sock_dir, False, sink, chat, model)
    db = app.pipeline.tracker.db
    try:
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        wait_for(lambda: _pages(sink), 30, "the page")

        def firing() -> set[str]:
            return {a.name for a in app.pipeline.rules.active_alerts()
                    if a.state.value == "firing"}
        wait_for(lambda: CRASH not in firing() and "VLLMTargetDown" in firing(),
                 WINDOW_S + 60, "the crash counter's window to end while the target is down")
        # The rule engine let the resolution go only once it was committed: a run now
        # dispatches and delivers whatever it queued.
        app.notifier.run_once()
        assert _pages(sink, "resolved") == [], "resolved while the server is down"
        assert [i.status for i in queries.list_incidents(db)] == ["open"]
        httpx.post(f"{sim.url}/sim/state", json={"down": False}).raise_for_status()
        wait_for(lambda: _pages(sink, "resolved"), 60, "the resolved once it serves again")
        app.notifier.run_once()
        assert len(_pages(sink, "resolved")) == 1 and len(_pages(sink)) == 1
        (incident,) = queries.list_incidents(db)
        assert incident.status == "resolved"
    finally:
        _stop(app, sim, sock)
