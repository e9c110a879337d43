"""What people do to an incident, below the web page: acknowledge (which stops repeats and
escalations), owner, notes, diagnosis requests; on SQLite and PostgreSQL, time passed in."""

from __future__ import annotations

import pytest
from notify_helpers import LoopbackReceiver, make_stage
from test_notify_delivery import MIN, T0, alert, hook, outbox_rows

from sentinel.config.notify import RouteConfig
from sentinel.incidents import Database, get_incident, list_incidents
from sentinel.incidents import operator as op


def _opened(db: Database, loopback: LoopbackReceiver) -> tuple[object, int]:
    cfg = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["alertname"],
                                      "group_wait": "0s", "group_interval": "5m",
                                      "repeat_interval": "1h"})
    stage = make_stage(db, {"oncall": hook(loopback)}, cfg)
    stage.tracker.process([alert("a")], T0)
    return stage, list_incidents(db)[0].id


def _timeline(db: Database, iid: int) -> list[tuple[str, str]]:
    detail = get_incident(db, iid)
    assert detail is not None
    return [(e.kind, e.message) for e in detail.timeline]


def test_acknowledged_incident_is_not_repeated(incident_db: Database,
                                               loopback: LoopbackReceiver) -> None:
    stage, iid = _opened(incident_db, loopback)
    stage.tick(T0)  # the first page
    assert op.acknowledge(incident_db, iid, "lead", T0 + MIN).changed
    for minute in range(5, 200, 5):  # past three repeat intervals
        stage.tick(T0 + minute * MIN)
    assert len(loopback.accepted()) == 1
    assert ("acknowledged", "acknowledged by lead: no more repeats or escalations") in \
        _timeline(incident_db, iid)


def test_unacknowledged_incident_is_repeated(incident_db: Database,
                                             loopback: LoopbackReceiver) -> None:
    """The control of the test above: the same ticks without the acknowledgement repeat."""
    stage, _ = _opened(incident_db, loopback)
    for minute in range(0, 200, 5):
        stage.tick(T0 + minute * MIN)
    assert len(loopback.accepted()) == 4


def test_a_new_alert_of_an_acknowledged_incident_is_still_sent(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage, iid = _opened(incident_db, loopback)
    stage.tick(T0)
    op.acknowledge(incident_db, iid, "lead", T0 + MIN)
    stage.tracker.process([alert("a"), alert("b", at=T0 + 2 * MIN)], T0 + 2 * MIN)
    for minute in range(5, 30, 5):
        stage.tick(T0 + minute * MIN)
    assert len(loopback.accepted()) == 2  # news is news: only repeats are held back


@pytest.mark.parametrize("acked", [False, True])
def test_acknowledged_incident_is_not_escalated(incident_db: Database,
                                                loopback: LoopbackReceiver, acked: bool) -> None:
    loopback.status_by_path["/gone"] = 404
    receivers = {"oncall": hook(loopback, "oncall", "/gone"),
                 "pager": hook(loopback, "pager", "/pager")}
    route = RouteConfig.model_validate({"receiver": "oncall", "group_wait": "0s"})
    stage = make_stage(incident_db, receivers, route, fallback="pager")
    stage.tracker.process([alert("a")], T0)
    iid = list_incidents(incident_db)[0].id
    if acked:
        op.acknowledge(incident_db, iid, "lead", T0)
    stage.tick(T0)
    stage.tick(T0 + 1000)
    assert [r.receiver for r in outbox_rows(incident_db)] == (
        ["oncall"] if acked else ["oncall", "pager"])
    assert len(loopback.accepted("/pager")) == (0 if acked else 1)
    said = [m for _, m in _timeline(incident_db, iid)]
    assert any(m.startswith("not escalated (acknowledged)") for m in said) == acked


def test_acknowledge_twice_owner_and_notes(incident_db: Database,
                                           loopback: LoopbackReceiver) -> None:
    _, iid = _opened(incident_db, loopback)
    assert op.acknowledge(incident_db, iid, "lead", T0).changed
    again = op.acknowledge(incident_db, iid, "other", T0 + 1)
    assert not again.changed and again.message == "already acknowledged by lead"
    assert op.assign(incident_db, iid, "  Ada   Lovelace ", "lead", T0 + 2).changed
    assert not op.assign(incident_db, iid, "Ada Lovelace", "lead", T0 + 3).changed
    assert op.assign(incident_db, iid, "", "lead", T0 + 4).message == "owner removed by lead"
    op.add_note(incident_db, iid, "<b>restarted</b> by hand", "lead", T0 + 5)
    with pytest.raises(ValueError, match="empty"):
        op.add_note(incident_db, iid, "   ", "lead", T0)
    with pytest.raises(ValueError, match="at most"):
        op.add_note(incident_db, iid, "x" * (op.MAX_NOTE + 1), "lead", T0)
    with pytest.raises(LookupError):
        op.acknowledge(incident_db, iid + 1000, "lead", T0)
    kinds = [k for k, _ in _timeline(incident_db, iid)]
    assert kinds.count("acknowledged") == 1 and kinds.count("assigned") == 2
    assert ("note", "lead: <b>restarted</b> by hand") in _timeline(incident_db, iid)


def test_diagnosis_request_is_claimed_once(incident_db: Database,
                                           loopback: LoopbackReceiver) -> None:
    _, iid = _opened(incident_db, loopback)
    assert op.request_diagnosis(incident_db, iid, "lead", T0).changed
    assert not op.request_diagnosis(incident_db, iid, "lead", T0 + 1).changed
    assert op.claim_diagnosis_requests(incident_db) == [iid]
    assert op.claim_diagnosis_requests(incident_db) == []
    assert ("diagnosis_requested", "diagnosis requested by lead") in _timeline(incident_db, iid)
