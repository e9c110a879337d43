"""`sentinel demo`: the whole pipeline on one machine, in under a minute.

Starts the simulator, a webhook sink and the daemon (SQLite in a temporary
folder) on free ports, then drives a scripted incident: a queue backlog that
trips the shipped `VLLMRequestsQueued` rule (for: 30s), and its recovery. It
prints what happens as it happens and exits 0 once the incident opened, paged,
resolved and paged again.
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.paths import bundled_dir
from sentinel.sim.server import start_sim

DEMO_TARGET = "demo-gemma"
DEADLINE_S = 58.0


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
class _Progress:
    started: float
    alert_state: str = "inactive"
    seen_events: int = 0
    paged_firing: bool = False
    paged_resolved: bool = False
    incident_id: int | None = None
    incident_status: str | None = None
    recovering: bool = False

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)


def write_demo_config(folder: Path, sim_url: str, hook_url: str) -> Path:
    """A config for the demo: one simulated target, the shipped rules, the sink as receiver."""
    rules = bundled_dir("rules") / "vllm.yaml"
    self_rules = bundled_dir("rules") / "sentinel.yaml"  # Sentinel's own missed work
    path = folder / "sentinel.yaml"
    path.write_text(
        f"database: sqlite:///{folder / 'sentinel.db'}\n"
        "listen: 127.0.0.1:0\n"
        f"rule_files: ['{rules}', '{self_rules}']\n"
        "evaluation_interval: 1s\n"
        "targets:\n"
        f"  - name: {DEMO_TARGET}\n"
        f"    url: {sim_url}\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 900ms\n"
        "    labels: {cluster: demo}\n"
        "receivers:\n"
        "  - name: demo-oncall\n"
        f"    webhook: {{url: '{hook_url}'}}\n"
    )
    return path


def run_demo(keep: bool = False) -> int:
    """Run the scripted incident; 0 when it opened and resolved in time, else 1."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folder = Path(tempfile.mkdtemp(prefix="sentinel-demo-"))
    sim = start_sim()
    sink = WebhookSink().start()
    config = load_config(write_demo_config(folder, sim.url, sink.url))
    app = App(config)
    p = _Progress(started=time.monotonic())
    try:
        app.start()
        assert app.status is not None
        print("Sentinel demo: a vLLM queue backlog, detected, paged, recovered.")
        print(f"  simulator  {sim.url}  (model {sim.model})")
        print(f"  sentinel   http://{':'.join(map(str, app.status.address))}/metrics")
        print(f"  database   {config.database}")
        print(f"  webhook    {sink.url}")
        print("  rule       VLLMRequestsQueued: requests waiting > 0 for 30s (rules/vllm.yaml)")
        sim.set_state(kv_cache_usage=0.42, num_requests_running=3, num_requests_waiting=0)
        p.say("healthy traffic: 3 running, 0 waiting, KV cache 42%")
        time.sleep(3)
        sim.set_state(num_requests_waiting=6, num_requests_running=16)
        p.say("injecting a backlog: 6 requests waiting (POST /sim/state)")
        ok = _watch(app, sim, sink, p)
        if p.incident_id is not None:
            from sentinel.incidents import render

            detail = queries.get_incident(app.pipeline.tracker.db, p.incident_id)  # type: ignore[union-attr]
            if detail is not None:
                print()
                print(render.render_detail(detail))
        print()
        if ok:
            print(f"demo finished: incident #{p.incident_id} opened, paged, resolved and paged "
                  f"again in {time.monotonic() - p.started:.0f}s")
        else:
            print("demo FAILED: the incident did not open and resolve in time")
        return 0 if ok else 1
    finally:
        app.stop(2.0)
        sink.stop()
        sim.stop()
        if keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _watch(app: App, sim: Any, sink: WebhookSink, p: _Progress) -> bool:
    """Print alert, incident and webhook changes until the incident resolved and was paged."""
    assert app.pipeline is not None
    db = app.pipeline.tracker.db
    while time.monotonic() - p.started < DEADLINE_S:
        _report_alert_state(app, p)
        _report_incident(db, p)
        _report_webhooks(sink, p)
        if p.paged_firing and not p.recovering:
            time.sleep(2)
            sim.set_state(num_requests_waiting=0, num_requests_running=3)
            p.recovering = True
            p.say("recovery: the backlog drained, 0 waiting")
        if p.paged_resolved and p.incident_status == "resolved":
            return True
        time.sleep(0.2)
    return False


def _report_alert_state(app: App, p: _Progress) -> None:
    assert app.pipeline is not None
    states = {a.state.value for a in app.pipeline.rules.active_alerts()
              if a.name == "VLLMRequestsQueued"}
    state = "firing" if "firing" in states else "pending" if "pending" in states else "inactive"
    if state != p.alert_state:
        p.say(f"alert VLLMRequestsQueued is {state}")
        p.alert_state = state


def _report_incident(db: Any, p: _Progress) -> None:
    items = queries.list_incidents(db, target=DEMO_TARGET, limit=1)
    if not items:
        return
    inc = items[0]
    if p.incident_id is None:
        p.incident_id = inc.id
        p.say(f"incident #{inc.id} opened: {inc.alertname} on {inc.target}")
    detail = queries.get_incident(db, inc.id)
    if detail is None:
        return
    for event in detail.timeline[p.seen_events:]:
        p.say(f"  timeline  {event.kind:<20} {event.message}")
    p.seen_events = len(detail.timeline)
    if inc.status != p.incident_status:
        p.incident_status = inc.status
        if inc.status == "resolved":
            p.say(f"incident #{inc.id} resolved")


def _report_webhooks(sink: WebhookSink, p: _Progress) -> None:
    while not sink.bodies.empty():
        body = sink.bodies.get()
        names = ", ".join(a["labels"].get("alertname", "?") for a in body.get("alerts", []))
        p.say(f"webhook received: status={body.get('status')} alerts=[{names}]")
        if body.get("status") == "firing":
            p.paged_firing = True
        elif body.get("status") == "resolved":
            p.paged_resolved = True
