"""Who was told, who was not and why, at a glance (issue 48): the incident page's "Told"
box and the incident list's marker, read through the API service from timeline lines
written by the real tracker, dispatcher and sender (a webhook on loopback), served by
the daemon's real HTTP listener."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from notify_helpers import LoopbackReceiver, loopback  # noqa: F401
from sqlalchemy import insert, select
from test_notify_delivery import T0, S, alert
from test_notify_who_was_told import _stage

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.models import Incident, IncidentAlert, TimelineEvent

pytestmark = pytest.mark.integration


def test_the_page_and_the_list_say_who_was_paged_inhibited_or_held(
        tmp_path: Path, loopback: LoopbackReceiver) -> None:  # noqa: F811
    # The story runs on a database of its own, then its rows are copied into the
    # daemon's (a daemon started on them would reconcile them: none of their alerts
    # fires in its rule engine).
    db = Database(f"sqlite:///{tmp_path / 'story.db'}")
    db.upgrade()
    st = _stage(db, loopback, wait_ms=0)
    down = alert("gpu-a", "VLLMTargetDown", severity="critical")
    (paged,) = st.tracker.process([down], T0)
    st.tick(T0)
    kv = alert("gpu-a", "KVCacheHigh", at=T0 + S, severity="warning")
    (inhibited,) = st.tracker.process([down, kv], T0 + S)
    st.tick(T0 + S)
    # A third incident whose page is held while a policy acts (act first, then tell once).
    acting = IncidentTracker(db, outbox=st.tracker.outbox, act_first=lambda a: (
        120 * S, "policy restart acts"))
    (held,) = acting.process([alert("tpu-b", "VLLMHBMOutOfMemory", at=T0 + 2 * S,
                                    severity="critical", category="hbm_oom")], T0 + 2 * S)
    st.tick(T0 + 6 * 60 * S)  # the group's group_interval (5 min) after the page
    assert len(loopback.accepted()) == 1  # the premise: one page, the warning muted
    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:0\n")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    try:
        _copy(db, app.pipeline.tracker.db)  # type: ignore[union-attr]
        host, port = app.status.address  # type: ignore[union-attr]
        base = f"http://{host}:{port}"
        api = httpx.get(f"{base}/api/v1/incidents/{paged.incident_id}").json()["told"]
        assert api["told"] == [{"receiver": "oncall",
                                "got": [{"what": "page", "at": "2026-11-21T10:00:05.000Z"}]}]
        page = httpx.get(f"{base}/incidents/{paged.incident_id}").text
        box = page.split("<section id=told", 1)[1].split("</section>", 1)[0]
        assert "<b>oncall</b>: page 2026-11-21 10:00:05" in box
        # Near the top: before the labels and the timeline.
        assert page.index("<section id=told") < page.index("<h2>Labels</h2>")

        api = httpx.get(f"{base}/api/v1/incidents/{inhibited.incident_id}").json()["told"]
        assert api["told"] == []
        (n,) = api["not_told"]
        assert (n["receiver"], n["reason"], n["ended_at"]) == ("oncall", "inhibited", None)
        assert n["detail"].startswith("oncall: not notified, inhibited by VLLMTargetDown")
        box = httpx.get(f"{base}/incidents/{inhibited.incident_id}").text.split(
            "<section id=told", 1)[1].split("</section>", 1)[0]
        assert "not told <b>oncall</b>: inhibited" in box

        listing = httpx.get(f"{base}/").text
        assert "paged oncall 10:00</div>" in listing
        assert '<div class="told" title="2026-11-21 10:06:05">not paged: inhibited 10:06' \
            in listing
        rows = {i["id"]: i["told"] for i in httpx.get(f"{base}/api/v1/incidents").json()[
            "incidents"]}
        assert rows[paged.incident_id]["text"] == "paged oncall"
        assert rows[inhibited.incident_id]["text"] == "not paged: inhibited"

        box = httpx.get(f"{base}/incidents/{held.incident_id}").text.split(
            "<section id=told", 1)[1].split("</section>", 1)[0]
        assert "not told: held while Sentinel acts" in box and "page held up to 120s" in box
        assert rows[held.incident_id]["text"] == "not paged: held while Sentinel acts"
        assert "not paged: held while Sentinel acts 10:00</div>" in listing
    finally:
        app.stop(2)
        db.dispose()


def _copy(src: Database, dst: Database) -> None:
    with src.session() as s:
        rows = {m: [{c.key: getattr(r, c.key) for c in m.__table__.columns}
                    for r in s.scalars(select(m))]
                for m in (Incident, IncidentAlert, TimelineEvent)}
    with dst.session() as s:
        for m, items in rows.items():
            if items:
                s.execute(insert(m), items)
