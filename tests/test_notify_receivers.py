"""Slack, PagerDuty, Alertmanager push and the signed webhook, against real HTTP on 127.0.0.1.

Ends with the shared secret check over every receiver kind: URLs, routing
keys, header values and HMAC secrets never reach results, reprs or logs.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_prometheus import start_listening
from notify_helpers import LoopbackReceiver
from secret_check import assert_no_secret_leak

from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
from sentinel.respond.notify.base import Receiver
from sentinel.respond.notify.grouping import dedup_key
from sentinel.respond.notify.pagerduty import PagerDutyReceiver
from sentinel.respond.notify.slack import SlackReceiver
from sentinel.respond.notify.webhook import WebhookReceiver

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
EXT = "http://sentinel:9465"
AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _alert(target: str, resolved_at: int | None = None, severity: str = "page") -> Alert:
    return Alert(
        group="vllm", rule="VLLMDown",
        labels=labels_of({"alertname": "VLLMDown", "severity": severity, "target": target}),
        annotations=labels_of({"summary": f"{target} <down> & out", "runbook": "restart it"}),
        state=AlertState.FIRING if resolved_at is None else AlertState.INACTIVE, value=0.0,
        active_at_ms=T0, last_eval_ms=T0 + 60_000, fired_at_ms=T0 + 30_000,
        resolved_at_ms=resolved_at)


def _note(kind: NotificationKind = NotificationKind.FIRING, *alerts: Alert) -> Notification:
    alerts = alerts or (_alert("gemma-a"), _alert("gemma-b"))
    return Notification(7, kind, alerts, labels_of({"alertname": "VLLMDown"}),
                        group_key="0/pd:{alertname=\"VLLMDown\"}", idempotency_key="k" * 32,
                        incident_ids=tuple(7 + i for i in range(len(alerts))))


def test_slack_blocks_are_readable_and_escaped(loopback: LoopbackReceiver) -> None:
    rx = SlackReceiver("chat", loopback.url("/services/T000/B000/XXXX"), external_url=EXT)
    assert isinstance(rx, Receiver)
    assert rx.send(_note(), T0).ok
    body = loopback.accepted()[0].json()
    assert isinstance(body, dict)
    assert body["text"] == "[FIRING:2] VLLMDown"
    header, section, context = body["blocks"][:3]
    assert header == {"type": "header", "text": {"type": "plain_text",
                                                 "text": "[FIRING:2] VLLMDown"}}
    text = section["text"]["text"]
    assert section["text"]["type"] == "mrkdwn"
    assert "*gemma-a &lt;down&gt; &amp; out*" in text  # what, escaped
    assert "*Where:* gemma-a" in text and "*Since:* 2024-05-01T12:00:30Z" in text
    assert "*Value:* 0" in text and "*Runbook:* restart it" in text
    assert context["elements"][0]["text"] == f"<{EXT}/incidents/7|incident 7>"
    assert len(body["blocks"]) == 5


def test_pagerduty_trigger_then_resolve_share_the_dedup_key(loopback: LoopbackReceiver) -> None:
    loopback.status = 202
    rx = PagerDutyReceiver("pd", "R0UTINGKEY0123456789abcdef", loopback.url("/v2/enqueue"),
                           severity_map={"page": "critical"}, external_url=EXT)
    assert rx.send(_note(), T0).ok
    resolved = _note(NotificationKind.RESOLVED, _alert("gemma-a", T0 + 90_000))
    assert rx.send(resolved, T0 + 90_000).ok
    trigger, resolve = (r.json() for r in loopback.accepted())
    assert isinstance(trigger, dict) and isinstance(resolve, dict)
    assert trigger["routing_key"] == "R0UTINGKEY0123456789abcdef"
    assert trigger["event_action"] == "trigger"
    assert trigger["dedup_key"] == dedup_key('0/pd:{alertname="VLLMDown"}')
    payload = trigger["payload"]
    assert payload["summary"] == "[2 alerts] gemma-a <down> & out"
    assert (payload["source"], payload["severity"]) == ("gemma-a", "critical")
    assert payload["timestamp"] == "2024-05-01T12:00:30Z"
    assert trigger["links"][0]["href"] == f"{EXT}/incidents/7"
    assert resolve == {"routing_key": "R0UTINGKEY0123456789abcdef", "event_action": "resolve",
                       "dedup_key": trigger["dedup_key"]}


def test_pagerduty_400_is_permanent_and_429_retries(loopback: LoopbackReceiver) -> None:
    rx = PagerDutyReceiver("pd", "R0UTINGKEY0123456789abcdef", loopback.url("/v2/enqueue"))
    loopback.status = 400
    r = rx.send(_note(), T0)
    assert (r.ok, r.retryable, r.status) == (False, False, 400)
    loopback.status, loopback.retry_after = 429, "30"
    r = rx.send(_note(), T0)
    assert (r.ok, r.retryable, r.retry_after_ms) == (False, True, 30_000)


def test_webhook_signs_the_exact_body(loopback: LoopbackReceiver) -> None:
    rx = WebhookReceiver("hook", loopback.url(), hmac_secret="shared-s3cret-value")
    assert rx.send(_note(), T0).ok
    req = loopback.accepted()[0]
    expected = hmac.new(b"shared-s3cret-value", req.body, hashlib.sha256).hexdigest()
    assert req.headers["X-Sentinel-Signature"] == f"sha256={expected}"
    assert req.headers["Idempotency-Key"] == "k" * 32


def test_every_receiver_keeps_its_secrets(loopback: LoopbackReceiver,
                                          caplog: pytest.LogCaptureFixture) -> None:
    token = "T0KEN-abcdefghijklmnopqrstuvwxyz"
    loopback.status = 404
    cases: list[tuple[Receiver, list[str]]] = [
        (WebhookReceiver("hook", loopback.url(f"/hooks/{token}?key=q-{token}"),
                         headers={"Authorization": f"Bearer h-{token}"},
                         hmac_secret=f"m-{token}"), [token, f"h-{token}", f"m-{token}"]),
        (SlackReceiver("chat", loopback.url(f"/services/T0/B0/{token}")), [token]),
        (PagerDutyReceiver("pd", f"rk-{token}", loopback.url("/v2/enqueue")), [f"rk-{token}"]),
        (AlertmanagerReceiver("am", f"http://user:p-{token}@127.0.0.1:{loopback.port}",
                              headers={"X-Api-Key": f"x-{token}"}), [f"p-{token}", f"x-{token}"]),
    ]
    results = []
    with caplog.at_level(logging.DEBUG):
        for rx, _ in cases:
            results.append(rx.send(_note(), T0))
    # And when nothing listens (connection errors echo the URL).
    loopback_port = loopback.port
    refused = [
        WebhookReceiver("hook", f"http://127.0.0.1:1/hooks/{token}"),
        SlackReceiver("chat", f"http://127.0.0.1:1/services/T0/B0/{token}"),
        PagerDutyReceiver("pd", f"rk-{token}", "http://127.0.0.1:1/v2/enqueue"),
        AlertmanagerReceiver("am", f"http://user:p-{token}@127.0.0.1:1"),
    ]
    with caplog.at_level(logging.DEBUG):
        results += [rx.send(_note(), T0) for rx in refused]
    assert all(not r.ok for r in results) and loopback_port
    secrets = [s for _, ss in cases for s in ss]
    assert_no_secret_leak(secrets, results=results, caplog=caplog,
                          texts=[repr(rx) for rx, _ in cases] + [repr(rx) for rx in refused])


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    if AM is None:
        pytest.skip("prometheus-alertmanager not installed")
    (tmp_path / "am.yml").write_text("route: {receiver: none}\nreceivers: [{name: none}]\n")
    # Port 0, read back from its log once it is ready (start_listening).
    proc, url = start_listening(
        [AM, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
         "--web.listen-address=127.0.0.1:0", "--cluster.listen-address="],
        tmp_path / "alertmanager.log")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.integration
def test_push_to_real_alertmanager_shows_in_its_api(alertmanager: str) -> None:
    rx = AlertmanagerReceiver("am", alertmanager, external_url=EXT)
    now = int(time.time() * 1000)
    firing = Alert(group="vllm", rule="VLLMDown",
                   labels=labels_of({"alertname": "VLLMDown", "target": "gemma-a"}),
                   annotations=labels_of({"summary": "down"}), state=AlertState.FIRING,
                   value=0.0, active_at_ms=now - 60_000, last_eval_ms=now, fired_at_ms=now - 30_000)
    result = rx.send(_note(NotificationKind.FIRING, firing), now)
    assert result.ok, result.detail
    alerts = httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
    [shown] = alerts
    assert shown["labels"] == {"alertname": "VLLMDown", "target": "gemma-a"}
    assert shown["annotations"] == {"summary": "down"}
    assert shown["generatorURL"] == f"{EXT}/incidents/7"
    assert shown["status"]["state"] == "active"
    # A resolved push ends it: the API no longer lists it.
    from dataclasses import replace

    ended = replace(firing, state=AlertState.INACTIVE, resolved_at_ms=now)
    assert rx.send(_note(NotificationKind.RESOLVED, ended), now).ok
    assert httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json() == []
    # An invalid alert is refused for good.
    loop_bad = rx.send(_note(NotificationKind.FIRING, replace(firing, labels=())), now)
    assert (loop_bad.ok, loop_bad.retryable, loop_bad.status) == (False, False, 400)


def test_no_receiver_secret_reaches_the_database(incident_db, loopback: LoopbackReceiver,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Through the whole outbox path (failures, retries, a permanent 4xx, escalation)."""
    from notify_helpers import make_stage
    from secret_check import database_texts

    from sentinel.model import Alert, AlertState, labels_of

    token = "T0KEN-abcdefghijklmnopqrstuvwxyz"
    receivers: dict[str, Receiver] = {
        "hook": WebhookReceiver("hook", loopback.url(f"/hooks/{token}?key=q-{token}"),
                                headers={"Authorization": f"Bearer h-{token}"},
                                hmac_secret=f"m-{token}"),
        "chat": SlackReceiver("chat", f"http://127.0.0.1:1/services/T0/B0/{token}"),
        "pd": PagerDutyReceiver("pd", f"rk-{token}", loopback.url("/v2/enqueue")),
        "am": AlertmanagerReceiver("am", f"http://user:p-{token}@127.0.0.1:1",
                                   headers={"X-Api-Key": f"x-{token}"}),
    }
    stage = make_stage(incident_db, receivers, fallback="pd")
    loopback.status = 500
    firing = Alert(group="g", rule="VLLMDown", labels=labels_of(
        {"alertname": "VLLMDown", "target": "tpu-a", "severity": "critical"}),
        annotations=labels_of({"summary": "down"}), state=AlertState.FIRING, value=1.0,
        active_at_ms=T0, last_eval_ms=T0, fired_at_ms=T0)
    with caplog.at_level(logging.DEBUG):
        stage.tracker.process([firing], T0)
        now = T0
        for _ in range(5):
            stage.tick(now)
            now += 60_000
        loopback.status = 404  # now a permanent failure: recorded and escalated
        for _ in range(3):
            stage.tick(now)
            now += 60_000
    assert len(loopback.requests) >= 4
    texts = database_texts(incident_db)
    assert any("outbox" in t for t in texts) and any("timeline_events" in t for t in texts)
    assert_no_secret_leak([token, f"q-{token}", f"h-{token}", f"m-{token}", f"rk-{token}",
                           f"p-{token}", f"x-{token}"], texts=texts, caplog=caplog)
