"""Who was told, who was not, and why (issue 48), through the real tracker, dispatcher,
outbox and sender to a webhook on loopback, with time handed in.

- deploy/examples/gpu-fleet.yaml's inhibition (`VLLMTargetDown` mutes the target's other
  alerts) raced the 30 s group_wait: TargetDown fired, joined the crash's incident and
  paged nothing of its own, and muted the crash's page: nobody was paged. An inhibiting
  alert of the same incident now mutes nothing (the notice core's rule), and says so.
- A route in a mute time interval left no line on the timeline.
"""

from __future__ import annotations

import random

from notify_helpers import LoopbackReceiver, Stage, loopback  # noqa: F401
from test_notify_delivery import T0, S, alert, hook

from sentinel.config.notify import InhibitRuleConfig
from sentinel.incidents import Database, IncidentTracker, get_incident
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.mute import InhibitRule
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import Route
from sentinel.respond.notify.sender import RetryPolicy, Sender
from sentinel.timeintervals import TimeInterval

GPU_FLEET_INHIBIT = InhibitRuleConfig.model_validate({
    "source_matchers": ['alertname="VLLMTargetDown"'],
    "target_matchers": ['alertname!="VLLMTargetDown"'], "equal": ["target"]})


def _stage(db: Database, lb: LoopbackReceiver, *, wait_ms: int = 30 * S,
           muted: bool = False) -> Stage:
    outbox = Outbox()
    route = Route("0", "oncall", (), ("target",), wait_ms, 5 * 60 * S, 4 * 3600 * S, False, (),
                  mute_time_intervals=("nights",) if muted else ())
    settings = DispatchSettings(route, (InhibitRule.from_config(GPU_FLEET_INHIBIT),),
                                intervals={"nights": (TimeInterval(),)} if muted else {})
    return Stage(IncidentTracker(db, outbox=outbox), Dispatcher(db, outbox, settings),
                 Sender(db, {"oncall": hook(lb)}, outbox, RetryPolicy(1_000, 60_000, 3600_000),
                        rng=random.Random(1)))


def _firing(lb: LoopbackReceiver) -> list[str]:
    return [a["labels"]["alertname"] for r in lb.accepted()  # type: ignore[index]
            for a in r.json()["alerts"] if a["status"] == "firing"]


def test_the_gpu_examples_inhibition_and_a_join_still_page_the_crash_once(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = _stage(incident_db, loopback)
    crash = alert("gpu-a", "VLLMCUDAOutOfMemory", severity="critical")
    (n,) = st.tracker.process([crash], T0)
    st.tick(T0)
    down = alert("gpu-a", "VLLMTargetDown", at=T0 + 10 * S, severity="critical")
    assert st.tracker.process([crash, down], T0 + 10 * S) == []  # joined: nothing of its own
    st.tick(T0 + 10 * S)
    st.tick(T0 + 30 * S)  # the crash page's group_wait ends while TargetDown fires
    st.tick(T0 + 60 * S)
    assert _firing(loopback) == ["VLLMCUDAOutOfMemory"]
    notes = [e.message for e in get_incident(incident_db, n.incident_id).timeline
             if e.kind == "note"]
    assert any(m.startswith("oncall: notified though inhibited by VLLMTargetDown")
               and "same incident" in m for m in notes), notes


def test_another_incidents_inhibition_still_mutes_a_warning(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = _stage(incident_db, loopback, wait_ms=0)
    down = alert("gpu-a", "VLLMTargetDown", severity="critical")
    st.tracker.process([down], T0)
    st.tick(T0)
    st.tracker.process([down, alert("gpu-a", "KVCacheHigh", at=T0 + S, severity="warning")],
                       T0 + S)
    st.tick(T0 + S)
    st.tick(T0 + 6 * 60 * S)
    assert _firing(loopback) == ["VLLMTargetDown"]


def test_a_route_in_a_mute_time_interval_says_who_was_not_told(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = _stage(incident_db, loopback, wait_ms=0, muted=True)
    (n,) = st.tracker.process([alert("gpu-a", "KVCacheHigh")], T0)
    st.tick(T0)
    st.tick(T0 + 60 * S)
    assert loopback.accepted() == []
    notes = [e.message for e in get_incident(incident_db, n.incident_id).timeline
             if e.kind == "note"]
    assert notes.count("oncall: not notified yet, mute time interval nights") == 1, notes
