"""A fleet-wide failure is diagnosed once (issue 49): one request to the model for the fleet
incident, with one member's evidence; its quiet members are not asked about and show the
fleet's runbook. The simulator is the model endpoint; SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from diagnose_helpers import CRASH_LOG, STATIC, T0, config, open_incident, runbooks
from notify_helpers import LoopbackReceiver, loopback, make_stage  # noqa: F401
from sqlalchemy import select
from test_notify_delivery import hook

from sentinel.config.notify import RouteConfig
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.fleet import FleetPolicy
from sentinel.incidents.fleet_hook import FleetCorrelator
from sentinel.incidents.log_events import record_log_events
from sentinel.incidents.models import Incident, TimelineKind
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, LogEvent, labels_of
from sentinel.respond.diagnose import records
from sentinel.respond.diagnose.annotations import session_runbook_annotations
from sentinel.respond.diagnose.worker import DiagnosisWorker
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.routing import build_route
from sentinel.sim import SimServer, start_sim

pytestmark = pytest.mark.integration

MEMBERS = [f"tpu-{i:02d}" for i in range(12)]


@pytest.fixture
def model() -> Iterator[SimServer]:
    server = start_sim(max_model_len=4096)
    yield server
    server.stop()


def fleet_storm(db: Database) -> dict[str, int]:
    """Twelve targets crash at once, each with its own excerpt: one fleet incident. The
    incident ids by target, the fleet's under ""."""
    record_log_events(db, [LogEvent(
        target=t, source="file:/var/log/vllm.log", signature="xla_hbm_oom",
        category="hbm_oom", severity="critical", t_ms=T0 - 5000, line_no=12,
        excerpt=CRASH_LOG, runbook=STATIC) for t in MEMBERS], now_ms=T0)
    alerts = [Alert(group="vllm", rule="VLLMHBMOutOfMemory",
                    labels=labels_of({"alertname": "VLLMHBMOutOfMemory", "target": t,
                                      "severity": "critical"}),
                    annotations=labels_of({"summary": f"HBM OOM on {t}"}),
                    state=AlertState.FIRING, value=1.0, active_at_ms=T0, last_eval_ms=T0,
                    fired_at_ms=T0) for t in MEMBERS]
    tracker = IncidentTracker(db, fleet=FleetCorrelator(FleetPolicy(min_targets=10)))
    tracker.process(alerts, T0)
    with db.session() as s:
        return {i.target: i.id for i in s.query(Incident).all()}


def test_one_request_for_the_fleet_and_members_point_to_its_runbook(
        incident_db: Database, model: SimServer) -> None:
    ids = fleet_storm(incident_db)
    alone = open_incident(incident_db, target="tpu-other", now_ms=T0 + 1000)  # not fleet-wide
    fleet_id = ids[""]
    assert [p.incident_id for p in records.pending(incident_db)] == sorted([fleet_id, alone])
    worker = DiagnosisWorker(incident_db, config([{"name": "m0", "url": model.url,
                                                   "timeout": "30s"}]))
    assert sorted(worker.tick(T0 + 2000)) == sorted([fleet_id, alone])
    assert len(model.chat_requests) == 2  # not 13: one for the fleet, one for tpu-other
    fleet_prompt = next(b for b in model.chat_requests
                        if "fleet-wide" in b["messages"][-1]["content"])
    text = fleet_prompt["messages"][-1]["content"]
    assert f"Incident #{fleet_id}" in text and "on 12 targets" in text
    assert "<<<LOG" in text and "hbm_oom xla_hbm_oom" in text  # a member's own excerpt
    (data,) = runbooks(incident_db, fleet_id)
    assert data["source"] == "model" and data["validated"] is True
    for t in MEMBERS:
        assert runbooks(incident_db, ids[t]) == []  # nothing stored on the member itself...
        shown = records.runbook_events(incident_db, ids[t])  # ...it shows the fleet's, last
        assert [d["source"] for d in shown] == ["static", "model"]
        assert shown[-1]["fleet_incident"] == fleet_id
        assert shown[-1]["runbook"] == data["runbook"]
    assert all("fleet_incident" not in d for d in records.runbook_events(incident_db, alone))
    # Done once: later ticks ask nothing more.
    assert worker.tick(T0 + 60_000) == [] and len(model.chat_requests) == 2


def test_the_fleet_runbook_updates_its_page(incident_db: Database,
                                            loopback: LoopbackReceiver) -> None:  # noqa: F811
    """The fleet's page goes at once; the model's runbook, stored on the fleet incident
    later, goes as an update of that page (same group key), as a target's would."""
    route = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["target"],
                                        "group_wait": "0s", "group_interval": "1m"})
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, route)
    stage.tracker.fleet = FleetCorrelator(FleetPolicy(), route=build_route(route, ["oncall"]),
                                          updates=stage.dispatcher.outbox)
    stage.tracker.process([_crash(t) for t in MEMBERS], T0)
    stage.tick(T0 + 1000)
    [page] = [r.json() for r in loopback.accepted()]
    assert isinstance(page, dict) and "runbook" not in page["alerts"][0]["annotations"]
    with incident_db.session() as s:
        fleet_id = s.scalar(select(Incident.id).where(Incident.target == ""))
    assert fleet_id is not None
    records.add_event(incident_db, fleet_id, ms_to_dt(T0 + 2000), TimelineKind.RUNBOOK,
                      "runbook", {"source": "model", "validated": True, "runbook": {
                          "summary": "HBM OOM everywhere: roll back the image",
                          "probable_cause": "a bad rollout", "evidence": [], "steps": [
                              "roll back"], "remediation": "none", "confidence": 0.9}})
    with incident_db.session() as s:
        updates = actfirst.updates(s, session_runbook_annotations, ms_to_dt(T0 + 3000))
        for receiver, update in updates:
            stage.dispatcher.outbox.add_message(s, receiver, update, T0 + 3000)
    assert len(updates) == 1
    stage.tick(T0 + 4000)
    bodies = [r.json() for r in loopback.accepted()]
    assert [b["status"] for b in bodies] == ["firing", "update"]  # type: ignore[index]
    update = bodies[1]
    assert isinstance(update, dict) and update["groupKey"] == page["groupKey"]
    assert "roll back the image" in update["alerts"][0]["annotations"]["runbook"]


def _crash(target: str) -> Alert:
    return Alert(group="vllm", rule="VLLMHBMOutOfMemory",
                 labels=labels_of({"alertname": "VLLMHBMOutOfMemory", "target": target,
                                   "severity": "critical"}),
                 annotations=labels_of({"summary": f"HBM OOM on {target}"}),
                 state=AlertState.FIRING, value=1.0, active_at_ms=T0, last_eval_ms=T0,
                 fired_at_ms=T0)
