"""Shared pieces of the diagnosis tests: an incident with crash evidence, configs, a fake model."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sqlalchemy import select

from sentinel.config import Config, parse_config
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import record_log_events
from sentinel.incidents.models import TimelineEvent
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, LogEvent, labels_of

ROOT = Path(__file__).resolve().parent.parent
CRASH_LOG = tuple((ROOT / "tests" / "data" / "logs" / "tpu_hbm_oom.log").read_text().splitlines())
STATIC = "The TPU ran out of HBM. Lower --gpu-memory-utilization or --max-model-len."
T0 = 1_795_000_000_000


def open_incident(db: Database, target: str = "tpu-a", excerpt: tuple[str, ...] = CRASH_LOG,
                  now_ms: int = T0) -> int:
    """An open VLLMHBMOutOfMemory incident on `target` with one crash excerpt; its id."""
    record_log_events(db, [LogEvent(
        target=target, source="file:/var/log/vllm.log", signature="xla_hbm_oom",
        category="hbm_oom", severity="critical", t_ms=now_ms - 5000, line_no=12,
        excerpt=excerpt, runbook=STATIC)], now_ms=now_ms)
    alert = Alert(group="vllm", rule="VLLMHBMOutOfMemory",
                  labels=labels_of({"alertname": "VLLMHBMOutOfMemory", "target": target,
                                    "severity": "critical"}),
                  annotations=labels_of({"summary": f"HBM OOM on {target}"}),
                  state=AlertState.FIRING, value=1.0, active_at_ms=now_ms,
                  last_eval_ms=now_ms, fired_at_ms=now_ms)
    (notification,) = IncidentTracker(db).process([alert], now_ms)
    return notification.incident_id


def config(endpoints: list[dict[str, Any]], targets: list[tuple[str, str]] = (),
           **diagnosis: Any) -> Config:
    """A config with these model endpoints and targets (name, url)."""
    return parse_config({
        "targets": [{"name": n, "url": u} for n, u in targets],
        "diagnosis": {"endpoints": endpoints, "max_tokens": 256, "retry": "30s", **diagnosis},
    })


def timeline(db: Database, incident_id: int) -> list[TimelineEvent]:
    """Every timeline event of an incident, in order."""
    with db.session() as s:
        return list(s.scalars(select(TimelineEvent).where(
            TimelineEvent.incident_id == incident_id).order_by(TimelineEvent.id)).all())


def runbooks(db: Database, incident_id: int) -> list[dict[str, Any]]:
    """The data of an incident's RUNBOOK events."""
    return [e.data or {} for e in timeline(db, incident_id) if e.kind == "runbook"]


class _FakeModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers every chat with `content` (a test's choice)."""

    protocol_version = "HTTP/1.1"
    content = "{}"

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._json({"object": "list", "data": [{"id": "fake", "max_model_len": 8192}]})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/tokenize":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        chunks = [{"choices": [{"index": 0, "delta": {"content": self.content},
                                "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def fake_model(content: str) -> Iterator[str]:
    """A loopback model server whose every answer is `content`; yields its URL."""
    handler = type("FakeModel", (_FakeModel,), {"content": content})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def now_ms() -> int:
    """Wall-clock milliseconds."""
    return int(time.time() * 1000)
