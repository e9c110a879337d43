"""Counting what reached people: pages and notifications per scenario, and a plain table.

The demo and bench/pagestream.py count what their webhook receivers actually
got, never what Sentinel says it sent. Per receiver:

- the pager (the receiver a route marks as paging): a firing message whose
  group (`groupKey`) is new is a **page**; a firing message to a group already
  paged, or a message of any other status (Sentinel's `update`), is an
  **update** of that page (Alertmanager re-sending the group, Sentinel adding
  a runbook: a PagerDuty incident or Slack thread, not a new page); a
  resolved message is a **resolved** notice;
- any other receiver (a chat channel): every message is a **notification**.

A message belongs to the scenario of each target it names (every `target`
label in it); a redelivery with the same Idempotency-Key counts once.

Against what the bench knows happened (when each target was failing), two
invariants of issue 48 are visible from outside:

- a **false resolve**: a resolved message to the pager that named a target
  while that target was still failing (`false_resolves`);
- a **silent** failure: a target whose failure was open (a person had to hear
  of it) that no message to the pager named, but a resolved one (`silent`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OTHER = "(no scenario)"
APART = "(set apart)"  # a row of its own: alerts the caller names as not the failures'
Received = Sequence[tuple[float, dict[str, Any], dict[str, str]]]  # WebhookSink.received
# target → its failures as (start, end) on the sinks' clock; end None: failing to the end
Spans = Mapping[str, Sequence[tuple[float, float | None]]]


@dataclass
class Counts:
    """What one scenario's failure sent to people."""

    pages: int = 0
    updates: int = 0
    resolved: int = 0
    notifications: int = 0


def tally(received: Mapping[str, Received], pager: str, scenario_of: Mapping[str, str],
          apart: Collection[str] = ()) -> dict[str, Counts]:
    """Counts per scenario (`scenario_of`: target → scenario) of what each receiver got.

    A message whose alerts are all named in `apart` (Sentinel's self-monitoring, say)
    counts under APART, whatever targets it names.
    """
    counts: dict[str, Counts] = {}
    for receiver, messages in received.items():
        paged: set[tuple[str, str]] = set()
        for _, body, _ in _once(messages):
            scenarios = [APART] if _only(body, apart) else _scenarios(body, scenario_of)
            for scenario in scenarios:
                c = counts.setdefault(scenario, Counts())
                if receiver != pager:
                    c.notifications += 1
                elif body.get("status") == "resolved":
                    c.resolved += 1
                elif body.get("status") != "firing" or (
                        scenario, str(body.get("groupKey"))) in paged:
                    c.updates += 1
                else:
                    paged.add((scenario, str(body.get("groupKey"))))
                    c.pages += 1
    return counts


def false_resolves(pager: Received, spans: Spans, scenario_of: Mapping[str, str],
                   apart: Collection[str] = ()) -> dict[str, list[float]]:
    """Per scenario, when each resolved message to the pager that named one of its targets
    while that target was failing (`spans`) arrived; once a message and scenario."""
    found: dict[str, list[float]] = {}
    for t, body, _ in _once(pager):
        if body.get("status") != "resolved" or _only(body, apart):
            continue
        for scenario in sorted({scenario_of.get(target, OTHER) for target in targets_of(body)
                                if _failing(spans.get(target, ()), t)}):
            found.setdefault(scenario, []).append(t)
    return found


def silent(pager: Received, open_since: Mapping[str, float], scenario_of: Mapping[str, str],
           apart: Collection[str] = ()) -> dict[str, int]:
    """Per scenario, its targets with an open failure (`open_since`: target → when the
    failure began) that no message to the pager named from then on, but a resolved one."""
    told: set[str] = set()
    for t, body, _ in _once(pager):
        if body.get("status") != "resolved" and not _only(body, apart):
            told |= {x for x in targets_of(body) if x in open_since and t >= open_since[x]}
    found: dict[str, int] = {}
    for target in sorted(set(open_since) - told):
        scenario = scenario_of.get(target, OTHER)
        found[scenario] = found.get(scenario, 0) + 1
    return found


def _failing(spans: Sequence[tuple[float, float | None]], t: float) -> bool:
    return any(start <= t and (end is None or t < end) for start, end in spans)


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


def _only(body: dict[str, Any], names: Collection[str]) -> bool:
    alerts = [a for a in body.get("alerts", []) if isinstance(a, dict)]
    return bool(names) and bool(alerts) and all(
        (a.get("labels") or {}).get("alertname") in names for a in alerts)


def _scenarios(body: dict[str, Any], scenario_of: Mapping[str, str]) -> list[str]:
    found = sorted({scenario_of.get(t, OTHER) for t in targets_of(body)})
    return found or [OTHER]


def targets_of(doc: object) -> set[str]:
    """Every value of a `target` key anywhere in a JSON document (alerts' labels included)."""
    found: set[str] = set()
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if k == "target" and isinstance(v, str):
                    found.add(v)
                else:
                    stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Rows as a plain-text table, columns left-aligned to their widest cell."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
