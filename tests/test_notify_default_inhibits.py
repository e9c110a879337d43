"""The shipped inhibitions (issue 33): a down target's serving alerts, a stalled engine's
latency alerts, page nothing of their own. Through the real tracker, outbox, dispatcher
and sender to a webhook on loopback, with time handed in."""

from __future__ import annotations

from notify_helpers import LoopbackReceiver, make_stage
from test_notify_delivery import T0, S, alert, hook

from sentinel.config import parse_config
from sentinel.config.notify import default_inhibit_rules
from sentinel.incidents import Database


def _paged(loopback: LoopbackReceiver) -> list[tuple[str, str]]:
    return sorted((a["labels"]["alertname"], a["labels"]["target"])
                  for r in loopback.accepted() for a in r.json()["alerts"]  # type: ignore[index]
                  if a["status"] == "firing")


def test_a_down_target_mutes_its_serving_alerts_not_another_targets(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, inhibit=default_inhibit_rules())
    stage.tracker.process([alert("a", "VLLMTargetDown")], T0)
    stage.tick(T0)
    stage.tracker.process([alert("a", "VLLMTargetDown"),
                           alert("a", "VLLMTimeToFirstTokenHigh", at=T0 + S),
                           alert("b", "VLLMTimeToFirstTokenHigh", at=T0 + S)], T0 + S)
    stage.tick(T0 + S)
    stage.tick(T0 + 2 * S)
    assert _paged(loopback) == [("VLLMTargetDown", "a"), ("VLLMTimeToFirstTokenHigh", "b")]


def test_a_stalled_engine_mutes_its_latency_alerts(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, inhibit=default_inhibit_rules())
    stage.tracker.process([alert("a", "VLLMEngineStalled")], T0)
    stage.tick(T0)
    stage.tracker.process([alert("a", "VLLMEngineStalled"),
                           alert("a", "VLLMInterTokenLatencyHigh", at=T0 + S)], T0 + S)
    stage.tick(T0 + S)
    assert _paged(loopback) == [("VLLMEngineStalled", "a")]


def test_they_are_the_default_and_an_empty_list_turns_them_off() -> None:
    assert parse_config({}).notify.inhibit_rules == default_inhibit_rules()
    assert parse_config({"notify": {"inhibit_rules": []}}).notify.inhibit_rules == ()
