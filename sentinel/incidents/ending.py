"""When an incident ends: the notice core's rule (`notice.over`) read off its rows.

An incident resolves when every alert of it resolved and, for a failure of its
target (crash, down, health, stall, start-up: joining.FAILURE_ALERTS), the target
serves again: its last scrape answered (issue 48: a crash counter's 5-minute
window ending resolved the incident while the server was still down and its
down and health alerts fired). A crash counter (`EVENT_ALERTS`) stops holding the
incident open once a lasting failure alert of it (down, health, stall) resolved
and the target serves: the server came back, the counter's window need not end.
An incident of crash counters alone still ends with its window: without a
failure seen to end, a scrape that answers in the seconds a dying server still
serves /metrics is no evidence the crash is over.

`Serving(target)` is True or False from the target's scrapes since Sentinel
started (False before the first), None when Sentinel does not scrape it (then
its alerts alone decide, as before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sentinel.incidents.convert import dt_to_ms, labels_from_json
from sentinel.incidents.models import Incident, IncidentAlert, IncidentAlertState
from sentinel.incidents.notice import AlertEntry, Notice, over
from sentinel.model import label_value

Serving = Callable[[str], bool | None]

# The crash signatures' counters (rules/vllm.yaml, group vllm-crashes): an event, not a
# condition that lasts while the failure does.
EVENT_ALERTS = frozenset({
    "VLLMHBMOutOfMemory", "VLLMCUDAOutOfMemory", "VLLMHostOOMKilled", "VLLMEngineDead",
    "VLLMInterconnectFailure", "VLLMUnclassifiedCrash", "VLLMStartupFailure",
})


def alertname(row: IncidentAlert) -> str:
    """The row's own alert name."""
    return label_value(labels_from_json(row.labels), "alertname")


def as_notice(incident: Incident, rows: Iterable[IncidentAlert], failures: frozenset[str],
              serving: bool | None) -> Notice:
    """The incident as the notice core sees it, for its rule of resolution."""
    named = [(alertname(r), r) for r in rows]
    lasting = any(n in failures and n not in EVENT_ALERTS for n, _ in named)
    alerts = tuple(AlertEntry(
        name, r.state == IncidentAlertState.FIRING, dt_to_ms(r.fired_at), (),
        failure=name in failures, event=lasting and name in EVENT_ALERTS) for name, r in named)
    return Notice(incident.id, incident.target, dt_to_ms(incident.opened_at), alerts,
                  serving=serving)


def ends(incident: Incident, rows: Iterable[IncidentAlert], failures: frozenset[str],
         serving: Serving | None) -> bool:
    """Whether the incident is over now."""
    rows = list(rows)
    known = serving(incident.target) if serving is not None and incident.target else None
    if known is None:  # no evidence of the target's own: its alerts alone decide
        return bool(rows) and all(r.state == IncidentAlertState.RESOLVED for r in rows)
    return over(as_notice(incident, rows, failures, known))
