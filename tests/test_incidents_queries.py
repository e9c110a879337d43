"""Listing, showing and rendering incidents; persisted alert states."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from sentinel.incidents import Database, IncidentTracker, get_incident, list_incidents
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.render import (
    render_detail,
    render_detail_json,
    render_list,
    render_list_json,
)
from sentinel.model import Alert, AlertState, labels_of

T0 = 1_795_255_205_000  # 2026-11-21T10:00:05Z
S = 1000


def alert(name: str, target: str, fired_at: int, value: float = 4.0) -> Alert:
    return Alert(
        group="vllm", rule=name,
        labels=labels_of({"alertname": name, "target": target, "severity": "page"}),
        annotations=labels_of({"summary": f"{name} on {target}"}),
        state=AlertState.FIRING, value=value, active_at_ms=fired_at - 60 * S,
        last_eval_ms=fired_at, fired_at_ms=fired_at,
    )


@pytest.fixture
def populated(incident_db: Database) -> Database:
    """Four incidents: three open, one resolved, opened a minute apart."""
    tracker = IncidentTracker(incident_db)
    tracker.process([alert("VLLMRequestsQueued", "gemma-26b", T0)], T0)
    tracker.process([alert("VLLMDown", "gemma-26b", T0 + 60 * S)], T0 + 60 * S)
    tracker.process([alert("VLLMRequestsQueued", "gemma-9b", T0 + 120 * S)], T0 + 120 * S)
    down9 = alert("VLLMDown", "gemma-9b", T0 + 180 * S)
    tracker.process([down9], T0 + 180 * S)
    gone = replace(down9, state=AlertState.INACTIVE, resolved_at_ms=T0 + 240 * S)
    tracker.process([gone], T0 + 240 * S)
    return incident_db


def _keys(items: list) -> list[tuple[str, str]]:
    return [(i.alertname, i.target) for i in items]


def test_list_newest_first(populated: Database) -> None:
    assert _keys(list_incidents(populated)) == [
        ("VLLMDown", "gemma-9b"), ("VLLMRequestsQueued", "gemma-9b"),
        ("VLLMDown", "gemma-26b"), ("VLLMRequestsQueued", "gemma-26b")]
    assert len(list_incidents(populated, limit=2)) == 2


def test_list_filters(populated: Database) -> None:
    assert _keys(list_incidents(populated, status="resolved")) == [("VLLMDown", "gemma-9b")]
    assert len(list_incidents(populated, status="open")) == 3
    assert _keys(list_incidents(populated, alertname="VLLMDown")) == [
        ("VLLMDown", "gemma-9b"), ("VLLMDown", "gemma-26b")]
    assert _keys(list_incidents(populated, target="gemma-26b")) == [
        ("VLLMDown", "gemma-26b"), ("VLLMRequestsQueued", "gemma-26b")]
    assert _keys(list_incidents(populated, since=T0 + 120 * S)) == [
        ("VLLMDown", "gemma-9b"), ("VLLMRequestsQueued", "gemma-9b")]
    assert len(list_incidents(populated, since=ms_to_dt(T0) + timedelta(seconds=61))) == 2
    assert _keys(list_incidents(populated, status="open", target="gemma-9b")) == [
        ("VLLMRequestsQueued", "gemma-9b")]
    assert list_incidents(populated, alertname="Nope") == []


def test_list_rejects_bad_arguments(populated: Database) -> None:
    with pytest.raises(ValueError, match="unknown status"):
        list_incidents(populated, status="closed")
    with pytest.raises(ValueError, match="limit"):
        list_incidents(populated, limit=0)


def test_get_missing_incident_is_none(incident_db: Database) -> None:
    assert get_incident(incident_db, 12345) is None


def test_render_detail_has_header_alerts_and_timeline(populated: Database) -> None:
    [inc] = list_incidents(populated, status="resolved")
    detail = get_incident(populated, inc.id)
    assert detail is not None
    text = render_detail(detail)
    assert text.splitlines()[0] == f"Incident #{inc.id}  VLLMDown on gemma-9b  [resolved]"
    assert "resolved:  2026-11-21T10:04:05Z (after 1m00s)" in text
    timeline = text.split("Timeline:\n", 1)[1].splitlines()
    assert timeline == [
        "2026-11-21T10:02:05Z  pending  VLLMDown on gemma-9b: pending",
        "2026-11-21T10:03:05Z  firing  VLLMDown on gemma-9b: value 4",
        "2026-11-21T10:04:05Z  resolved  VLLMDown on gemma-9b: resolved",
        "2026-11-21T10:04:05Z  incident_resolved  incident resolved: 1 alert resolved",
    ]


def test_render_list_is_a_table(populated: Database) -> None:
    lines = render_list(list_incidents(populated)).splitlines()
    assert lines[0].split() == ["ID", "STATUS", "SEVERITY", "ALERT", "TARGET", "OPENED",
                                "DURATION", "ALERTS", "SUMMARY"]
    assert len(lines) == 5
    assert lines[1].split()[1:8] == ["resolved", "page", "VLLMDown", "gemma-9b",
                                     "2026-11-21T10:03:05Z", "1m00s", "0/1"]
    assert lines[2].split()[6] == "open"
    assert render_list([]) == "no incidents"


def test_json_forms_have_stable_keys_and_iso_times(populated: Database) -> None:
    items = json.loads(render_list_json(list_incidents(populated)))
    assert sorted(items[0]) == ["alertname", "alerts", "firing", "id", "opened_at",
                                "resolved_at", "severity", "status", "summary", "target",
                                "updated_at"]
    assert items[0]["opened_at"] == "2026-11-21T10:03:05Z"
    assert items[0]["resolved_at"] == "2026-11-21T10:04:05Z"
    assert items[1]["resolved_at"] is None
    detail = get_incident(populated, items[0]["id"])
    assert detail is not None
    doc = json.loads(render_detail_json(detail))
    assert doc["labels"] == {"alertname": "VLLMDown", "severity": "page", "target": "gemma-9b"}
    assert [e["kind"] for e in doc["timeline"]] == ["pending", "firing", "resolved",
                                                   "incident_resolved"]
    assert doc["timeline"][1]["at"] == "2026-11-21T10:03:05Z"
    assert doc["alert_list"][0]["state"] == "resolved"
    assert doc["alert_list"][0]["value"] == 4.0


def test_json_carries_non_finite_values(incident_db: Database) -> None:
    [n] = IncidentTracker(incident_db).process(
        [alert("X", "t", T0, value=math.inf)], T0)
    detail = get_incident(incident_db, n.incident_id)
    assert detail is not None
    doc = json.loads(render_detail_json(detail))
    assert doc["alert_list"][0]["value"] == "+Inf"
    assert doc["timeline"][-1]["data"]["value"] == "+Inf"


def test_alert_states_round_trip(incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db)
    alerts = [
        Alert(group="g1", rule="HighLatency",
              labels=(("alertname", "HighLatency"), ("target", "a"), ("z", "last")),
              annotations=(("description", "p99 = 0.1 + 0.2"), ("summary", "slow")),
              state=AlertState.FIRING, value=0.1 + 0.2, active_at_ms=T0 + 1,
              last_eval_ms=T0 + 60_001, fired_at_ms=T0 + 30_007,
              keep_firing_since_ms=T0 + 59_999),
        Alert(group="g1", rule="Queue", labels=labels_of({"alertname": "Queue"}),
              annotations=(), state=AlertState.PENDING, value=math.nan,
              active_at_ms=T0, last_eval_ms=T0),
        Alert(group="g2", rule="Down", labels=labels_of({"alertname": "Down", "b": "1"}),
              annotations=(), state=AlertState.INACTIVE, value=-math.inf,
              active_at_ms=T0, last_eval_ms=T0 + 5, fired_at_ms=T0 + 2, resolved_at_ms=T0 + 5),
        Alert(group="g2", rule="Tiny", labels=labels_of({"alertname": "Tiny"}),
              annotations=(), state=AlertState.FIRING, value=5e-324,
              active_at_ms=0, last_eval_ms=T0, fired_at_ms=T0),
    ]
    tracker.save_alert_states(alerts)
    loaded = tracker.load_alert_states()
    assert len(loaded) == 4
    assert math.isnan(loaded[1].value)
    assert [replace(a, value=0.0) for a in loaded] == [replace(a, value=0.0) for a in alerts]
    assert [a.value for a in loaded if not math.isnan(a.value)] == [0.1 + 0.2, -math.inf, 5e-324]
    # Saving replaces the whole set.
    tracker.save_alert_states(alerts[2:3])
    assert tracker.load_alert_states() == alerts[2:3]
    tracker.save_alert_states([])
    assert tracker.load_alert_states() == []


@pytest.mark.parametrize("filters", [
    {}, {"status": "open"}, {"alertname": "X"}, {"target": "t"}, {"since": 0},
    {"status": "resolved", "since": 0},
])
def test_listing_is_an_index_scan_without_sort(filters: dict, tmp_path: Path) -> None:
    # The million-incident target rests on this: every listing walks an
    # index in order and stops at LIMIT, never sorting the table.
    db = Database(f"sqlite:///{tmp_path / 'plan.db'}")
    db.upgrade()
    statements: list[tuple[str, tuple]] = []

    def capture(conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
        if statement.startswith("SELECT") and "FROM incidents" in statement:
            statements.append((statement, params))

    event.listen(db.engine, "before_cursor_execute", capture)
    list_incidents(db, **filters)
    event.remove(db.engine, "before_cursor_execute", capture)
    [(sql, params)] = statements
    with db.engine.connect() as conn:
        plan = " | ".join(r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params))
    db.dispose()
    assert "USING INDEX ix_incidents_" in plan
    assert "TEMP B-TREE" not in plan
