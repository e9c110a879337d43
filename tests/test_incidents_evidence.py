"""Crash excerpts reach incident timelines: on open, and while the incident is open."""

from __future__ import annotations

from sentinel.incidents import queries, render
from sentinel.incidents.log_events import record_log_events
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, LogEvent, labels_of

T0 = 1_790_000_000_000


def _event(target: str, t_ms: int, signature: str = "xla_hbm_resource_exhausted") -> LogEvent:
    return LogEvent(
        target=target, source="cloud-logging:proj", signature=signature, category="hbm_oom",
        severity="critical", t_ms=t_ms, line_no=None,
        excerpt=("Traceback (most recent call last):",
                 "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory "
                 "in memory space hbm"),
        runbook="Lower --gpu-memory-utilization.",
    )


def _firing(target: str, at_ms: int) -> Alert:
    return Alert(group="vllm", rule="VLLMHBMOutOfMemory",
                 labels=labels_of({"alertname": "VLLMHBMOutOfMemory", "target": target}),
                 annotations=(), state=AlertState.FIRING, value=1.0, active_at_ms=at_ms,
                 last_eval_ms=at_ms, fired_at_ms=at_ms)


def _excerpts(db, incident_id: int) -> list:
    detail = queries.get_incident(db, incident_id)
    assert detail is not None
    return [e for e in detail.timeline if e.kind == "log_excerpt"]


def test_events_before_the_incident_are_attached_when_it_opens(incident_db):
    record_log_events(incident_db, [_event("gemma", T0 - 60_000), _event("other", T0 - 60_000),
                                    _event("gemma", T0 - 3_600_000)])  # too old
    tracker = IncidentTracker(incident_db)
    tracker.process([_firing("gemma", T0)], T0)
    (incident,) = queries.list_incidents(incident_db)
    (excerpt,) = _excerpts(incident_db, incident.id)
    assert excerpt.message == "hbm_oom xla_hbm_resource_exhausted in cloud-logging:proj"
    assert "RESOURCE_EXHAUSTED" in excerpt.data["excerpt"][1]
    text = render.render_detail(queries.get_incident(incident_db, incident.id))
    assert "    | jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED" in text


def test_events_while_open_are_attached_once_and_not_after_resolution(incident_db):
    tracker = IncidentTracker(incident_db)
    tracker.process([_firing("gemma", T0)], T0)
    (incident,) = queries.list_incidents(incident_db)
    assert _excerpts(incident_db, incident.id) == []
    record_log_events(incident_db, [_event("gemma", T0 + 5_000)])
    assert len(_excerpts(incident_db, incident.id)) == 1
    resolved = Alert(**{**{f: getattr(_firing("gemma", T0), f) for f in Alert.__slots__},
                        "state": AlertState.INACTIVE, "resolved_at_ms": T0 + 10_000})
    tracker.process([resolved], T0 + 10_000)
    record_log_events(incident_db, [_event("gemma", T0 + 20_000)])
    assert len(_excerpts(incident_db, incident.id)) == 1
