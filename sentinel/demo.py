"""`sentinel demo`: the whole pipeline on one machine, in under a minute.

Starts two simulators, a webhook sink and the daemon (SQLite in a temporary
folder) on free ports, then drives two scripted incidents in the same
minute: a queue backlog on a busy server that trips the shipped
`VLLMRequestsQueued` rule (for: 30s), and an engine that stalls behind a
live /health, caught by the probe's canary as `VLLMEngineStalled` (its 2 m
`for` cut to 30 s for the demo); then their recovery. It prints what happens
as it happens and exits 0 once both incidents opened, paged, resolved and
paged again.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from sentinel.config import load_config
from sentinel.config.durations import parse_duration
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.paths import bundled_dir
from sentinel.sim.server import start_sim

DEMO_TARGET = "demo-gemma"
STALL_TARGET = "demo-gemma-stall"
DEADLINE_S = 58.0
# The demo's serving rules run 4x faster than shipped: a 2 m stall is caught in 30 s.
STALL_SCALE = 4


class WebhookSink:
    """A loopback HTTP server that keeps every JSON body POSTed to it, in order.

    `bodies` is a queue for consumers; `received` keeps (monotonic time, body,
    headers) of every delivery for tests that measure when a page arrived.
    """

    def __init__(self, port: int = 0) -> None:
        self.bodies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.received: list[tuple[float, dict[str, Any], dict[str, str]]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                    sink.received.append((time.monotonic(), body, dict(self.headers)))
                    sink.bodies.put(body)
                    self.send_response(200)
                except ValueError:
                    self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Where to POST."""
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/hook"

    def start(self) -> WebhookSink:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


@dataclass
class _Incident:
    """What the demo has seen of one scripted incident."""

    alertname: str
    target: str
    alert_state: str = "inactive"
    seen_events: int = 0
    paged_firing: bool = False
    paged_resolved: bool = False
    incident_id: int | None = None
    status: str | None = None
    recovering: bool = False

    @property
    def done(self) -> bool:
        return self.paged_resolved and self.status == "resolved"


@dataclass
class _Progress:
    started: float
    incidents: list[_Incident] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)


def demo_rules(folder: Path) -> Path:
    """The shipped rules, with the serving group's durations cut by STALL_SCALE for the demo.

    VLLMEngineStalled waits 2 minutes in production; the demo has one. Every
    other rule is the shipped one unchanged.
    """
    doc = yaml.safe_load((bundled_dir("rules") / "vllm.yaml").read_text())
    for group in doc["groups"]:
        if group["name"] != "vllm-serving":
            continue
        for rule in group["rules"]:
            rule["for"] = f"{parse_duration(rule.get('for', '0s')) // STALL_SCALE}ms"
            rule["expr"] = re.sub(
                r"\[(\d+[smh])\]",
                lambda m: f"[{parse_duration(m.group(1)) // STALL_SCALE}ms]", rule["expr"])
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_demo_config(folder: Path, sim_url: str, hook_url: str,
                      stall_url: str | None = None) -> Path:
    """A config for the demo: the simulated targets, the demo rules, the sink as receiver."""
    rules = demo_rules(folder)
    self_rules = bundled_dir("rules") / "sentinel.yaml"  # Sentinel's own missed work
    path = folder / "sentinel.yaml"
    targets = [(DEMO_TARGET, sim_url)] + ([(STALL_TARGET, stall_url)] if stall_url else [])
    text = (
        f"database: sqlite:///{folder / 'sentinel.db'}\n"
        "listen: 127.0.0.1:0\n"
        f"rule_files: ['{rules}', '{self_rules}']\n"
        "evaluation_interval: 1s\n"
        "targets:\n"
    )
    for name, url in targets:
        text += (
            f"  - name: {name}\n"
            f"    url: {url}\n"
            "    scrape_interval: 1s\n"
            "    scrape_timeout: 900ms\n"
            "    labels: {cluster: demo}\n"
            "    probe: {interval: 2s, timeout: 1s}\n"
        )
    path.write_text(text + "receivers:\n  - name: demo-oncall\n"
                    f"    webhook: {{url: '{hook_url}'}}\n")
    return path


