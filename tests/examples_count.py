"""What one example case sent to people, counted at the receivers (issue 48's invariants).

Each case runs its own daemon, so every message a case's receivers got is the case's.
Per message, by its receiver's shape:

- the pager (a webhook with Alertmanager's payload, or PagerDuty's Events v2):
  a firing message (`trigger`) of a group (`groupKey`, `dedup_key`) not seen before is a
  **page**; a later firing message of that group an **update**; a resolved message
  (`resolve`), or one in which every critical alert is resolved, a **resolved**; a
  message whose alerts say `sentinel_outcome: fixed` (act-first's "fixed by Sentinel")
  a **notice**;
- a chat receiver (Slack): a "FIXED BY SENTINEL" message is a **notice**, any other a
  chat message.

Messages that name only Sentinel's own alerts (rules/sentinel.yaml) are counted apart
(`own`). Against when the case's server was failing (`Spans`): a **false resolve** is a
resolved message that arrived while it failed; a case is **silent** when its failure was
one a person had to hear of and no page or notice came.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

Received = Sequence[tuple[float, dict[str, Any], dict[str, str]]]  # WebhookSink.received
Span = tuple[float, float | None]  # failing from, to (None: to the end)


@dataclass
class Told:
    """What reached people in one case, with the arrival times of resolved messages."""

    pages: int = 0
    updates: int = 0
    resolved: list[float] = field(default_factory=list)
    notices: int = 0
    chat: int = 0
    own: int = 0
    paged_at: list[float] = field(default_factory=list)
    alertnames: set[str] = field(default_factory=set)


def count(pager: Received, chat: Received, own_alerts: Collection[str]) -> Told:
    """Count what the pager and the chat receiver got (see the module's docstring)."""
    told = Told()
    groups: set[str] = set()
    for t, body, _ in _once(pager):
        names = _alertnames(body)
        group = str(body.get("groupKey") or body.get("dedup_key") or "")
        if names and names <= set(own_alerts):
            told.own += 1  # Sentinel's own: it claims no group (it is not the failure)
        elif _fixed(body):
            told.notices += 1
        elif resolved(body, own_alerts):
            told.resolved.append(t)
        elif group in groups:
            told.updates += 1
        else:
            groups.add(group)
            told.pages += 1
            told.paged_at.append(t)
            told.alertnames |= names
    for _, body, _ in _once(chat):
        if "FIXED BY SENTINEL" in str(body):
            told.notices += 1
        else:
            told.chat += 1
    return told


def false_resolves(told: Told, spans: Sequence[Span]) -> int:
    """Resolved messages that arrived while the server was failing."""
    return sum(1 for t in told.resolved if any(
        a <= t and (b is None or t < b) for a, b in spans))


def _once(messages: Received) -> list[tuple[float, dict[str, Any], dict[str, str]]]:
    """The messages, a redelivery (same Idempotency-Key) left out."""
    seen: set[str] = set()
    out = []
    for t, body, headers in list(messages):
        key = {k.lower(): v for k, v in headers.items()}.get("idempotency-key")
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        out.append((t, body, headers))
    return out


def _alertnames(body: dict[str, Any]) -> set[str]:
    alerts = body.get("alerts") or (body.get("payload") or {}).get(
        "custom_details", {}).get("firing") or []
    return {str((a.get("labels") or a).get("alertname")) for a in alerts if isinstance(a, dict)}


def _fixed(body: dict[str, Any]) -> bool:
    return any((a.get("annotations") or {}).get("sentinel_outcome") == "fixed"
               for a in body.get("alerts") or [] if isinstance(a, dict))


def resolved(body: dict[str, Any], own_alerts: Collection[str]) -> bool:
    """A resolved message, or one that tells every critical alert in it resolved (a group
    that also holds a warning still firing stays `firing`, as in Alertmanager)."""
    if body.get("status") == "resolved" or body.get("event_action") == "resolve":
        return True
    critical = [a for a in body.get("alerts") or [] if isinstance(a, dict)
                and (a.get("labels") or {}).get("severity") == "critical"
                and (a.get("labels") or {}).get("alertname") not in own_alerts]
    return bool(critical) and all(a.get("status") == "resolved" for a in critical)
