"""Issue 48: a joined alert's own routes are told, and joining never adds a page.

Below the daemon (tracker → dispatcher → sender → HTTP on loopback, time passed
in): an alert that joins an open incident (one failure, one incident) pages
nothing where the incident's page went; a receiver only it routes to is paged
when it is critical, else told once, as an update (webhook `status: update`),
that it joined; and that receiver hears the end only when the incident ends.
"""

from __future__ import annotations

from dataclasses import replace

from notify_helpers import LoopbackReceiver, make_stage

from sentinel.config.notify import RouteConfig
from sentinel.incidents import Database
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.notify.webhook import WebhookReceiver

T0 = 1_795_255_205_000
S = 1000


def alert(name: str, severity: str, at: int, target: str = "gpu-a") -> Alert:
    labels = labels_of({"alertname": name, "target": target, "severity": severity})
    return Alert(group="vllm", rule=name, labels=labels,
                 annotations=labels_of({"summary": f"{name} on {target}"}),
                 state=AlertState.FIRING, value=1.0, active_at_ms=at, last_eval_ms=at,
                 fired_at_ms=at)


def resolved(a: Alert, at: int) -> Alert:
    return replace(a, state=AlertState.INACTIVE, resolved_at_ms=at, last_eval_ms=at)


def hooks(lb: LoopbackReceiver, *names: str) -> dict[str, WebhookReceiver]:
    return {n: WebhookReceiver(n, lb.url(f"/{n}"), timeout_s=5) for n in names}


def told(lb: LoopbackReceiver, name: str) -> list[tuple[str, list[str]]]:
    """(status, alertnames) of each message the receiver accepted."""
    out = []
    for r in lb.accepted(f"/{name}"):
        body = r.json()
        assert isinstance(body, dict)
        out.append((body["status"], sorted(a["labels"]["alertname"] for a in body["alerts"])))
    return out


# The health probe's alert pages; a down target goes to chat, a stall to the ops team.
ROUTE = RouteConfig.model_validate({
    "receiver": "pager", "group_by": ["alertname", "target"], "group_wait": "0s",
    "group_interval": "1m", "repeat_interval": "4h",
    "routes": [{"matchers": ['alertname="VLLMTargetDown"'], "receiver": "chat"},
               {"matchers": ['alertname="VLLMEngineStalled"'], "receiver": "ops"}]})


def test_a_joined_warning_tells_its_route_an_update_a_critical_one_pages_its_route(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage = make_stage(incident_db, hooks(loopback, "pager", "chat", "ops"), ROUTE)
    health = alert("VLLMHealthCheckFailing", "critical", T0)
    stage.tracker.process([health], T0)
    stage.tick(T0)
    assert told(loopback, "pager") == [("firing", ["VLLMHealthCheckFailing"])]

    down = alert("VLLMTargetDown", "warning", T0 + 10 * S)
    stage.tracker.process([health, down], T0 + 10 * S)
    stage.tick(T0 + 10 * S)
    assert told(loopback, "chat") == [("update", ["VLLMTargetDown"])], "told, not paged"
    assert len(told(loopback, "pager")) == 1, "the page is not repeated"

    stall = alert("VLLMEngineStalled", "critical", T0 + 20 * S)
    stage.tracker.process([health, down, stall], T0 + 20 * S)
    stage.tick(T0 + 20 * S)
    assert told(loopback, "ops") == [("firing", ["VLLMEngineStalled"])], "critical: paged"

    # The down alert resolves while the incident goes on: chat hears nothing yet.
    stage.tracker.process([health, resolved(down, T0 + 30 * S), stall], T0 + 30 * S)
    stage.tick(T0 + 30 * S)
    stage.tick(T0 + 120 * S)
    assert told(loopback, "chat") == [("update", ["VLLMTargetDown"])], "no false resolve"
    end = T0 + 200 * S
    stage.tracker.process([resolved(health, end), resolved(stall, end)], end)
    for t in (end, end + 60 * S, end + 120 * S):
        stage.tick(t)
    assert told(loopback, "chat")[-1] == ("resolved", ["VLLMTargetDown"])
    assert told(loopback, "ops")[-1] == ("resolved", ["VLLMEngineStalled"])
    assert told(loopback, "pager")[-1][0] == "resolved"
    assert [s for s, _ in told(loopback, "pager")].count("firing") == 1


def test_a_joined_alert_pages_nothing_where_the_incidents_page_went(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    """One page per incident: the crash and its down alert both route to the pager, in
    groups of their own (group_by alertname); the down alert joined, so one page."""
    route = RouteConfig.model_validate({"receiver": "pager", "group_by": ["alertname"],
                                        "group_wait": "0s", "group_interval": "1m"})
    stage = make_stage(incident_db, hooks(loopback, "pager"), route)
    crash = alert("VLLMHBMOutOfMemory", "critical", T0)
    stage.tracker.process([crash], T0)
    stage.tick(T0)
    down = alert("VLLMTargetDown", "critical", T0 + 10 * S)
    stage.tracker.process([crash, down], T0 + 10 * S)
    for t in (T0 + 10 * S, T0 + 80 * S):
        stage.tick(t)
    assert told(loopback, "pager") == [("firing", ["VLLMHBMOutOfMemory"])]


def test_joined_in_the_evaluation_that_opens_the_incident(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    """The crash and its down alert in one evaluation: the incident's own intent goes
    first, so the down alert's route to the pager sees the page and adds none."""
    route = RouteConfig.model_validate({"receiver": "pager", "group_by": ["alertname"],
                                        "group_wait": "0s", "group_interval": "1m"})
    stage = make_stage(incident_db, hooks(loopback, "pager"), route)
    stage.tracker.process([alert("VLLMHBMOutOfMemory", "critical", T0),
                           alert("VLLMTargetDown", "critical", T0)], T0)
    stage.tick(T0)
    assert told(loopback, "pager") == [("firing", ["VLLMHBMOutOfMemory"])]
