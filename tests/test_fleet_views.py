"""A fleet incident as people and programs see it (issue 49): the API's list marks it with
its count, its detail has the members now, at peak and joined, the group's size, the
breakdown and a bounded list of members with their own incidents; a member links to
its fleet incident. Then the page (the daemon's real listener) says the same. Written by
the real tracker and fleet hook, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert, select
from test_fleet_incidents import NAME, POOLS, T0, TARGETS, S, alert, gone, tracker

from sentinel.api import fleet_view, history
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import Database
from sentinel.incidents.models import Incident, IncidentAlert, TimelineEvent
from sentinel.incidents.models_fleet import FleetMember

pytestmark = pytest.mark.integration

MIN = 60 * S


def storm(db: Database) -> tuple[int, dict[str, int]]:
    """12 targets, then 16 (past the 5-minute interval: an update), then 5 recover.
    The fleet incident's id, and each target's own incident id."""
    t = tracker(db, group_by=())
    t.process([alert(x) for x in TARGETS[:12]], T0)
    t.process([alert(x) for x in TARGETS[:16]], T0 + 6 * MIN)
    firing = [alert(x) for x in TARGETS[5:16]]
    t.process(firing + [gone(alert(x), T0 + 12 * MIN) for x in TARGETS[:5]], T0 + 12 * MIN)
    with db.session() as s:
        rows = s.execute(select(Incident.id, Incident.target)).all()
    own = {target: i for i, target in rows if target}
    (fleet_id,) = [i for i, target in rows if not target]
    return fleet_id, own


def test_the_api_shows_counts_breakdown_members_and_links(
        incident_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet_id, own = storm(incident_db)
    d = history.get_incident(incident_db, fleet_id)
    f = d["fleet"]
    assert (f["members_now"], f["members_peak"], f["members_joined"]) == (11, 16, 16)
    assert d["incident"]["fleet"] == {"members": 11, "joined": 16} and f["size"] == 20
    assert d["incident"]["alerts"] == 0  # the premise: no alert rows of its own
    # As the last message said (the update at 11, t05..t15): 10 in a100, 1 in h100.
    assert f["breakdown"] == {"pool": {
        "a100": sum(1 for t in TARGETS[5:16] if POOLS[t] == "a100"), "h100": 1}} == {
        "pool": {"a100": 10, "h100": 1}}
    members = f["members"]
    assert [m["target"] for m in members] == TARGETS[5:16] + TARGETS[:5]  # firing first
    assert all(m["incident_id"] == own[m["target"]] for m in members)
    assert [m["left_at"] is None for m in members] == [True] * 11 + [False] * 5
    assert {m["status"] for m in members[:11]} == {"open"}
    assert {m["status"] for m in members[11:]} == {"resolved"}
    assert f["members_more"] == 0 and d["fleet_incident"] is None
    # A member links to its fleet incident.
    m = history.get_incident(incident_db, own[TARGETS[7]])
    assert m["incident"]["fleet_incident_id"] == fleet_id and m["fleet"] is None
    assert m["fleet_incident"]["incident_id"] == fleet_id
    assert m["fleet_incident"]["quiet"] is True and "on 11 of 20" in m["fleet_incident"]["summary"]
    # The list: the fleet incident marked with its count, members with their fleet.
    rows = {i["id"]: i for i in history.list_incidents(incident_db, {}, T0 + 13 * MIN)[
        "incidents"]}
    assert rows[fleet_id]["fleet"] == {"members": 11, "joined": 16}
    assert rows[own[TARGETS[7]]]["fleet"] is None
    assert rows[own[TARGETS[7]]]["fleet_incident_id"] == fleet_id
    other = history.list_incidents(incident_db, {"target": "nowhere"}, T0)["incidents"]
    assert other == []
    # Bounded: a storm of thousands lists the first MEMBERS_SHOWN and counts the rest.
    monkeypatch.setattr(fleet_view, "MEMBERS_SHOWN", 4)
    f = history.get_incident(incident_db, fleet_id)["fleet"]
    assert [m["target"] for m in f["members"]] == TARGETS[5:9] and f["members_more"] == 12
    # Resolved: nobody now, the peak kept.
    t = tracker(incident_db, group_by=())
    t.process([gone(alert(x), T0 + 20 * MIN) for x in TARGETS[5:16]], T0 + 20 * MIN)
    f = history.get_incident(incident_db, fleet_id)["fleet"]
    assert (f["members_now"], f["members_peak"], f["members_joined"]) == (0, 16, 16)


def test_peak_is_the_most_members_at_once() -> None:
    from datetime import UTC, datetime, timedelta
    t = datetime(2026, 1, 1, tzinfo=UTC)
    m = timedelta(minutes=1)
    assert fleet_view._sweep_peak([]) == 0
    assert fleet_view._sweep_peak([(t, t + m), (t + m, None)]) == 1  # leave, then join
    assert fleet_view._sweep_peak([(t, None), (t, t + 2 * m), (t + m, None)]) == 3


def test_the_page_shows_the_fleet_and_the_member_its_link(
        tmp_path: Path, incident_db: Database) -> None:
    if "postgresql" in incident_db.url:
        pytest.skip("the page reads the daemon's own SQLite; the API test covers PostgreSQL")
    fleet_id, own = storm(incident_db)
    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:0\n")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    try:
        _copy(incident_db, app.pipeline.tracker.db)  # type: ignore[union-attr]
        host, port = app.status.address  # type: ignore[union-attr]
        base = f"http://{host}:{port}"
        page = httpx.get(f"{base}/incidents/{fleet_id}").text
        assert f"{NAME} on 11 targets (fleet)</h1>" in page
        box = page.split("<section id=fleet", 1)[1].split("</section>", 1)[0]
        assert "<dd id=fleet-now>11</dd>" in box and "<dd id=fleet-peak>16</dd>" in box
        assert "<dd id=fleet-joined>16</dd>" in box
        assert "<li>pool=a100: 10</li>" in box and "<li>pool=h100: 1</li>" in box
        for target in TARGETS[:16]:
            assert f'<a href="/incidents/{own[target]}">#{own[target]}</a>' in box
        member = httpx.get(f"{base}/incidents/{own[TARGETS[7]]}").text
        link = member.split("<p id=fleet-link>", 1)[1].split("</p>", 1)[0]
        assert f'<a href="/incidents/{fleet_id}">#{fleet_id}</a>' in link
        assert "runbook and remediation are the fleet" in link
        listing = httpx.get(f"{base}/").text
        assert "<span class=fleet>fleet: 11 targets</span>" in listing
        assert f'in <a href="/incidents/{fleet_id}">fleet #{fleet_id}</a>' in listing
        api = httpx.get(f"{base}/api/v1/incidents/{fleet_id}").json()
        assert api["fleet"]["members_peak"] == 16
    finally:
        app.stop(2)


def _copy(src: Database, dst: Database) -> None:
    """The story's rows into the daemon's database (a daemon started on them would
    reconcile them: none of their alerts fires in its rule engine)."""
    with src.session() as s:
        rows = {m: [{c.key: getattr(r, c.key) for c in m.__table__.columns}
                    for r in s.scalars(select(m))]
                for m in (Incident, IncidentAlert, TimelineEvent, FleetMember)}
    with dst.session() as s:
        for m, items in rows.items():
            if items:
                s.execute(insert(m), items)