def run_demo(keep: bool = False) -> int:
    """Run the scripted incidents; 0 when both opened and resolved in time, else 1."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folder = Path(tempfile.mkdtemp(prefix="sentinel-demo-"))
    sim, stalling = start_sim(), start_sim()
    sink = WebhookSink().start()
    config = load_config(write_demo_config(folder, sim.url, sink.url, stalling.url))
    app = App(config)
    p = _Progress(started=time.monotonic(), incidents=[
        _Incident("VLLMRequestsQueued", DEMO_TARGET), _Incident("VLLMEngineStalled", STALL_TARGET)])
    try:
        app.start()
        assert app.status is not None
        print("Sentinel demo: a queue backlog and a stalled engine, detected, paged, recovered.")
        print(f"  simulators {sim.url} ({DEMO_TARGET}), {stalling.url} ({STALL_TARGET})")
        print(f"  sentinel   http://{':'.join(map(str, app.status.address))}/metrics")
        print(f"  database   {config.database}")
        print(f"  webhook    {sink.url}")
        print("  rules      VLLMRequestsQueued: requests waiting > 0 for 30s (rules/vllm.yaml)")
        print(f"             VLLMEngineStalled: /health 200 but no token (its 2m `for` cut to "
              f"{120 // STALL_SCALE}s for the demo)")
        for server in (sim, stalling):
            server.set_state(kv_cache_usage=0.42, num_requests_running=3, load_rps=5)
        p.say("healthy traffic on both: 3 running, 5 requests/s, KV cache 42%")
        time.sleep(3)
        sim.set_state(num_requests_waiting=6, num_requests_running=16)
        p.say(f"{DEMO_TARGET}: a backlog, 6 requests waiting (tokens still flowing)")
        stalling.set_state(stalled=True, load_rps=0, num_requests_running=0)
        p.say(f"{STALL_TARGET}: the engine wedges: /health still 200, no token ever streamed "
              "(POST /sim/state {\"stalled\": true})")
        ok = _watch(app, {DEMO_TARGET: sim, STALL_TARGET: stalling}, sink, p)
        _print_details(app, p)
        print()
        if ok:
            ids = " and ".join(f"#{i.incident_id} ({i.alertname})" for i in p.incidents)
            print(f"demo finished: incidents {ids} opened, paged, resolved and paged again in "
                  f"{time.monotonic() - p.started:.0f}s")
        else:
            print("demo FAILED: the incidents did not open and resolve in time")
        return 0 if ok else 1
    finally:
        app.stop(2.0)
        sink.stop()
        sim.stop()
        stalling.stop()
        if keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _print_details(app: App, p: _Progress) -> None:
    from sentinel.incidents import render

    assert app.pipeline is not None
    for inc in p.incidents:
        if inc.incident_id is None:
            continue
        detail = queries.get_incident(app.pipeline.tracker.db, inc.incident_id)
        if detail is not None:
            print()
            print(render.render_detail(detail))


RECOVERY = {"VLLMRequestsQueued": {"num_requests_waiting": 0, "num_requests_running": 3},
            "VLLMEngineStalled": {"stalled": False, "load_rps": 5, "num_requests_running": 3}}


def _watch(app: App, sims: dict[str, Any], sink: WebhookSink, p: _Progress) -> bool:
    """Print alert, incident and webhook changes until every incident resolved and was paged."""
    assert app.pipeline is not None
    db = app.pipeline.tracker.db
    while time.monotonic() - p.started < DEADLINE_S:
        _report_webhooks(sink, p)
        for inc in p.incidents:
            _report_alert_state(app, inc, p)
            _report_incident(db, inc, p)
            if inc.paged_firing and not inc.recovering:
                sims[inc.target].update_state(RECOVERY[inc.alertname])
                inc.recovering = True
                p.say(f"recovery on {inc.target}: {RECOVERY[inc.alertname]}")
        if all(i.done for i in p.incidents):
            return True
        time.sleep(0.2)
    return False


def _report_alert_state(app: App, inc: _Incident, p: _Progress) -> None:
    assert app.pipeline is not None
    states = {a.state.value for a in app.pipeline.rules.active_alerts()
              if a.name == inc.alertname and dict(a.labels).get("target") == inc.target}
    state = "firing" if "firing" in states else "pending" if "pending" in states else "inactive"
    if state != inc.alert_state:
        p.say(f"alert {inc.alertname} on {inc.target} is {state}")
        inc.alert_state = state


def _report_incident(db: Any, inc: _Incident, p: _Progress) -> None:
    items = [i for i in queries.list_incidents(db, target=inc.target, limit=5)
             if i.alertname == inc.alertname]
    if not items:
        return
    item = items[0]
    if inc.incident_id is None:
        inc.incident_id = item.id
        p.say(f"incident #{item.id} opened: {item.alertname} on {item.target}")
    detail = queries.get_incident(db, item.id)
    if detail is None:
        return
    for event in detail.timeline[inc.seen_events:]:
        p.say(f"  #{item.id} {event.kind:<20} {event.message}")
    inc.seen_events = len(detail.timeline)
    if item.status != inc.status:
        inc.status = item.status
        if item.status == "resolved":
            p.say(f"incident #{item.id} resolved")


def _report_webhooks(sink: WebhookSink, p: _Progress) -> None:
    while not sink.bodies.empty():
        body = sink.bodies.get()
        alerts = body.get("alerts", [])
        names = ", ".join(f"{a['labels'].get('alertname', '?')}@{a['labels'].get('target', '?')}"
                          for a in alerts)
        p.say(f"webhook received: status={body.get('status')} alerts=[{names}]")
        for inc in p.incidents:
            if any(a["labels"].get("alertname") == inc.alertname
                   and a["labels"].get("target") == inc.target for a in alerts):
                if body.get("status") == "firing":
                    inc.paged_firing = True
                elif body.get("status") == "resolved":
                    inc.paged_resolved = True
