"""Oracle: the body Sentinel sends equals what the real Alertmanager sends for the same alerts.

Runs Debian's `prometheus-alertmanager` on loopback with a webhook receiver
pointing at a local HTTP server, posts alerts through its v2 API, and compares
the webhook body it delivers with `alertmanager_payload` for the same alerts
(externalURL, groupKey and receiver name differ by construction).
"""

from __future__ import annotations

import json
import queue
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from fixtures_prometheus import start_listening

from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.payload import alertmanager_payload

AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(AM is None, reason="prometheus-alertmanager not installed")]

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
GENERATOR = "http://sentinel:9465/incidents/42"


@pytest.fixture
def hook() -> Iterator[tuple[str, queue.Queue[dict]]]:
    bodies: queue.Queue[dict] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            bodies.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/hook", bodies
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def alertmanager(tmp_path: Path, hook: tuple[str, queue.Queue[dict]]) -> Iterator[str]:
    (tmp_path / "am.yml").write_text(
        "route: {receiver: hook, group_by: [alertname], group_wait: 0s}\n"
        f"receivers: [{{name: hook, webhook_configs: [{{url: '{hook[0]}'}}]}}]\n")
    # Port 0, read back from its log once it is ready (start_listening).
    proc, url = start_listening(
        [str(AM), f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
         "--web.listen-address=127.0.0.1:0", "--cluster.listen-address="],
        tmp_path / "alertmanager.log")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _alert(target: str, resolved_at: int | None = None) -> Alert:
    return Alert(
        group="vllm", rule="VLLMDown",
        labels=labels_of({"alertname": "VLLMDown", "severity": "page", "target": target}),
        annotations=labels_of({"summary": f"{target} down", "runbook": "r1"}),
        state=AlertState.FIRING if resolved_at is None else AlertState.INACTIVE,
        value=1.0, active_at_ms=T0, last_eval_ms=T0 + 60_000, fired_at_ms=T0 + 30_000,
        resolved_at_ms=resolved_at,
    )


def _as_posted(body_alert: dict) -> dict:
    """What Prometheus would POST to Alertmanager for an alert in our body."""
    out = {k: body_alert[k] for k in ("labels", "annotations", "startsAt", "generatorURL")}
    if body_alert["status"] == "resolved":
        out["endsAt"] = body_alert["endsAt"]
    return out


def test_body_matches_real_alertmanager(alertmanager: str,
                                        hook: tuple[str, queue.Queue[dict]]) -> None:
    firing, resolved = _alert("a"), _alert("b", resolved_at=T0 + 90_250)
    note = Notification(42, NotificationKind.FIRING, (firing, resolved),
                        labels_of({"alertname": "VLLMDown"}))
    ours = alertmanager_payload(note, "hook", "http://sentinel:9465", T0 + 100_000)
    ours["alerts"] = [{**a, "generatorURL": GENERATOR} for a in ours["alerts"]]

    resp = httpx.post(f"{alertmanager}/api/v2/alerts",
                      json=[_as_posted(a) for a in ours["alerts"]], timeout=5)
    assert resp.status_code == 200, resp.text
    theirs = hook[1].get(timeout=15)

    assert set(theirs) == set(ours)
    for key in ("version", "status", "receiver", "groupLabels", "commonLabels",
                "commonAnnotations", "truncatedAlerts"):
        assert theirs[key] == ours[key], key
    by_fp = {a["fingerprint"]: a for a in theirs["alerts"]}
    assert set(by_fp) == {a["fingerprint"] for a in ours["alerts"]}
    for mine in ours["alerts"]:
        assert by_fp[mine["fingerprint"]] == mine
