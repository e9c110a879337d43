"""One incident per failure: which alerts of one target join the incident already open for it.

One crash of a vLLM server raises several alerts, each true in its own way: the
crash signature from the log, then `up == 0` while it restarts, then the /health
probe failing. Opened apart, they were three incidents and three pages for one
failure (issue 33). A failure alert that fires on a target where an incident of
another failure alert opened within `JOIN_WINDOW_MS` joins that incident: its
rows and timeline go there (with a note saying why), and it pages nothing of its
own. Alerts outside `FAILURE_ALERTS` (capacity, latency) open their own
incidents as before: they are not one failure's symptoms.

These are defaults: `IncidentTracker(join_alerts=..., join_window_ms=...)`
takes others, and an empty set turns joining off. The daemon passes the window
from `notify.join_window` (default `JOIN_WINDOW_MS`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.incidents.models import Incident, IncidentAlert, IncidentStatus

FAILURE_ALERTS = frozenset({
    # A crash named by its log signature (rules/vllm.yaml, group vllm-crashes): the
    # first and best evidence of the failure, usually the incident the others join.
    "VLLMHBMOutOfMemory", "VLLMCUDAOutOfMemory", "VLLMHostOOMKilled", "VLLMEngineDead",
    "VLLMInterconnectFailure", "VLLMUnclassifiedCrash",
    # A server that cannot come back up: the crash's restart failing.
    "VLLMStartupFailure",
    # The crashed (or restarting) server stops answering scrapes...
    "VLLMTargetDown",
    # ...and its /health probe, a minute later.
    "VLLMHealthCheckFailing",
    # A wedged engine: the failure before (or instead of) a crash.
    "VLLMEngineStalled",
})
# Long enough for a warm restart that is verified (seconds) or fails (minutes) to raise
# its down and health alerts; short enough that tomorrow's crash is its own incident.
JOIN_WINDOW_MS = 10 * 60_000


def joined_incident(s: Session, target: str, fingerprints: list[str]
                    ) -> Incident | None:
    """The open incident of the target that one of these alerts joined before, if any."""
    if not target or not fingerprints:
        return None
    return s.scalars(select(Incident).join(IncidentAlert).where(
        Incident.status == IncidentStatus.OPEN.value, Incident.target == target,
        IncidentAlert.fingerprint.in_(fingerprints)).limit(1)).one_or_none()


def incident_to_join(s: Session, target: str, alertname: str, joins: frozenset[str],
                     window_ms: int, now: datetime) -> Incident | None:
    """The target's open incident of a failure alert opened within the window, to join."""
    if not target or alertname not in joins:
        return None
    return s.scalars(select(Incident).where(
        Incident.status == IncidentStatus.OPEN.value, Incident.target == target,
        Incident.alertname.in_(sorted(joins)), Incident.alertname != alertname,
        Incident.opened_at >= now - timedelta(milliseconds=window_ms))
        .order_by(Incident.opened_at, Incident.id).limit(1)).one_or_none()
