"""`incidents list` / `incidents show` output: text for people, JSON for `--json`.

The JSON keys are stable (sorted) and timestamps are ISO-8601 UTC strings
with a `Z`; label sets become objects; non-finite values become Prometheus's
strings ("NaN", "+Inf"), since JSON has no such numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sentinel.incidents.convert import format_value, iso, value_to_json
from sentinel.incidents.queries import (
    IncidentAlertView,
    IncidentDetail,
    IncidentSummary,
    TimelineEntry,
)
from sentinel.incidents.runbook_text import runbook_lines
from sentinel.model import Labels

_LIST_COLUMNS = ("ID", "STATUS", "SEVERITY", "ALERT", "TARGET", "OPENED", "DURATION", "ALERTS",
                 "SUMMARY")
_SUMMARY_WIDTH = 60


def render_list(items: Sequence[IncidentSummary]) -> str:
    """A plain-text table, one incident per line, newest first as given."""
    if not items:
        return "no incidents"
    rows = [_LIST_COLUMNS] + [_list_row(i) for i in items]
    widths = [max(len(r[c]) for r in rows) for c in range(len(_LIST_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    return "\n".join(lines)


def render_detail(detail: IncidentDetail) -> str:
    """A header, the alerts, then one line per timeline event."""
    i = detail.incident
    subject = f"{i.alertname} on {i.target}" if i.target else i.alertname
    lines = [f"Incident #{i.id}  {subject}  [{i.status}]"]
    lines.append(f"  severity:  {i.severity or '-'}")
    lines.append(f"  opened:    {_when(i.opened_at)}")
    if i.resolved_at is not None:
        lines.append(f"  resolved:  {_when(i.resolved_at)} "
                     f"(after {_duration(i.opened_at, i.resolved_at)})")
    lines.extend(_clock_lines(detail))
    if i.summary:
        lines.append(f"  summary:   {i.summary}")
    lines.append(f"  labels:    {_labels_text(detail.labels)}")
    lines.append("")
    lines.append(f"Alerts ({i.firing} firing of {i.alerts}):")
    lines.extend(f"  {_alert_line(a)}" for a in detail.alerts)
    lines.append("")
    lines.append("Timeline:")
    for entry in detail.timeline:
        lines.append(timeline_line(entry))
        lines.extend(_excerpt_lines(entry))
        if entry.kind == "runbook" and entry.data:
            lines.extend(f"    > {line}" for line in runbook_lines(entry.data))
    return "\n".join(lines)


def _excerpt_lines(entry: TimelineEntry, limit: int = 40) -> list[str]:
    """The log excerpt under a log_excerpt event, indented; long ones keep head and tail."""
    excerpt = (entry.data or {}).get("excerpt") if entry.kind == "log_excerpt" else None
    if not excerpt:
        return []
    lines = [str(x) for x in excerpt]
    if len(lines) > limit:
        half = limit // 2
        lines = [*lines[:half], f"... {len(lines) - limit} lines ...", *lines[-half:]]
    return [f"    | {line}" for line in lines]


def timeline_line(entry: TimelineEntry) -> str:
    """`2026-11-21T10:00:05Z  firing  VLLMRequestsQueued on gemma-26b: value 4`."""
    return f"{_when(entry.at)}  {entry.kind}  {entry.message}"


def summary_to_json(item: IncidentSummary) -> dict[str, Any]:
    """One incident of a listing as a JSON object."""
    return {
        "id": item.id, "alertname": item.alertname, "target": item.target,
        "status": item.status, "severity": item.severity, "summary": item.summary,
        "opened_at": iso(item.opened_at), "resolved_at": iso(item.resolved_at),
        "updated_at": iso(item.updated_at), "alerts": item.alerts, "firing": item.firing,
    }


def list_json(items: Sequence[IncidentSummary]) -> list[dict[str, Any]]:
    """A listing as JSON-ready objects (for `--json` and the HTTP API)."""
    return [summary_to_json(i) for i in items]


def _clock_lines(detail: IncidentDetail) -> list[str]:
    """First evidence, time to detect (evidence → opened), time to recovery (→ serving)."""
    c = detail.clocks
    out = []
    if c.evidence_at is not None:
        out.append(f"  evidence:  {_when(c.evidence_at)} (first sign of the failure)")
    if c.detect_ms is not None:
        out.append(f"  detected:  after {c.detect_ms / 1000:.1f}s")
    if c.recovery_ms is not None:
        out.append(f"  recovered: serving again {c.recovery_ms / 1000:.1f}s after the first "
                   "evidence (verified)")
    return out


def detail_json(detail: IncidentDetail) -> dict[str, Any]:
    """One incident in full as a JSON object."""
    return {
        **summary_to_json(detail.incident),
        "evidence_at": iso(detail.clocks.evidence_at),
        "time_to_detect_ms": detail.clocks.detect_ms,
        "time_to_recovery_ms": detail.clocks.recovery_ms,
        "labels": dict(detail.labels),
        "alert_list": [_alert_to_json(a) for a in detail.alerts],
        "timeline": [
            {"id": e.id, "at": iso(e.at), "kind": e.kind, "message": e.message, "data": e.data}
            for e in detail.timeline
        ],
    }


def render_list_json(items: Sequence[IncidentSummary]) -> str:
    """`incidents list --json`: an array of incident objects."""
    return json.dumps(list_json(items), indent=2, sort_keys=True)


def render_detail_json(detail: IncidentDetail) -> str:
    """`incidents show --json`."""
    return json.dumps(detail_json(detail), indent=2, sort_keys=True)


def _list_row(i: IncidentSummary) -> tuple[str, ...]:
    end = i.resolved_at
    duration = _duration(i.opened_at, end) if end is not None else "open"
    summary = i.summary if len(i.summary) <= _SUMMARY_WIDTH else i.summary[:57] + "..."
    return (str(i.id), i.status, i.severity or "-", i.alertname, i.target or "-",
            _when(i.opened_at), duration, f"{i.firing}/{i.alerts}", summary)


def _alert_line(a: IncidentAlertView) -> str:
    if a.resolved_at is None:
        when = f"since {_when(a.fired_at)}"
    else:
        when = f"at {_when(a.resolved_at)}"
    return f"{a.fingerprint}  {a.state} {when}  value {format_value(a.value)}  " \
           f"{{{_labels_text(a.labels)}}}"


def _alert_to_json(a: IncidentAlertView) -> dict[str, Any]:
    return {
        "fingerprint": a.fingerprint, "labels": dict(a.labels),
        "annotations": dict(a.annotations), "state": a.state, "value": value_to_json(a.value),
        "active_at": iso(a.active_at), "fired_at": iso(a.fired_at),
        "resolved_at": iso(a.resolved_at), "notified_firing_at": iso(a.notified_firing_at),
        "notified_resolved_at": iso(a.notified_resolved_at),
    }


def _when(dt: datetime | None) -> str:
    # Text output is for people: whole seconds keep the columns aligned.
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if dt is not None else "-"


def _labels_text(labels: Labels) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in labels)


def _duration(start: datetime, end: datetime) -> str:
    seconds = max(0, int((end - start).total_seconds()))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    return f"{m}m{s:02d}s" if m else f"{s}s"
