"""Slack incoming webhook: one message per group, readable blocks.

The message has a plain `text` fallback (notifications, screen readers) and
Block Kit blocks: a header (what and how many), then per alert (up to
MAX_ALERTS, the rest counted) a section with where, since when, value and
the runbook summary, and a link to the incident. Limits respected: header
text ≤ 150 characters, section text ≤ 3000, at most 50 blocks. Slack answers
200 "ok", 4xx for a bad payload or a revoked URL (permanent), 429 with
Retry-After (retried). The URL is the secret.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from sentinel.config.notify import SlackConfig
from sentinel.model import Alert, Notification, NotificationKind, label_value
from sentinel.respond.notify.base import DeliveryResult
from sentinel.respond.notify.httppost import JsonPoster
from sentinel.respond.notify.payload import alert_status, generator_url, rfc3339
from sentinel.secrets import Redactor, url_secret_parts

log = logging.getLogger(__name__)

MAX_ALERTS = 10
HEADER_MAX = 150
SECTION_MAX = 3000


def slack_body(n: Notification, external_url: str) -> dict[str, Any]:
    """The incoming-webhook JSON for one notification."""
    firing = [a for a in n.alerts if alert_status(a) == "firing"]
    name = label_value(n.group_labels, "alertname") or (n.alerts[0].name if n.alerts else "alert")
    state = {NotificationKind.FIRING: "FIRING", NotificationKind.UPDATE: "UPDATE"}.get(
        n.kind, "RESOLVED")
    if n.alerts and dict(n.alerts[0].annotations).get("sentinel_outcome") == "fixed":
        state = "FIXED BY SENTINEL"  # act first, then tell once: nobody was paged
    title = f"[{state}:{len(firing) or len(n.alerts)}] {name}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, HEADER_MAX)}}]
    ids = n.incident_ids or (n.incident_id,) * len(n.alerts)
    for alert, incident_id in list(zip(n.alerts, ids, strict=False))[:MAX_ALERTS]:
        blocks.append({"type": "section", "text": {"type": "mrkdwn",
                                                   "text": _cut(_describe(alert), SECTION_MAX)}})
        if external_url and incident_id:
            link = generator_url(external_url, incident_id)
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"<{_esc(link)}|incident {incident_id}>"}]})
    if len(n.alerts) > MAX_ALERTS:
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"and {len(n.alerts) - MAX_ALERTS} more alerts"}]})
    return {"text": title, "blocks": blocks}


def _describe(a: Alert) -> str:
    ann = dict(a.annotations)
    where = label_value(a.labels, "target") or label_value(a.labels, "instance") or "-"
    since = a.fired_at_ms if a.fired_at_ms is not None else a.active_at_ms
    lines = [f"*{_esc(ann.get('summary') or a.name)}*",
             f"*Status:* {alert_status(a)}   *Where:* {_esc(where)}   "
             f"*Severity:* {_esc(label_value(a.labels, 'severity') or '-')}",
             f"*Since:* {rfc3339(since)}   *Value:* {a.value:g}"]
    if ann.get("description"):
        lines.append(_esc(ann["description"]))
    for key, what in (("sentinel_remediation", "Sentinel tried"),
                      ("sentinel_action", "Sentinel did"),
                      ("sentinel_time_to_recovery", "Serving again after")):
        if ann.get(key):
            lines.append(f"*{what}:* {_esc(ann[key])}")
    if ann.get("sentinel_excerpt"):
        lines.append(f"```{_esc(ann['sentinel_excerpt'])}```")
    runbook = ann.get("runbook_summary") or ann.get("runbook")
    if runbook:
        lines.append(f"*Runbook:* {_esc(runbook)}")
    if ann.get("runbook_url"):
        lines.append(f"<{_esc(ann['runbook_url'])}|runbook>")
    return "\n".join(lines)


def _esc(text: str) -> str:
    # Slack reads &, < and > as markup (<!channel> pings everyone).
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SlackReceiver:
    """Posts to one Slack incoming webhook. Thread-safe; never raises from `send`."""

    def __init__(self, name: str, url: str, timeout_s: float = 10.0, send_resolved: bool = True,
                 client: httpx.Client | None = None, *, external_url: str = "") -> None:
        self.name = name
        self.send_resolved = send_resolved
        self.external_url = external_url
        self.redactor = Redactor(url_secret_parts(url))
        self._poster = JsonPoster(url, timeout_s, None, self.redactor, client)

    @classmethod
    def from_config(cls, name: str, config: SlackConfig, external_url: str,
                    client: httpx.Client | None = None) -> SlackReceiver:
        """Build from a receiver's `slack:` section."""
        return cls(name, config.url, config.timeout_ms / 1000, config.send_resolved, client,
                   external_url=external_url)

    def __repr__(self) -> str:
        return f"SlackReceiver({self.name!r})"

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        """Post the message; never raises."""
        if notification.kind == NotificationKind.RESOLVED and not self.send_resolved:
            return DeliveryResult(True, False, None, "send_resolved is off")
        try:
            body = json.dumps(slack_body(notification, self.external_url)).encode()
            result = self._poster.post(body)
        except Exception as exc:
            result = DeliveryResult(False, False, None,
                                    self.redactor.redact(f"cannot build request: {exc}"))
        if not result.ok:
            log.debug("slack %s: delivery failed: %s", self.name, result.detail)
        return result

    def close(self) -> None:
        """Close the HTTP client if this receiver created it."""
        self._poster.close()
