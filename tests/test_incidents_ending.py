"""An incident ends when its failure ends (issue 48): every alert of it resolved and its
target serving again, through the real tracker on SQLite and PostgreSQL, time handed in.

The defects: a crash whose restart was refused (or that had no policy) was `resolved` at
+300 s, when the crash counter's 5-minute window ended, while the server was down and its
down and health alerts fired; a crash whose server came back by itself at +150 s resolved
at +305 s, on the counter's window, not when it served again.
"""

from __future__ import annotations

from test_incidents_tracker import T0, S, alert, resolved

from sentinel.incidents import Database, IncidentTracker, get_incident, list_incidents
from sentinel.incidents.ending import EVENT_ALERTS
from sentinel.model import NotificationKind

MIN = 60 * S


class Target:
    """What the daemon's scrapes say of each target (DataReadiness.serving's answers)."""

    def __init__(self) -> None:
        self.up: dict[str, bool | None] = {"gemma-26b": False}

    def serving(self, target: str) -> bool | None:
        return self.up.get(target)


def _crash_down_health(tracker: IncidentTracker):  # noqa: ANN202
    crash = alert(name="VLLMHBMOutOfMemory", severity="critical")
    (page,) = tracker.process([crash], T0)
    # Delivered (the daemon's sender records it): a restarted tracker knows it was paged.
    tracker.record_notification(page.incident_id, "oncall", page.kind, True, "", T0,
                                [a.fingerprint for a in page.alerts])
    down = alert(name="VLLMTargetDown", active_at=T0 + 5 * S, fired_at=T0 + 35 * S)
    health = alert(name="VLLMHealthCheckFailing", active_at=T0 + 10 * S, fired_at=T0 + 70 * S)
    assert tracker.process([crash, down], T0 + 35 * S) == []
    assert tracker.process([crash, down, health], T0 + 70 * S) == []
    return page, crash, down, health


def test_the_crash_counters_window_ending_while_the_server_is_down_resolves_nothing(
        incident_db: Database) -> None:
    target = Target()
    tracker = IncidentTracker(incident_db, serving=target.serving)
    page, crash, down, health = _crash_down_health(tracker)
    assert "VLLMHBMOutOfMemory" in EVENT_ALERTS
    assert tracker.process([resolved(crash, T0 + 300 * S), down, health], T0 + 300 * S) == []
    assert tracker.process([down, health], T0 + 7 * MIN) == []
    (incident,) = list_incidents(incident_db)
    assert incident.status == "open"
    # The down and health alerts end, but the last scrape failed: still not over.
    assert tracker.process([resolved(down, T0 + 8 * MIN), resolved(health, T0 + 8 * MIN)],
                           T0 + 8 * MIN) == []
    assert list_incidents(incident_db)[0].status == "open"
    target.up["gemma-26b"] = True
    (end,) = tracker.process([], T0 + 8 * MIN + 5 * S)
    assert end.kind is NotificationKind.RESOLVED and end.incident_id == page.incident_id
    assert [a.name for a in end.alerts] == ["VLLMHBMOutOfMemory"]  # the page's own, once
    assert list_incidents(incident_db)[0].status == "resolved"
    assert tracker.process([], T0 + 9 * MIN) == []


def test_a_crash_whose_server_serves_again_resolves_then_not_on_the_counters_window(
        incident_db: Database) -> None:
    target = Target()
    tracker = IncidentTracker(incident_db, serving=target.serving)
    page, crash, down, health = _crash_down_health(tracker)
    back = T0 + 150 * S
    target.up["gemma-26b"] = True
    (end,) = tracker.process([crash, resolved(down, back), resolved(health, back)], back)
    assert end.kind is NotificationKind.RESOLVED
    assert list_incidents(incident_db)[0].status == "resolved"
    timeline = get_incident(incident_db, page.incident_id).timeline
    assert timeline[-1].message.endswith("its target serves again")
    # The counter still fires from its window, then ends: no new incident, no new page.
    assert tracker.process([crash], back + 15 * S) == []
    assert tracker.process([resolved(crash, T0 + 300 * S)], T0 + 300 * S) == []
    assert len(list_incidents(incident_db)) == 1


def test_a_restart_of_sentinel_resolves_nothing_before_the_target_is_seen_serving(
        incident_db: Database) -> None:
    target = Target()
    tracker = IncidentTracker(incident_db, serving=target.serving)
    page, crash, down, health = _crash_down_health(tracker)
    at = T0 + 3 * MIN
    # Sentinel restarts; the restored rules no longer fire these (a rule was removed, say),
    # and no scrape has answered yet: reconcile resolves the alerts, not the incident.
    again = IncidentTracker(incident_db, serving=target.serving)
    assert again.reconcile([], at) == []
    assert list_incidents(incident_db)[0].status == "open"
    target.up["gemma-26b"] = True
    (end,) = again.process([], at + 5 * S)
    assert end.kind is NotificationKind.RESOLVED and end.incident_id == page.incident_id


def test_a_target_sentinel_does_not_scrape_ends_with_its_alerts(
        incident_db: Database) -> None:
    tracker = IncidentTracker(incident_db, serving=lambda target: None)
    crash = alert(name="VLLMHBMOutOfMemory")
    tracker.process([crash], T0)
    (end,) = tracker.process([resolved(crash, T0 + 300 * S)], T0 + 300 * S)
    assert end.kind is NotificationKind.RESOLVED
